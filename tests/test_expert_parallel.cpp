// Expert parallelism (--ep) with real processes over Gloo on 127.0.0.1: the all-to-all exchange
// itself, with ranks that send or receive nothing; E ranks against one process at E times the
// batch (gradients of one accumulation, and steps), and against data parallelism without it over
// the same ranks when the balance loss trains (each rank's balance loss is its own rows', as
// under data parallelism); two expert groups over four ranks; every checkpoint policy against
// `none` under the same layout, bit for bit. The ranks are this test binary again
// (dist_workers.h); run_expert_parallel_case is one rank's side.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "collective/expert_parallel_group.h"
#include "common/errors.h"
#include "dist_workers.h"
#include "estimate/architecture.h"
#include "estimate/estimate.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel_exchange.h"
#include "train/trainer.h"

namespace rematlab {

namespace {

// Rank r sends rank d (d + 1) · r rows of value 100·r + d: rank 0 sends nothing at all, and
// so receives nothing from itself; everything is differentiable, so its gradient comes back.
std::vector<torch::Tensor> exchange_rows_case(const ExpertParallel& group) {
  const int rank = group->rank();
  std::vector<int64_t> sent;
  std::vector<torch::Tensor> rows;
  for (int to = 0; to < group->size(); ++to) {
    sent.push_back(static_cast<int64_t>((to + 1) * rank));
    rows.push_back(torch::full({sent.back(), 3}, 100.0 * rank + to));
  }
  std::vector<int64_t> counts = group->exchange_counts(sent, 1, torch::kCPU, "test");
  const torch::Tensor input = torch::cat(rows).requires_grad_(true);
  const torch::Tensor received = dispatch_rows(input, group, sent, counts);
  // Each received row scaled by its rank-of-arrival position, so the gradient says where it was.
  const torch::Tensor weights =
      torch::arange(1, received.size(0) + 1, torch::kFloat32).unsqueeze(1).expand({-1, 3});
  (received * weights).sum().backward();
  return {torch::tensor(counts, torch::kInt64), received.detach(), input.grad().clone()};
}

}  // namespace

std::vector<torch::Tensor> testing::dist::run_expert_parallel_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item) {
  RunConfig config = config_from(item.at("run"));
  config.world_size = context->world_size();
  const parallel::DataParallelOptions options{ShardMode::kNone, config.bucket_bytes};
  std::shared_ptr<parallel::GradientExchange> exchange;
  if (config.ep > 1) {
    exchange = std::make_shared<parallel::ExpertParallelExchange>(
        context, static_cast<int>(config.ep), options);
  } else {
    exchange = std::make_shared<parallel::DataParallel>(context, options);
  }
  if (item.at("mode") == "experts_exchange") return exchange_rows_case(exchange->expert_parallel());
  Trainer trainer(config, exchange);
  std::vector<torch::Tensor> result;
  if (item.at("mode") == "experts_gradients") {
    const std::optional<double> loss =
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0));
    result.push_back(torch::tensor({loss.value()}, torch::kFloat64));
    for (const auto& param : trainer.model()->parameters()) result.push_back(param.grad().clone());
    return result;
  }
  // The steps' losses, gradient norms and loads, then the parameters.
  const RunSummary summary = trainer.run();
  std::vector<double> figures;
  for (const StepMetrics& step : summary.steps) figures.push_back(step.loss);
  for (const StepMetrics& step : summary.steps) figures.push_back(step.grad_norm);
  for (const StepMetrics& step : summary.steps) figures.push_back(step.expert_load);
  result.push_back(torch::tensor(figures, torch::kFloat64));
  for (const auto& param : trainer.model()->parameters()) result.push_back(param.detach().clone());
  return result;
}

// Named, not anonymous: a unity batch shares one anonymous namespace between suites.
namespace expert_parallel_suite {

using namespace testing::dist;

nlohmann::json moe_fields(const nlohmann::json& changes) {
  return with({{"preset", "moe-tiny"},
               {"seq_len", 16},
               {"batch", 2},
               {"threads", 1},
               {"bucket_bytes", 4096},
               {"ep", 2}},
              changes);
}

nlohmann::json case_of(const std::string& name, const std::string& mode,
                       const nlohmann::json& fields) {
  return {{"name", name}, {"mode", mode}, {"run", fields}};
}

// `whole` (one tensor per parameter) as rank `rank` of `ranks` expert ranks holds it.
std::vector<torch::Tensor> experts_of_rank(const nlohmann::json& fields,
                                           const std::vector<torch::Tensor>& whole, int rank,
                                           int ranks) {
  torch::NoGradGuard no_grad;
  Transformer model(config_from(fields).model);
  const auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(whole[i]);
  model->split_for_expert_parallel(std::make_shared<ExpertParallelGroup>(rank, ranks));
  std::vector<torch::Tensor> kept;
  for (const auto& param : model->parameters()) kept.push_back(param.detach().clone());
  return kept;
}

// One process's figures (losses, norms, loads; or the loss of one accumulation) and tensors
// (parameters, or gradients), at `data_ranks` times the batch.
struct Reference {
  std::vector<double> figures;
  std::vector<torch::Tensor> tensors;
};

Reference one_process(const nlohmann::json& fields, int data_ranks, bool steps) {
  RunConfig config = config_from(fields);
  config.ep = 1;
  config.batch *= data_ranks;
  Trainer trainer(config);
  Reference reference;
  if (!steps) {
    reference.figures.push_back(
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)).value());
    for (const auto& param : trainer.model()->parameters()) {
      reference.tensors.push_back(param.grad().clone());
    }
    return reference;
  }
  const RunSummary summary = trainer.run();
  for (const StepMetrics& step : summary.steps) reference.figures.push_back(step.loss);
  for (const StepMetrics& step : summary.steps) reference.figures.push_back(step.grad_norm);
  for (const auto& param : trainer.model()->parameters()) {
    reference.tensors.push_back(param.detach().clone());
  }
  return reference;
}

double relative_difference(const torch::Tensor& got, const torch::Tensor& expected) {
  const double scale = std::max(expected.abs().max().item<double>(), 1e-30);
  return max_abs_difference(got, expected) / scale;
}

// Each rank's tensors against its experts' share of `expected` (whole), within `tolerance` of
// each tensor's largest element, and its first `figures` figures against `expected_figures`
// within `tolerance` relative; returns the largest relative difference of the tensors.
double expect_ranks_match(const ScratchDir& dir, const std::string& name,
                          const nlohmann::json& fields, int world,
                          const std::vector<double>& expected_figures,
                          const std::vector<torch::Tensor>& expected, double tolerance) {
  const int ep = fields.at("ep").get<int>();
  double largest = 0.0;
  for (int rank = 0; rank < world; ++rank) {
    const std::vector<torch::Tensor> got = load(result_file(dir.path(), name, rank));
    const std::vector<torch::Tensor> mine = experts_of_rank(fields, expected, rank % ep, ep);
    EXPECT_EQ(got.size(), mine.size() + 1) << name;
    if (got.size() != mine.size() + 1) return INFINITY;
    for (std::size_t i = 0; i < expected_figures.size(); ++i) {
      EXPECT_NEAR(got[0][static_cast<int64_t>(i)].item<double>(), expected_figures[i],
                  tolerance * std::abs(expected_figures[i]))
          << name << ", rank " << rank << ", figure " << i;
    }
    for (std::size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(got[i + 1].sizes(), mine[i].sizes()) << name << ", tensor " << i;
      if (got[i + 1].sizes() != mine[i].sizes()) return INFINITY;
      const double difference = relative_difference(got[i + 1], mine[i]);
      EXPECT_LE(difference, tolerance) << name << ", rank " << rank << ", tensor " << i;
      largest = std::max(largest, difference);
    }
  }
  std::cout << name << " over " << world << " ranks: largest relative difference " << largest
            << std::endl;
  return largest;
}

std::vector<torch::Tensor> tensors_of(const ScratchDir& dir, const std::string& name, int rank) {
  std::vector<torch::Tensor> got = load(result_file(dir.path(), name, rank));
  got.erase(got.begin());
  return got;
}

// One backward: an expert's gradient is the sum of two ranks' rows' added by the exchange
// rather than within one matrix product, and the replicated parameters' are averaged over
// ranks; fp32 rounding of the largest element (64 units in the last place).
constexpr double kGradientTolerance = 64 * 1.19e-7;
// Steps: those differences carried through AdamW and clipping.
constexpr double kStepsTolerance = 1e-4;

TEST(ExpertParallel, TheExchangeCarriesRowsBetweenRanksThatSendOrReceiveNothing) {
  ScratchDir dir("ep-exchange");
  nlohmann::json spec = {{"output", dir.path()},
                         {"cases", {case_of("exchange", "experts_exchange", moe_fields({}))}}};
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  // Rank 0 sends nothing and receives rank 1's one row; rank 1 receives its own two rows.
  const std::vector<torch::Tensor> zero = load(result_file(dir.path(), "exchange", 0));
  const std::vector<torch::Tensor> one = load(result_file(dir.path(), "exchange", 1));
  EXPECT_TRUE(torch::equal(zero[0], torch::tensor({0, 1}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(one[0], torch::tensor({0, 2}, torch::kInt64)));
  EXPECT_TRUE(torch::equal(zero[1], torch::full({1, 3}, 100.0F)));
  EXPECT_TRUE(torch::equal(one[1], torch::full({2, 3}, 101.0F)));
  // Gradients back the way they came: rank 1's row to rank 0 arrived first there (weight 1),
  // its two rows to itself first and second.
  EXPECT_EQ(zero[2].size(0), 0);
  EXPECT_TRUE(torch::equal(
      one[2], torch::tensor({1.0F, 1.0F, 1.0F, 1.0F, 1.0F, 1.0F, 2.0F, 2.0F, 2.0F}).view({3, 3})));
}

TEST(ExpertParallel, GradientsAndStepsMatchOneProcessAtTheGroupsBatch) {
  // Without a balance loss (each rank's is its own rows', unlike one process's over all of them):
  // routed experts, a shared expert, checkpointed blocks. (A capacity caps each rank's own rows,
  // as data parallelism does, not the group's batch: its test is against data parallelism.)
  ScratchDir dir("ep-one-process");
  const std::map<std::string, nlohmann::json> cases = {
      {"plain", moe_fields({{"balance_coefficient", 0}})},
      {"shared", moe_fields({{"balance_coefficient", 0}, {"shared_expert_hidden", 32}})},
      {"checkpointed", moe_fields({{"balance_coefficient", 0}, {"checkpoint", "every:1"}})},
  };
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name + "_gradients", "experts_gradients", fields));
    spec["cases"].push_back(
        case_of(name + "_steps", "experts_steps", with(fields, {{"steps", 6}})));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    const Reference gradients = one_process(fields, 2, false);
    expect_ranks_match(dir, name + "_gradients", fields, 2, gradients.figures, gradients.tensors,
                       kGradientTolerance);
    const nlohmann::json stepped = with(fields, {{"steps", 6}});
    const Reference steps = one_process(stepped, 2, true);
    expect_ranks_match(dir, name + "_steps", stepped, 2, steps.figures, steps.tensors,
                       kStepsTolerance);
  }
}

TEST(ExpertParallel, TwoGroupsOfTwoMatchDataParallelismWithTheBalanceLossTraining) {
  // Four ranks: two expert groups, each expert on two ranks (its gradient averaged between
  // them); against four data ranks without expert parallelism, which train the same balance
  // losses. The loads differ between the layouts (a data rank's expert counts that rank's rows,
  // an expert rank's those of its group): each is only checked to be at least its share.
  ScratchDir dir("ep-four");
  const nlohmann::json fields = moe_fields({{"steps", 5}, {"balance_coefficient", 0.05}});
  const nlohmann::json data = with(fields, {{"ep", 1}});
  nlohmann::json spec = {
      {"output", dir.path()},
      {"cases",
       {case_of("ep2_dp4", "experts_steps", fields), case_of("dp4", "experts_steps", data)}}};
  run_workers(spec, 4, dir);
  if (HasFatalFailure()) return;
  const std::vector<torch::Tensor> whole = tensors_of(dir, "dp4", 0);
  const torch::Tensor dp_figures = load(result_file(dir.path(), "dp4", 0))[0];
  std::vector<double> figures;
  for (int64_t i = 0; i < 10; ++i) figures.push_back(dp_figures[i].item<double>());
  expect_ranks_match(dir, "ep2_dp4", fields, 4, figures, whole, kStepsTolerance);
  const torch::Tensor ep_figures = load(result_file(dir.path(), "ep2_dp4", 0))[0];
  for (int64_t step = 0; step < 5; ++step) {
    EXPECT_GE(ep_figures[10 + step].item<double>(), 1.0) << "load of step " << step;
    EXPECT_GE(dp_figures[10 + step].item<double>(), 1.0) << "load of step " << step;
  }
}

TEST(ExpertParallel, ACapacityCapsEachRanksRowsAsDataParallelismDoes) {
  // Capacity factor 1: an expert takes at most 1 · 32 · 2 / 4 = 16 of each rank's 64 choices,
  // the rest dropped, whichever process runs it; with the balance loss training.
  ScratchDir dir("ep-capacity");
  const nlohmann::json fields =
      moe_fields({{"steps", 4}, {"capacity_factor", 1.0}, {"balance_coefficient", 0.05}});
  nlohmann::json spec = {{"output", dir.path()},
                         {"cases",
                          {case_of("ep2", "experts_steps", fields),
                           case_of("dp2", "experts_steps", with(fields, {{"ep", 1}}))}}};
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  const torch::Tensor dp_figures = load(result_file(dir.path(), "dp2", 0))[0];
  std::vector<double> figures;
  for (int64_t i = 0; i < 8; ++i) figures.push_back(dp_figures[i].item<double>());
  expect_ranks_match(dir, "ep2", fields, 2, figures, tensors_of(dir, "dp2", 0), kStepsTolerance);
  // No expert takes more than its share; a load of exactly 1 is an expert at its cap.
  const torch::Tensor ep_figures = load(result_file(dir.path(), "ep2", 0))[0];
  double most = 0.0;
  for (int64_t step = 0; step < 4; ++step) {
    EXPECT_LE(ep_figures[8 + step].item<double>(), 1.0) << "load of step " << step;
    EXPECT_LE(dp_figures[8 + step].item<double>(), 1.0) << "load of step " << step;
    most = std::max(most, ep_figures[8 + step].item<double>());
  }
  EXPECT_EQ(most, 1.0) << "no expert reached its capacity: the cap was not exercised";
}

TEST(ExpertParallel, EveryPolicyGivesTheGradientsOfNoneBitForBitUnderTheSameLayout) {
  ScratchDir dir("ep-policies");
  const std::vector<std::string> policies = {"none",
                                             "every:1",
                                             "every:2",
                                             "sublayer:1,2",
                                             "selective",
                                             "keep:router",
                                             "keep:mlp-in,expert-out"};
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (std::size_t i = 0; i < policies.size(); ++i) {
    spec["cases"].push_back(case_of("policy" + std::to_string(i), "experts_gradients",
                                    moe_fields({{"checkpoint", policies[i]}})));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<torch::Tensor> none = load(result_file(dir.path(), "policy0", rank));
    for (std::size_t i = 1; i < policies.size(); ++i) {
      const std::vector<torch::Tensor> got =
          load(result_file(dir.path(), "policy" + std::to_string(i), rank));
      ASSERT_EQ(got.size(), none.size());
      for (std::size_t t = 0; t < got.size(); ++t) {
        EXPECT_TRUE(torch::equal(got[t], none[t]))
            << policies[i] << ", rank " << rank << ", tensor " << t;
      }
    }
  }
}

// The rows the fullest rank's experts take, its rank load times its own tokens' (at most every
// expert full from every rank under a capacity), each keeping its input, its [gate; up] output
// and their product; what its tokens get back is theirs alone whatever the load.
TEST(ExpertParallel, TheFullestRanksExpertActivationsGrowWithItsRankLoad) {
  for (const double capacity : {0.0, 1.25}) {
    estimate::EstimateRequest request;
    request.arch = estimate::from_model_config(
        config_from(moe_fields({{"capacity_factor", capacity}, {"seq_len", 64}})).model);
    request.batch = 4;
    request.world_size = 2;
    request.expert_ranks = 2;
    const estimate::Estimate balanced = estimate::make_estimate(request);
    request.arch->expert_rank_load = 1.5;
    const estimate::Estimate loaded = estimate::make_estimate(request);
    const estimate::Architecture& arch = *request.arch;
    const int64_t k = arch.moe.experts_per_token;
    const int64_t tokens = request.batch * arch.seq_len;
    const int64_t slots = tokens * k;  // 1.25 times the even share: none dropped when balanced
    const int64_t room =
        capacity > 0 ? arch.moe.experts * expert_capacity(tokens, arch.moe) : slots * 2;
    const int64_t received = std::min(slots * 3 / 2, room);
    EXPECT_EQ(loaded.activations->saved_bytes - balanced.activations->saved_bytes,
              arch.layers * (received - slots) * (arch.d_model + 3 * arch.expert_hidden) * 4)
        << "capacity " << capacity;
    EXPECT_EQ(loaded.states.total(), balanced.states.total());
  }
  estimate::EstimateRequest one_rank;
  one_rank.arch = estimate::from_model_config(config_from(moe_fields({})).model);
  one_rank.arch->expert_rank_load = 1.5;
  EXPECT_THROW(estimate::make_estimate(one_rank), InvalidInput);  // its experts take its own rows
}

TEST(ExpertParallel, EstimatedParametersPerRankEqualTheSplitModel) {
  for (const auto& [shared, ranks] :
       std::vector<std::pair<int64_t, int>>{{0, 2}, {0, 4}, {32, 2}, {32, 4}}) {
    const ModelConfig config = config_from(moe_fields({{"shared_expert_hidden", shared}})).model;
    int64_t whole = 0;
    for (const auto& param : Transformer(config)->parameters()) whole += param.numel();
    const estimate::Architecture arch = estimate::from_model_config(config);
    EXPECT_EQ(estimate::expert_rank_parameter_count(arch, 1), whole);
    for (int rank = 0; rank < ranks; ++rank) {
      Transformer model(config);
      const std::vector<torch::Tensor> experts =
          model->split_for_expert_parallel(std::make_shared<ExpertParallelGroup>(rank, ranks));
      int64_t held = 0;
      for (const auto& param : model->parameters()) held += param.numel();
      int64_t held_experts = 0;
      for (const auto& param : experts) held_experts += param.numel();
      EXPECT_EQ(estimate::expert_rank_parameter_count(arch, ranks), held)
          << "shared " << shared << " over " << ranks << ", rank " << rank;
      EXPECT_EQ(held_experts * ranks, estimate::expert_parameter_count(arch));
      EXPECT_LT(held, whole);
    }
  }
}

TEST(ExpertParallel, LayoutsItCannotSplitAreRefusedByName) {
  auto refusal = [](const nlohmann::json& changes) {
    RunConfig config = config_from(moe_fields(changes));
    try {
      validate(config);
    } catch (const InvalidInput& error) {
      return error.field() + ": " + error.what();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({{"world_size", 2}}), "accepted");
  EXPECT_NE(refusal({{"world_size", 1}}).find("--ep"), std::string::npos);
  EXPECT_NE(refusal({{"world_size", 3}}).find("--ep"), std::string::npos);
  EXPECT_NE(refusal({{"world_size", 2}, {"ep", 3}}).find("cannot split 4 experts"),
            std::string::npos);
  EXPECT_NE(refusal({{"world_size", 2}, {"experts", 0}}).find("has none"), std::string::npos);
  EXPECT_EQ(refusal({{"world_size", 2}, {"shard", "optimizer"}}).rfind("--shard", 0), 0U);
  EXPECT_EQ(refusal({{"world_size", 4}, {"tp", 2}}).rfind("--tp", 0), 0U);
  // Named as what is wrong, not as the data ranks the tensor ranks leave.
  EXPECT_EQ(refusal({{"world_size", 2}, {"tp", 2}}).rfind("--tp", 0), 0U);
  EXPECT_EQ(refusal({{"world_size", 2}, {"checkpoint", "plan:5MiB"}}).rfind("--checkpoint", 0), 0U);
  EXPECT_NE(refusal({{"world_size", 2}, {"ep", 0}}).find("between 1"), std::string::npos);
}

}  // namespace expert_parallel_suite
}  // namespace rematlab
