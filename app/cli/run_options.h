// The run flags shared by `run`, `check` and `study`: a preset first, then any field overridden.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "cli/model_options.h"
#include "run/run_config.h"

namespace rematlab::cli {

class RunOptions {
 public:
  // Adds the model, training and policy flags to `command`.
  // `budget_help` replaces --budget's description where the command reads it otherwise
  // (`plan`: the activation memory to plan for).
  void add_to(CLI::App& command, const std::string& budget_help = "");
  // The preset with every given flag applied. Throws InvalidInput (validation happens here).
  RunConfig resolve() const;

  bool json = false;

 private:
  std::string preset_ = "tiny";
  ModelOptions model_;
  std::optional<int64_t> batch_, accum_, steps_, warmup_steps_;
  std::optional<double> lr_;
  std::optional<uint64_t> seed_;
  std::optional<int> threads_;
  std::string precision_ = "fp32";
  std::string device_ = "cpu";
  std::string checkpoint_ = "none";
  std::string offload_ = "none";
  std::string data_ = "synthetic";
  std::string budget_;
  bool timeline_ = false;
  std::optional<double> loss_scale_;
  std::optional<int64_t> loss_scale_growth_;
  bool tf32_ = false;
  bool deterministic_ = false;
  std::optional<double> peak_flops_;
};

}  // namespace rematlab::cli
