// What recording every step in the runs database costs training. One training run, one
// process: the steps alternate in blocks between recorded (RunWriter::add_step) and not, so
// machine drift (±10 % here between minutes) falls on both sides alike. Reports the median step
// time of each side, their ratio, and the time the trainer's thread spends inside add_step.
//
//   build/bench/store_overhead [steps] [block] [threads] [aa]
// With "aa" nothing is recorded in either kind of block: the A/A control that shows how far the
// two sides differ by chance.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/posix_files.h"
#include "runtime/host_allocator.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "train/trainer.h"

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rematlab;
  configure_host_allocator_for_training();  // as rematlab-cli and rematlab do
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 10000;
  const int64_t block = argc > 2 ? std::atoll(argv[2]) : 100;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const bool control = argc > 4 && std::string(argv[4]) == "aa";

  const std::string db = files::join(
      files::temp_directory(), "rematlab-store-overhead-" + std::to_string(::getpid()) + ".sqlite");
  double recorded_ms_total = 0.0;
  std::vector<double> recorded, unrecorded;
  double enqueue_us = 0.0;
  {
    RunStore store(db);
    RunWriter writer(db);
    RunConfig config;
    config.model = model_preset("tiny");
    config.steps = steps;
    config.threads = threads;
    const int64_t run_id = writer.begin_run(std::nullopt, "overhead", config);
    Trainer trainer(config);
    std::mt19937 random(7);
    std::uniform_int_distribution<int> coin(0, 1);
    bool record = false;
    TrainerCallbacks callbacks;
    callbacks.on_step = [&](const StepMetrics& step) {
      if (step.step < block) return;  // warm-up block
      if (step.step % block == 0) record = coin(random) == 1;
      (record ? recorded : unrecorded).push_back(step.step_ms);
      if (record && !control) {
        const auto start = std::chrono::steady_clock::now();
        writer.add_step(run_id, step);
        enqueue_us +=
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
        recorded_ms_total += step.step_ms;
      }
    };
    const RunSummary summary = trainer.run(callbacks);
    writer.finish_run(run_id, summary);
    if (store.steps(run_id).size() != (control ? 0 : recorded.size())) {
      std::fprintf(stderr, "expected %zu recorded steps, found %zu\n", recorded.size(),
                   store.steps(run_id).size());
      return 1;
    }
  }
  for (const char* suffix : {"", "-wal", "-shm"}) files::remove_file(db + suffix);

  const double with_db = median(recorded);
  const double without_db = median(unrecorded);
  std::printf(
      "tiny, %lld steps in blocks of %lld, each recorded or not at random, %d thread(s)%s\n",
      static_cast<long long>(steps), static_cast<long long>(block), threads,
      control ? " - A/A control: nothing recorded" : "");
  std::printf("| steps | count | median step ms |\n|---|---|---|\n");
  std::printf("| recorded (add_step each) | %zu | %.4f |\n", recorded.size(), with_db);
  std::printf("| not recorded | %zu | %.4f |\n", unrecorded.size(), without_db);
  std::printf(
      "\nratio recorded/not: %.4f; add_step on the trainer's thread: %.2f us per step "
      "(%.4f %% of the recorded steps' time)\n",
      with_db / without_db, enqueue_us / static_cast<double>(recorded.size()),
      100.0 * enqueue_us / 1000.0 / std::max(recorded_ms_total, 1e-9));
  return 0;
}
