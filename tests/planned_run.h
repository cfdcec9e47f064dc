// Runs the RematLab command a `layout --json` answer exports for its best layout, three steps
// (the first also makes AdamW's moments, which its activation peak would count), and checks
// that each rank measured what the planner predicted for it: its model states to the byte, its
// activations within 5 %. Shared by the planner's suites that run a planned layout here.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace rematlab::testing {

// The exported RematLab command run for three steps: its JSON (empty, with the test failed, when
// the command did not run).
inline nlohmann::json run_exported(const nlohmann::json& plan) {
  const std::string command = plan["exports"]["rematlab"]["text"];
  if (command.rfind("rematlab-cli run ", 0) != 0) {
    ADD_FAILURE() << "no RematLab command: " << command;
    return {};
  }
  const auto ran =
      cli(command.substr(std::string("rematlab-cli ").size()) + " --steps 3 --threads 1 --json");
  if (ran.exit_code != 0) {
    ADD_FAILURE() << command << "\n" << ran.err;
    return {};
  }
  const nlohmann::json run = last_line_json(ran.out);
  EXPECT_EQ(run["status"], "ok");
  return run;
}

// The model states a layout's figures (memory_bytes) predict.
inline double predicted_states(const nlohmann::json& memory) {
  return memory["weights"].get<double>() + memory["gradients"].get<double>() +
         memory["master"].get<double>() + memory["optimizer"].get<double>();
}

// Each of `ranks` ranks against the layout's figures (the stage that needs the most).
inline nlohmann::json run_planned_layout(const nlohmann::json& plan, size_t ranks) {
  const nlohmann::json run = run_exported(plan);
  if (run.empty()) return run;
  const nlohmann::json& predicted = plan["layouts"][0]["memory_bytes"];
  EXPECT_EQ(run["ranks"].size(), ranks);
  for (const auto& rank : run["ranks"]) {
    EXPECT_NEAR(
        rank["peak_activation_bytes"].get<double>() / predicted["activations"].get<double>(), 1.0,
        0.05);
    EXPECT_EQ(rank["model_state_bytes"].get<double>(), predicted_states(predicted));
  }
  return run;
}

// The same for a pipeline, stage by stage: rank s (one a stage) against the layout's stage s.
inline nlohmann::json run_planned_stages(const nlohmann::json& plan, size_t stages) {
  const nlohmann::json run = run_exported(plan);
  if (run.empty()) return run;
  if (run["ranks"].size() != stages) {
    ADD_FAILURE() << run["ranks"].size() << " ranks for " << stages << " stages";
    return {};
  }
  for (size_t stage = 0; stage < stages; ++stage) {
    const nlohmann::json& predicted = plan["layouts"][0]["stages"][stage]["memory_bytes"];
    const nlohmann::json& rank = run["ranks"][stage];
    EXPECT_EQ(rank["model_state_bytes"].get<double>(), predicted_states(predicted))
        << "stage " << stage;
    EXPECT_NEAR(
        rank["peak_activation_bytes"].get<double>() / predicted["activations"].get<double>(), 1.0,
        0.05)
        << "stage " << stage;
  }
  return run;
}

}  // namespace rematlab::testing
