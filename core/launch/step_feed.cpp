#include "launch/step_feed.h"

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "parallel/rendezvous_store.h"
#include "store/step_fields.h"

namespace rematlab::launch {
namespace {

constexpr const char* kQueue = "live_steps";

}  // namespace

bool step_feed_requested() {
  const char* value = std::getenv(kStepFeedVariable);
  return value && std::strcmp(value, "1") == 0;
}

void publish_step(c10d::Store& store, int rank, const StepMetrics& step) {
  const std::string text = nlohmann::json{{"rank", rank}, {"step", step_to_json(step)}}.dump();
  store.queuePush(kQueue, parallel::bytes_of(text));
}

std::vector<std::pair<int, StepMetrics>> take_published_steps(c10d::Store& store) {
  std::vector<std::pair<int, StepMetrics>> steps;
  for (int64_t left = store.queueLen(kQueue); left > 0; --left) {
    const std::vector<uint8_t> bytes = store.queuePop(kQueue, false);
    const nlohmann::json event = parse_json(parallel::text_of(bytes));
    steps.emplace_back(event.at("rank").get<int>(), step_from_json(event.at("step")));
  }
  return steps;
}

}  // namespace rematlab::launch
