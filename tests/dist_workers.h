// The worker processes of the multi-rank suites (test_dist, test_tensor_parallel,
// test_expert_parallel, …): a spec of cases in a file, this test binary started once per rank with
// REMATLAB_TEST_DIST_WORKER set to it (test_main.cpp), each rank saving its tensors per case, and
// what reads them back.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "collective/tensor_parallel_group.h"
#include "common/posix_files.h"
#include "model/transformer.h"
#include "run/run_config.h"
#include "run/run_fields.h"
#include "scratch_dir.h"

namespace rematlab::parallel {
class DistContext;
}

namespace rematlab::testing::dist {

// One rank's side of a tensor-parallel case (test_tensor_parallel.cpp).
std::vector<torch::Tensor> run_tensor_parallel_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item);
// One rank's side of a pipeline case (test_pipeline.cpp).
std::vector<torch::Tensor> run_pipeline_case(const std::shared_ptr<parallel::DistContext>& context,
                                             const nlohmann::json& item);
// One rank's side of an expert-parallel case (test_expert_parallel.cpp).
std::vector<torch::Tensor> run_expert_parallel_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item);
// One rank's side of a fully sharded case (test_fully_sharded.cpp).
std::vector<torch::Tensor> run_fully_sharded_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item);

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A model small enough that a case costs milliseconds; 4 KiB buckets, so it has several.
inline nlohmann::json tiny_fields() {
  return {{"preset", "tiny"}, {"layers", 2},   {"d_model", 32},
          {"heads", 2},       {"seq_len", 16}, {"vocab", 64},
          {"batch", 2},       {"threads", 1},  {"bucket_bytes", 4096}};
}

inline nlohmann::json with(nlohmann::json fields, const nlohmann::json& changes) {
  for (const auto& item : changes.items()) fields[item.key()] = item.value();
  return fields;
}

inline RunConfig config_from(const nlohmann::json& fields) {
  nlohmann::ordered_json ordered = nlohmann::ordered_json::object();
  ordered["preset"] = fields.at("preset");
  for (const auto& item : fields.items()) {
    if (item.key() != "preset") ordered[item.key()] = item.value();
  }
  return run_config_from_fields(ordered, "case");
}

using testing::free_port;
using testing::ScratchDir;

inline std::string self_path() {
  char path[4096] = {};
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return std::string(path, static_cast<std::size_t>(std::max<ssize_t>(0, length)));
}

inline std::vector<std::string> rank_environment(int rank, int world, int port) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
}

// Runs `spec` on `world` worker processes; a worker that fails fails the test with its stderr.
inline void run_workers(const nlohmann::json& spec, int world, const ScratchDir& dir) {
  const std::string spec_path = dir.file("spec.json");
  std::ofstream(spec_path) << spec.dump();
  const int port = free_port();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> env = rank_environment(rank, world, port);
    env.push_back("REMATLAB_TEST_DIST_WORKER=" + spec_path);
    const std::string base = dir.file("worker" + std::to_string(rank));
    workers.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{self_path()}, env,
                                                     base + ".out", base + ".err"));
  }
  for (int rank = 0; rank < world; ++rank) {
    const std::optional<int> code = workers[rank]->exit_code(std::chrono::seconds(300));
    const std::string err = read_text(dir.file("worker" + std::to_string(rank) + ".err"));
    ASSERT_TRUE(code.has_value()) << "worker " << rank << " did not finish: " << err;
    ASSERT_EQ(*code, 0) << "worker " << rank << ": " << err;
  }
}

inline std::vector<torch::Tensor> load(const std::string& path) {
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, path);
  return tensors;
}

inline std::string result_file(const std::string& directory, const std::string& name, int rank) {
  return files::join(directory, name + "." + std::to_string(rank) + ".pt");
}

// Whether parameter `index` of the model is the fused qkv projection's bias, whose key part has
// a gradient of exactly zero in exact arithmetic (softmax ignores a constant added to every
// score of a row): what either layout computes for it is rounding noise, which AdamW turns into
// steps of ±lr whatever its size, so after training it can only be compared against 2·lr·steps.
inline bool is_qkv_bias(const nlohmann::json& fields, std::size_t index) {
  Transformer model(config_from(fields).model);
  const auto named = model->named_parameters();
  const std::string& key = named[index].key();
  return key.size() >= 8 && key.compare(key.size() - 8, 8, "qkv.bias") == 0;
}

// `whole` (one tensor per parameter of the model `fields` describes) as tensor rank `rank` of
// `ranks` holds it: the model's own split, applied to these values.
inline std::vector<torch::Tensor> part_of_rank(const nlohmann::json& fields,
                                               const std::vector<torch::Tensor>& whole, int rank,
                                               int ranks) {
  torch::NoGradGuard no_grad;
  Transformer model(config_from(fields).model);
  const auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(whole[i]);
  model->split_for_tensor_parallel(std::make_shared<TensorParallelGroup>(rank, ranks));
  std::vector<torch::Tensor> parts;
  for (const auto& param : model->parameters()) parts.push_back(param.detach().clone());
  return parts;
}

inline double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace rematlab::testing::dist
