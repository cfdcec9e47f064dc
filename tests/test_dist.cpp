// Data parallelism (core/parallel, core/launch), with real processes over Gloo on 127.0.0.1: N
// ranks of batch B against one process of batch N·B on the same data, sharded optimizer states and
// gradients against plain data parallel, a parameter accumulated twice, and the environment a
// launcher hands a rank. The ranks are this test binary again, started with
// REMATLAB_TEST_DIST_WORKER (run_dist_test_worker below; see test_main.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "child_process.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "dist_workers.h"
#include "estimate/model_state.h"
#include "estimate/sharded_states.h"
#include "launch/local_launcher.h"
#include "launch/rank_launch.h"
#include "parallel/bucket_layout.h"
#include "parallel/data_parallel.h"
#include "parallel/dist_context.h"
#include "parallel/dist_env.h"
#include "run/run_fields.h"
#include "scratch_dir.h"
#include "sweep/sweep_spec.h"
#include "train/trainer.h"

namespace rematlab {
namespace testing {
int run_dist_test_worker(const std::string& spec_path);
}  // namespace testing

namespace {

using testing::ChildProcess;
using namespace testing::dist;

// ---- the worker: one rank, run by this binary in its own process ----

std::vector<torch::Tensor> accumulated_twice(const std::shared_ptr<parallel::DistContext>& context,
                                             int64_t bucket_bytes) {
  const double r = context->rank() + 1;
  torch::Tensor a = torch::zeros({3}, torch::requires_grad());
  torch::Tensor b = torch::zeros({4}, torch::requires_grad());
  a.mutable_grad() = torch::zeros_like(a);
  b.mutable_grad() = torch::zeros_like(b);
  parallel::DataParallel exchange(context, {ShardMode::kNone, bucket_bytes});
  exchange.attach({a, b});
  exchange.before_backward(true);
  // Every parameter accumulated once: every bucket goes out...
  ((a * r).sum() + (b * (2 * r)).sum()).backward();
  // ...and then b again, as a parameter checkpointed twice (or a reentrant backward) would.
  (b * (3 * r)).sum().backward();
  exchange.after_backward(true);
  return {a.grad().clone(), b.grad().clone(),
          torch::tensor({static_cast<double>(exchange.late_gradients())}, torch::kFloat64)};
}

// Sharded gradients over two micro-batches of four parameters, a bucket each (so the oldest is
// waited for and let go while backward goes on), b accumulated again in the first after its
// bucket went out. Returns this rank's shard of each bucket and, beside it, what it should hold
// (the average over ranks r = 1, 2 of both micro-batches: a, c and d 2·1.5, b (5 + 2)·1.5; the
// padding 0), then the late gradients and the most bytes the whole buckets held at once.
std::vector<torch::Tensor> sharded_late(const std::shared_ptr<parallel::DistContext>& context) {
  const double r = context->rank() + 1;
  std::vector<torch::Tensor> params;
  for (int64_t size : {3, 4, 5, 6}) params.push_back(torch::zeros({size}, torch::requires_grad()));
  const torch::Tensor &a = params[0], &b = params[1], &c = params[2], &d = params[3];
  parallel::DataParallel exchange(context, {ShardMode::kGradients, 12});
  exchange.attach(params);
  auto micro_batch = [&] {
    // Made in turn, d's last, so that backward reaches d, c, b and a in the order their buckets
    // go out (it runs the most recently made nodes first).
    const torch::Tensor ta = (a * r).sum();
    const torch::Tensor tb = (b * (2 * r)).sum();
    const torch::Tensor tc = (c * r).sum();
    const torch::Tensor td = (d * r).sum();
    (ta + tb + tc + td).backward();
  };

  exchange.before_backward(false);
  micro_batch();
  (b * (3 * r)).sum().backward();
  exchange.after_backward(false);
  exchange.before_backward(true);
  micro_batch();
  exchange.after_backward(true);
  const std::vector<double> average = {3.0, 10.5, 3.0, 3.0};
  std::vector<torch::Tensor> result;
  const std::vector<torch::Tensor> shards = exchange.gradient_shards();
  for (std::size_t index = 0; index < shards.size(); ++index) {
    const parallel::BucketLayout& bucket = exchange.buckets()[index];
    torch::Tensor expected = torch::zeros({bucket.shard_numel});
    const int64_t begin = bucket.shard_begin(context->rank());
    for (const parallel::BucketSlot& slot : bucket.slots) {
      for (int64_t at = std::max(slot.offset, begin);
           at < std::min(slot.offset + slot.numel, begin + bucket.shard_numel); ++at) {
        expected[at - begin] = average[slot.param];
      }
    }
    result.push_back(shards[index].clone());
    result.push_back(expected);
  }
  result.push_back(torch::tensor({static_cast<double>(exchange.late_gradients()),
                                  static_cast<double>(exchange.buffer_peak_bytes())},
                                 torch::kFloat64));
  return result;
}

std::vector<torch::Tensor> run_case(const std::shared_ptr<parallel::DistContext>& context,
                                    const nlohmann::json& item) {
  const std::string mode = item.at("mode");
  if (mode == "late") return accumulated_twice(context, item.at("bucket_bytes").get<int64_t>());
  if (mode == "sharded_late") return sharded_late(context);
  if (mode.rfind("tensor_", 0) == 0) return run_tensor_parallel_case(context, item);
  if (mode.rfind("sharded_", 0) == 0) return run_fully_sharded_case(context, item);
  if (mode.rfind("pipeline_", 0) == 0) return run_pipeline_case(context, item);
  if (mode.rfind("experts_", 0) == 0) return run_expert_parallel_case(context, item);
  RunConfig config = config_from(item.at("run"));
  config.world_size = context->world_size();
  auto exchange = std::make_shared<parallel::DataParallel>(
      context, parallel::DataParallelOptions{parse_shard(config.shard), config.bucket_bytes});
  Trainer trainer(config, exchange);
  std::vector<torch::Tensor> result;
  if (mode == "gradients") {
    const std::optional<double> loss =
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0));
    result.push_back(torch::tensor({loss.value()}, torch::kFloat64));
    for (const auto& param : trainer.model()->parameters()) {
      if (param.requires_grad()) result.push_back(param.grad().clone());  // a frozen base: none
    }
    return result;
  }
  const RunSummary summary = trainer.run();
  const parallel::ModelStateBytes& bytes = exchange->model_state_bytes();
  result.push_back(torch::tensor(
      {static_cast<double>(bytes.params), static_cast<double>(bytes.grads),
       static_cast<double>(bytes.optimizer), static_cast<double>(summary.baseline_bytes),
       static_cast<double>(exchange->buckets().size()), static_cast<double>(summary.steps.size()),
       static_cast<double>(summary.peak_bytes)},
      torch::kFloat64));
  for (const auto& param : trainer.model()->parameters()) result.push_back(param.detach().clone());
  return result;
}

}  // namespace

int testing::run_dist_test_worker(const std::string& spec_path) {
  try {
    const nlohmann::json spec = nlohmann::json::parse(read_text(spec_path));
    const parallel::DistEnv env = parallel::dist_env_from_process();
    auto context =
        parallel::DistContext::connect(env, c10::Device(c10::kCPU), std::chrono::seconds(60));
    for (const auto& item : spec.at("cases")) {
      const std::vector<torch::Tensor> result = run_case(context, item);
      torch::save(result, result_file(spec.at("output"), item.at("name"), env.rank));
    }
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "worker: " << error.what() << std::endl;
    return 1;
  }
}

namespace {

// ---- the environment a launcher hands a rank ----

parallel::DistEnv env_of(const std::map<std::string, std::string>& variables) {
  return parallel::dist_env_from([&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

TEST(DistEnv, NoVariablesIsOneProcess) {
  const parallel::DistEnv env = env_of({});
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.launcher, "none");
}

TEST(DistEnv, ReadsTorchrunsVariablesAndItsAgentStore) {
  const parallel::DistEnv env = env_of({{"RANK", "5"},
                                        {"WORLD_SIZE", "8"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "4"},
                                        {"MASTER_ADDR", "node7"},
                                        {"MASTER_PORT", "29511"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"},
                                        {"TORCHELASTIC_RUN_ID", "job"},
                                        {"REMATLAB_LAUNCH_SECRET", "0123456789abcdef0123"}});
  EXPECT_TRUE(env.distributed());
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "node7");
  EXPECT_EQ(env.master_port, 29511);
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.store_prefix, "/worker/attempt_2");
  EXPECT_EQ(env.launcher, "torchrun");
}

TEST(DistEnv, ReadsSlurmsVariablesWithTheFirstHostAsRendezvous) {
  const parallel::DistEnv env = env_of({{"SLURM_PROCID", "3"},
                                        {"SLURM_NTASKS", "4"},
                                        {"SLURM_LOCALID", "1"},
                                        {"SLURM_JOB_NODELIST", "gpu[07-08,12],login1"},
                                        {"SLURM_JOB_ID", "123456"},
                                        {"REMATLAB_LAUNCH_SECRET", "0123456789abcdef0123"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.master_port, 20000 + 123456 % 20000);
  EXPECT_FALSE(env.agent_store);
  EXPECT_EQ(parallel::first_slurm_host("rack1-n[001-004]-ib"), "rack1-n001-ib");
  EXPECT_EQ(parallel::first_slurm_host("solo"), "solo");
  EXPECT_EQ(parallel::first_slurm_host("a,b[1-2]"), "a");
}

TEST(DistEnv, RefusesMalformedVariablesNamingThem) {
  auto field_of = [](const std::map<std::string, std::string>& variables) {
    try {
      env_of(variables);
    } catch (const InvalidInput& error) {
      return error.field();
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(field_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK");
  EXPECT_EQ(field_of({{"RANK", "0"}, {"WORLD_SIZE", "two"}}), "WORLD_SIZE");
  EXPECT_EQ(field_of({{"RANK", "0"}}), "WORLD_SIZE");
  EXPECT_EQ(field_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
            "MASTER_PORT");
  EXPECT_EQ(field_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}), "SLURM_PROCID");
}

// A rendezvous other hosts can reach is joined only with the launch's secret; on loopback it is
// optional (our own launcher always makes one).
TEST(DistEnv, ARendezvousBeyondLoopbackNeedsASecretNobodyCanGuess) {
  auto field_of = [](std::map<std::string, std::string> variables) {
    variables.insert({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
    try {
      return env_of(variables).secret;
    } catch (const InvalidInput& error) {
      return "refused: " + error.field();
    }
  };
  EXPECT_EQ(field_of({{"MASTER_ADDR", "node0"}}), "refused: REMATLAB_LAUNCH_SECRET");
  EXPECT_EQ(field_of({{"MASTER_ADDR", "10.0.0.5"}, {"REMATLAB_LAUNCH_SECRET", "short"}}),
            "refused: REMATLAB_LAUNCH_SECRET");
  EXPECT_EQ(field_of({{"MASTER_ADDR", "10.0.0.5"},
                      {"REMATLAB_LAUNCH_SECRET", "has spaces and/slashes00"}}),
            "refused: REMATLAB_LAUNCH_SECRET");
  EXPECT_EQ(field_of({{"MASTER_ADDR", "10.0.0.5"}, {"REMATLAB_LAUNCH_SECRET", "a1b2c3d4e5f6a7b8"}}),
            "a1b2c3d4e5f6a7b8");
  EXPECT_EQ(field_of({{"MASTER_ADDR", "127.0.0.1"}}), "");
  EXPECT_EQ(field_of({{"MASTER_ADDR", "localhost"}}), "");
  EXPECT_EQ(field_of({{"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"RANK", ""},
                      {"WORLD_SIZE", ""},
                      {"SLURM_JOB_NODELIST", "gpu07"}}),
            "refused: REMATLAB_LAUNCH_SECRET");
  // Where every rank runs: a rendezvous on loopback is reachable by all of them.
  EXPECT_TRUE(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}}).single_host);
  EXPECT_FALSE(env_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}}).single_host);
  EXPECT_TRUE(env_of({{"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_STEP_NUM_NODES", "1"},
                      {"SLURM_JOB_NODELIST", "127.0.0.1"}})
                  .single_host);
  EXPECT_FALSE(
      env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "127.0.0.1"}})
          .single_host);
  const std::string made = parallel::make_launch_secret();
  EXPECT_EQ(made.size(), 32u);
  EXPECT_NE(made, parallel::make_launch_secret());
}

// A process that cannot be started is named with the program tried and the reason, not an
// exit code 127 with nothing said.
TEST(LocalLaunch, AProgramThatCannotBeStartedIsNamedWithTheReason) {
  launch::LocalLaunch launch;
  launch.nproc = 2;
  launch.args = {"/no/such/rematlab-cli", "run"};
  try {
    launch::launch_local(launch);
    ADD_FAILURE() << "a launch of a missing program succeeded";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("cannot start rank 0: '/no/such/rematlab-cli': No "
                        "such file or directory"),
              std::string::npos)
        << error.what();
  }
}

TEST(DataParallelSweep, ASpecAskingForRanksOrShardsIsRefusedNamingTheKey) {
  // A sweep trains every point in its own process: such a point would not be what it says.
  for (const char* text :
       {R"({"base": {"world_size": 2}})", R"({"axes": {"shard": ["none", "optimizer"]}})"}) {
    try {
      parse_sweep_spec(nlohmann::ordered_json::parse(text));
      ADD_FAILURE() << text << " was accepted";
    } catch (const InvalidInput& error) {
      const std::string key =
          std::string(text).find("world_size") != std::string::npos ? "world_size" : "shard";
      EXPECT_NE(error.field().find(key), std::string::npos) << error.what();
    }
  }
}

TEST(LocalRanks, AreCheckedBeforeAnyStartsNamingTheCallersField) {
  EXPECT_NO_THROW(launch::check_local_ranks("cpu", 3, "--nproc", "--device"));
  try {
    launch::check_local_ranks("cpu", max_threads() + 1, "ranks", "device");
    ADD_FAILURE() << "more ranks than the host can hold were taken";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "ranks") << "the window's word for them";
    EXPECT_NE(error.reason().find("(4 per hardware thread, at least 16)"), std::string::npos)
        << error.what();
  }
  // The GPU cases (cuda:N refused, more ranks than GPUs) are in test_cuda.cpp.
}

TEST(BucketLayout, FillsInReverseOrderUpToTheCapAndPadsToTheWorldSize) {
  // fp32 parameters of 10, 1000, 3 and 7 elements; 64-byte buckets (16 elements), 3 ranks.
  const auto buckets = parallel::plan_buckets({10, 1000, 3, 7}, 4, 64, 3);
  ASSERT_EQ(buckets.size(), 3u);
  ASSERT_EQ(buckets[0].slots.size(), 2u);  // 7 and 3, last registered first
  EXPECT_EQ(buckets[0].slots[0].param, 3u);
  EXPECT_EQ(buckets[0].slots[1].param, 2u);
  EXPECT_EQ(buckets[0].slots[1].offset, 7);
  EXPECT_EQ(buckets[0].numel, 10);
  EXPECT_EQ(buckets[0].padded_numel, 12);
  EXPECT_EQ(buckets[0].shard_numel, 4);
  EXPECT_EQ(buckets[1].slots.size(), 1u);  // larger than the cap: alone
  EXPECT_EQ(buckets[1].numel, 1000);
  EXPECT_EQ(buckets[1].padded_numel, 1002);
  EXPECT_EQ(buckets[2].slots[0].param, 0u);
  EXPECT_THROW(parallel::plan_buckets({1}, 4, 0, 2), InvalidInput);
}

TEST(BucketLayout, ABucketHoldsOneGroupsParameters) {
  // Four parameters that one 64-byte bucket would hold, in two groups: a bucket each.
  const auto chunks = parallel::plan_buckets({2, 5, 3, 4}, 4, 64, 2, {0, 0, 1, 1});
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].numel, 7);  // 4 and 3, last registered first
  EXPECT_EQ(chunks[1].numel, 7);
  EXPECT_EQ(chunks[1].slots[0].param, 1u);
  // The second in a group of its own, 2 ranks: its shards are elements [0, 3) and [3, 6) of it,
  // as in any other model that keeps it alone.
  const auto buckets = parallel::plan_buckets({2, 5, 3, 4}, 4, 64, 2, {0, -1, 0, 0});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].slots.size(), 2u);  // 4 and 3, last registered first
  EXPECT_EQ(buckets[0].numel, 7);
  ASSERT_EQ(buckets[1].slots.size(), 1u);
  EXPECT_EQ(buckets[1].slots[0].param, 1u);
  EXPECT_EQ(buckets[1].slots[0].offset, 0);
  EXPECT_EQ(buckets[1].padded_numel, 6);
  EXPECT_EQ(buckets[1].shard_numel, 3);
  ASSERT_EQ(buckets[2].slots.size(), 1u);  // the first, after the one kept alone
  EXPECT_EQ(buckets[2].slots[0].param, 0u);
}

// ---- N ranks of batch B against one process of batch N·B ----

struct Reference {
  double loss = 0.0;
  std::vector<torch::Tensor> grads;
};

Reference one_process(const nlohmann::json& fields, int world) {
  RunConfig config = config_from(fields);
  config.batch *= world;
  Trainer trainer(config);
  Reference reference;
  reference.loss =
      trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)).value();
  for (const auto& param : trainer.model()->parameters()) {
    if (param.requires_grad()) reference.grads.push_back(param.grad().clone());
  }
  return reference;
}

class DataParallelEquivalence : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelEquivalence, LossAndEveryGradientMatchOneProcessOfNTimesTheBatch) {
  const int world = GetParam();
  ScratchDir dir("dist-equivalence");
  const std::map<std::string, nlohmann::json> cases = {
      {"none", tiny_fields()},
      {"every1", with(tiny_fields(), {{"checkpoint", "every:1"}})},
      {"sublayer12", with(tiny_fields(), {{"checkpoint", "sublayer:1,2"}})},
      {"selective", with(tiny_fields(), {{"checkpoint", "selective"}})},
      {"every1_disk", with(tiny_fields(), {{"checkpoint", "every:1"}, {"offload", "disk"}})},
      {"accum2", with(tiny_fields(), {{"accum", 2}})},
      {"every1_accum2", with(tiny_fields(), {{"checkpoint", "every:1"}, {"accum", 2}})},
      {"one_bucket", with(tiny_fields(), {{"bucket_bytes", 25 << 20}})},
      // Adapters on a frozen base: only they have gradients to average.
      {"lora_every1",
       with(tiny_fields(), {{"finetune", "lora"}, {"lora_rank", 4}, {"checkpoint", "every:1"}})},
      {"lora_llama_nf4_selective", with(tiny_fields(), {{"preset", "llama-tiny"},
                                                        {"finetune", "lora"},
                                                        {"lora_rank", 4},
                                                        {"base_precision", "nf4"},
                                                        {"checkpoint", "selective"}})},
  };
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back({{"name", name}, {"mode", "gradients"}, {"run", fields}});
  }
  run_workers(spec, world, dir);
  if (HasFatalFailure()) return;

  double largest = 0.0;
  for (const auto& [name, fields] : cases) {
    const Reference reference = one_process(fields, world);
    const std::vector<torch::Tensor> rank0 = load(result_file(dir.path(), name, 0));
    ASSERT_EQ(rank0.size(), reference.grads.size() + 1) << name;
    // Every rank holds the same averaged gradients, bit for bit.
    for (int rank = 1; rank < world; ++rank) {
      const std::vector<torch::Tensor> other = load(result_file(dir.path(), name, rank));
      for (std::size_t i = 0; i < rank0.size(); ++i) {
        EXPECT_TRUE(torch::equal(rank0[i], other[i]))
            << name << ": rank " << rank << ", tensor " << i;
      }
    }
    // The loss and every gradient equal one process's within fp32 summation-order rounding:
    // a few units in the last place of the tensor's largest element.
    const double loss_difference = std::abs(rank0[0].item<double>() - reference.loss);
    EXPECT_LE(loss_difference, 1e-6 * std::abs(reference.loss)) << name;
    double case_largest = 0.0;
    for (std::size_t i = 0; i < reference.grads.size(); ++i) {
      const torch::Tensor& expected = reference.grads[i];
      const double scale = expected.abs().max().item<double>();
      const double difference = max_abs_difference(rank0[i + 1], expected);
      EXPECT_LE(difference, 16 * 1.19e-7 * scale + 1e-12) << name << ", parameter " << i;
      case_largest = std::max(case_largest, difference);
    }
    std::cout << world << " ranks, " << name << ": loss differs by " << loss_difference
              << ", largest gradient difference " << case_largest << std::endl;
    largest = std::max(largest, case_largest);
  }
  RecordProperty("largest_gradient_difference", std::to_string(largest));
}

std::string ranks_name(const ::testing::TestParamInfo<int>& ranks) {
  return std::to_string(ranks.param) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelEquivalence, ::testing::Values(2, 3), ranks_name);

// ---- a gradient that arrives after its bucket was sent ----

TEST(DataParallel, AGradientAccumulatedAfterItsBucketWasSentStillCounts) {
  ScratchDir dir("dist-late");
  const nlohmann::json spec = {
      {"output", dir.path()},
      {"cases",
       {{{"name", "one_bucket"}, {"mode", "late"}, {"bucket_bytes", 4096}},
        {{"name", "two_buckets"}, {"mode", "late"}, {"bucket_bytes", 12}}}}};
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const std::string name : {"one_bucket", "two_buckets"}) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::vector<torch::Tensor> result = load(result_file(dir.path(), name, rank));
      // Ranks contribute r = 1 and 2: a's gradient averages r, b's averages 2r + 3r.
      EXPECT_TRUE(torch::allclose(result[0], torch::full({3}, 1.5))) << name << result[0];
      EXPECT_TRUE(torch::allclose(result[1], torch::full({4}, 7.5))) << name << result[1];
      EXPECT_EQ(result[2].item<double>(), 1.0) << name << ": b's second gradient came late";
    }
  }
}

// Under --shard gradients each micro-batch is reduced into the shards; a gradient kept aside
// in the first is added once, at the step's end, and the whole buckets are let go as backward
// goes on rather than all held until it ends.
TEST(DataParallel, ShardedGradientsAddALateGradientOnceOverTheStepsMicroBatches) {
  ScratchDir dir("dist-sharded-late");
  const nlohmann::json spec = {{"output", dir.path()},
                               {"cases", {{{"name", "late"}, {"mode", "sharded_late"}}}}};
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<torch::Tensor> result = load(result_file(dir.path(), "late", rank));
    ASSERT_EQ(result.size(), 2 * 4 + 1u);
    for (std::size_t bucket = 0; bucket < 4; ++bucket) {
      EXPECT_TRUE(torch::allclose(result[2 * bucket], result[2 * bucket + 1]))
          << "rank " << rank << ", bucket " << bucket << ": " << result[2 * bucket] << " against "
          << result[2 * bucket + 1];
    }
    EXPECT_EQ(result[8][0].item<double>(), 1.0) << "b's second gradient came late";
    // The four buckets padded to two ranks: 6 + 6 + 4 + 4 values, 80 bytes whole, which d, c, b
    // and a fill in turn. Held at once: three (the oldest is waited for once two later ones are
    // out), 64 bytes, and b's part kept aside over the step, 16; all four and it, 96, when every
    // bucket waited until the end of backward.
    EXPECT_LE(result[8][1].item<double>(), 4 * (6 + 6 + 4) + 16) << "rank " << rank;
  }
}

// ---- sharded optimizer states and gradients ----

class DataParallelSharding : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelSharding, SameParametersAsPlainDataParallelWithOneNthOfTheStates) {
  const int world = GetParam();
  ScratchDir dir("dist-sharding");
  const nlohmann::json full_training =
      with(tiny_fields(), {{"checkpoint", "every:1"}, {"accum", 2}, {"steps", 5}});
  // Fine-tuning shards the adapters' states alone; the frozen base stays whole on every rank.
  const std::map<std::string, nlohmann::json> bases = {
      {"", full_training},
      {"lora_", with(full_training, {{"finetune", "lora"}, {"lora_rank", 4}})}};
  const std::vector<std::string> shards = {"none", "optimizer", "gradients"};
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [prefix, base] : bases) {
    for (const std::string& shard : shards) {
      spec["cases"].push_back(
          {{"name", prefix + shard}, {"mode", "steps"}, {"run", with(base, {{"shard", shard}})}});
      spec["cases"].push_back({{"name", prefix + shard + "_unclipped"},
                               {"mode", "steps"},
                               {"run", with(base, {{"shard", shard}, {"grad_clip", 0}})}});
    }
  }
  run_workers(spec, world, dir);
  if (HasFatalFailure()) return;

  for (const auto& [prefix, base] : bases) {
    SCOPED_TRACE(prefix.empty() ? "full training" : "LoRA");
    const ModelConfig model = config_from(base).model;
    const int64_t params = model.trainable_parameter_count();
    const auto plain = load(result_file(dir.path(), prefix + "none", 0));
    const auto plain_unclipped = load(result_file(dir.path(), prefix + "none_unclipped", 0));
    std::map<std::string, torch::Tensor> stats;
    for (const std::string& shard : shards) {
      for (int rank = 0; rank < world; ++rank) {
        const auto result = load(result_file(dir.path(), prefix + shard, rank));
        const auto unclipped = load(result_file(dir.path(), prefix + shard + "_unclipped", rank));
        ASSERT_EQ(result.size(), plain.size());
        EXPECT_EQ(result[0][5].item<double>(), 5.0) << shard << ": steps completed";
        // Unclipped, the optimizer-sharded update is the plain one, bit for bit: the same
        // averaged gradients, the same AdamW arithmetic per element, the same parameters
        // gathered. Sharded gradients sum each micro-batch over the ranks and then the two
        // micro-batches, where plain data parallelism sums them the other way round: the same
        // sums in another order. Clipped, the global norm is summed shard by shard, so the
        // clipping factor may differ in its last bits (AdamW's epsilon then lets that show in
        // elements of tiny gradient).
        double largest = 0.0;
        for (std::size_t i = 1; i < result.size(); ++i) {
          if (shard == "gradients") {
            const double scale = std::max(1.0, plain_unclipped[i].abs().max().item<double>());
            EXPECT_LE(max_abs_difference(unclipped[i], plain_unclipped[i]), 16 * 1.19e-7 * scale)
                << shard << ", tensor " << i;
          } else {
            EXPECT_TRUE(torch::equal(unclipped[i], plain_unclipped[i]))
                << shard << ", tensor " << i;
          }
          const double scale = std::max(1.0, plain[i].abs().max().item<double>());
          const double difference = max_abs_difference(result[i], plain[i]);
          EXPECT_LE(difference, 16 * 1.19e-7 * scale) << shard << ", rank " << rank << ", " << i;
          largest = std::max(largest, difference);
        }
        if (rank == 0) {
          std::cout << world << " ranks, " << prefix << "shard " << shard
                    << ": largest parameter difference after 5 clipped steps " << largest
                    << std::endl;
        }
        const torch::Tensor s = result[0];
        const double param_bytes = s[0].item<double>(), grad_bytes = s[1].item<double>();
        const double optimizer_bytes = s[2].item<double>(), baseline = s[3].item<double>();
        const double buckets = s[4].item<double>();
        // Padding each bucket to a multiple of the world size adds at most world - 1 elements.
        const double slack = 4.0 * buckets * (world - 1);
        const double full = 4.0 * static_cast<double>(params);
        EXPECT_NEAR(param_bytes, full, slack) << shard;
        if (shard == "none") {
          EXPECT_NEAR(optimizer_bytes, 2 * full, 2 * slack);
          EXPECT_NEAR(grad_bytes, full, slack);
        } else {
          EXPECT_NEAR(optimizer_bytes, 2 * full / world, 2 * slack) << shard << ", rank " << rank;
          EXPECT_NEAR(grad_bytes, shard == "gradients" ? full / world : full, slack) << shard;
        }
        // `estimate --nproc N --shard MODE` predicts them.
        const estimate::ModelStateBytes predicted = estimate::per_rank_model_states(
            estimate::model_state_bytes(params, Precision::kFp32, estimate::Optimizer::kAdamW),
            world, shard);
        EXPECT_NEAR(param_bytes + grad_bytes + optimizer_bytes,
                    static_cast<double>(predicted.total()), 4 * slack)
            << shard;
        // What the allocator saw live at the start of a step is these model states (and a frozen
        // base): nothing a collective held was left uncounted (freed on Gloo's thread, say).
        const double states = param_bytes + grad_bytes + optimizer_bytes +
                              static_cast<double>(model.frozen_base_bytes());
        EXPECT_GE(baseline, states) << shard;
        EXPECT_LT(baseline, states + 4096)
            << shard << ", rank " << rank << ": " << baseline - states << " bytes more";
        if (rank == 0) stats[shard] = s;
      }
    }
    EXPECT_LT(stats["optimizer"][3].item<double>(), stats["none"][3].item<double>());
    EXPECT_LT(stats["gradients"][3].item<double>(), stats["optimizer"][3].item<double>());
    // Sharded gradients leave no whole gradients between micro-batches (each is reduced into the
    // shards as its backward forms it), so the second micro-batch runs beside the shards alone
    // and the step's peak lies below ZeRO 1's, which holds them whole all along, by most of what
    // their states differ by. Reduced at the last micro-batch only, they were whole through the
    // second one and the peak was above ZeRO 1's.
    const double whole = 4.0 * static_cast<double>(params);
    const double states_apart = whole - whole / world;
    const double peak_gain =
        stats["optimizer"][6].item<double>() - stats["gradients"][6].item<double>();
    std::cout << world << " ranks, " << prefix << "peak under sharded gradients "
              << peak_gain / 1024.0 << " KiB below sharded optimizer state, whose gradients are "
              << states_apart / 1024.0 << " KiB more" << std::endl;
    EXPECT_GT(peak_gain, 0.5 * states_apart);
  }
}

TEST(ShardedEstimate, DividesOptimizerStateThenGradientsAmongRanks) {
  // The article's 70B in fp32 over 8 ranks: 280 GB weights, 280 GB gradients, 560 GB moments.
  const estimate::ModelStateBytes whole =
      estimate::model_state_bytes(70'000'000'000, Precision::kFp32, estimate::Optimizer::kAdamW);
  const auto none = estimate::per_rank_model_states(whole, 8, "none");
  const auto optimizer = estimate::per_rank_model_states(whole, 8, "optimizer");
  const auto gradients = estimate::per_rank_model_states(whole, 8, "gradients");
  EXPECT_EQ(none.total(), 1'120'000'000'000);
  EXPECT_EQ(optimizer.total(), 280'000'000'000 + 280'000'000'000 + 70'000'000'000);
  EXPECT_EQ(gradients.total(), 280'000'000'000 + 35'000'000'000 + 70'000'000'000);
  // bf16: the fp32 master copy belongs to the optimizer and is divided with it.
  const auto mixed = estimate::per_rank_model_states(
      estimate::model_state_bytes(1000, Precision::kBf16, estimate::Optimizer::kAdamW), 4,
      "optimizer");
  EXPECT_EQ(mixed.weights, 2000);
  EXPECT_EQ(mixed.master, 1000);
  EXPECT_EQ(mixed.optimizer, 2000);
  EXPECT_THROW(estimate::per_rank_model_states(whole, 0, "none"), InvalidInput);
  EXPECT_THROW(estimate::per_rank_model_states(whole, 2, "weights"), InvalidInput);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelSharding, ::testing::Values(2, 3), ranks_name);

}  // namespace
}  // namespace rematlab
