#include "parallel/comm_timer.h"

#include <algorithm>

namespace rematlab::parallel {
namespace {

using Span = std::pair<CommTimer::Clock::time_point, CommTimer::Clock::time_point>;

double milliseconds(CommTimer::Clock::duration duration) {
  return std::chrono::duration<double, std::milli>(duration).count();
}

double union_ms(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0.0;
  bool open = false;
  Span current;
  for (const Span& span : spans) {
    if (span.second <= span.first) continue;
    if (open && span.first <= current.second) {
      current.second = std::max(current.second, span.second);
      continue;
    }
    if (open) total += milliseconds(current.second - current.first);
    current = span;
    open = true;
  }
  if (open) total += milliseconds(current.second - current.first);
  return total;
}

}  // namespace

void CommTimer::launched(const c10::intrusive_ptr<c10d::Work>& work, bool device_timed) {
  Launched entry{Clock::now(), std::make_shared<std::atomic<int64_t>>(0), work.get(),
                 device_timed ? work : c10::intrusive_ptr<c10d::Work>()};
  if (!device_timed) {
    // Runs on Gloo's thread when the collective ends (or here, if it already has).
    std::weak_ptr<std::atomic<int64_t>> end = entry.end_ns;
    try {
      work->getFuture()->addCallback([end](c10::ivalue::Future&) {
        if (auto slot = end.lock()) slot->store(Clock::now().time_since_epoch().count());
      });
    } catch (const std::exception&) {
      // No future for this collective: waited() closes its interval.
    }
  }
  launched_.push_back(std::move(entry));
}

void CommTimer::waited(const c10::intrusive_ptr<c10d::Work>& work) {
  const int64_t now = Clock::now().time_since_epoch().count();
  for (Launched& entry : launched_) {
    int64_t unmarked = 0;
    if (entry.identity == work.get()) entry.end_ns->compare_exchange_strong(unmarked, now);
  }
}

void CommTimer::blocked(Clock::time_point start, Clock::time_point end) {
  blocked_.emplace_back(start, end);
}

double CommTimer::comm_ms() const {
  std::vector<Span> spans = blocked_;
  for (const Launched& entry : launched_) {
    Clock::time_point end = entry.start;
    if (entry.device_work) {
      try {
        end += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::milli>(entry.device_work->getDuration()));
      } catch (const std::exception&) {
        // No timing events on this work: its interval stays empty.
      }
    } else if (const int64_t done = entry.end_ns->load(); done > 0) {
      end = Clock::time_point(Clock::duration(done));
    }
    spans.emplace_back(entry.start, end);
  }
  return union_ms(std::move(spans));
}

double CommTimer::wait_ms() const { return union_ms(blocked_); }

void CommTimer::reset() {
  launched_.clear();
  blocked_.clear();
}

void CommTimer::report(StepMetrics& metrics) {
  metrics.comm_ms = comm_ms();
  metrics.comm_wait_ms = wait_ms();
  reset();
}

}  // namespace rematlab::parallel
