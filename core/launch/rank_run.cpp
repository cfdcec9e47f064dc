#include "launch/rank_run.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "checkpoint/checkpoint_policy.h"
#include "common/current_exception.h"
#include "common/errors.h"
#include "common/json_text.h"
#include "common/process_identity.h"
#include "launch/local_launcher.h"
#include "launch/rank_launch.h"
#include "launch/step_feed.h"
#include "parallel/data_parallel.h"
#include "parallel/dist_context.h"
#include "parallel/dist_errors.h"
#include "parallel/expert_parallel_exchange.h"
#include "parallel/fully_sharded.h"
#include "parallel/pipeline_exchange.h"
#include "parallel/tensor_parallel_exchange.h"
#include "plan/chain_costs_json.h"
#include "plan/profile_key.h"
#include "runtime/device.h"
#include "store/peak_flops_registry.h"
#include "store/profile_registry.h"
#include "store/run_recorder.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "train/trainer.h"

namespace rematlab::launch {
namespace {

using Clock = std::chrono::steady_clock;

// "d_model" → "--d-model": the flag that sets a config field.
std::string flag_of(const std::string& field) {
  if (field == "world_size") return "--nproc";
  if (field == "bucket_bytes") return "--bucket-size";
  if (field == "budget_bytes") return "--budget";
  std::string flag = "--" + field;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

// Every rank must train the same thing: a rank started with other flags would silently train
// another model, or hang at the first collective of another shape.
void agree_on_config(parallel::DistContext& context, const RunConfig& config) {
  const std::vector<std::string> all = context.exchange("config", to_json(config).dump());
  const nlohmann::json first = parse_json(all.front());
  for (std::size_t rank = 1; rank < all.size(); ++rank) {
    const nlohmann::json other = parse_json(all[rank]);
    if (other == first) continue;
    for (const auto& item : first.items()) {
      const nlohmann::json theirs = other.contains(item.key()) ? other.at(item.key()) : nullptr;
      if (theirs == item.value()) continue;
      throw InvalidInput(flag_of(item.key()), "rank " + std::to_string(rank) + " was given " +
                                                  brief_json(theirs) + " but rank 0 " +
                                                  brief_json(item.value()) +
                                                  "; start every rank with the same configuration");
    }
    throw InvalidInput("run", "rank " + std::to_string(rank) +
                                  "'s configuration differs from rank 0's; start every rank "
                                  "with the same flags");
  }
}

// Who failed, as far as anyone can tell: our launcher names a rank that died; a rank that
// failed by its own error says so before it exits. Waits a little for either.
std::string who_failed(parallel::DistContext& context) {
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  try {
    do {
      if (context.store().check({kFailureKey})) {
        return context.store().get_to_str(kFailureKey);
      }
      for (int rank = 0; rank < context.world_size(); ++rank) {
        const std::string key = "failed/" + std::to_string(rank);
        if (rank != context.rank() && context.store().check({key})) {
          return context.store().get_to_str(key);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (Clock::now() < deadline);
  } catch (const std::exception&) {
    // The store went with a failed rank.
  }
  return "another rank failed or stopped responding";
}

// `frozen_bytes`: the frozen base this rank holds (fine-tuning), which no exchange holds: whole on
// every data rank, a stage's own blocks' on a pipeline stage.
RankResult rank_result(const RunSummary& summary, const parallel::ModelStateBytes& bytes,
                       int64_t frozen_bytes, int rank) {
  const ProcessIdentity self = current_process();
  RankResult result;
  result.rank = rank;
  result.host = self.host;
  result.pid = self.pid;
  result.peak_bytes = summary.peak_bytes;
  result.baseline_bytes = summary.baseline_bytes;
  result.peak_activation_bytes = summary.peak_activation_bytes;
  result.step_ms = summary.step_ms;
  result.comm_ms = summary.comm_ms;
  result.comm_wait_ms = summary.comm_wait_ms;
  result.comm_hidden_ms = summary.comm_hidden_ms;
  result.bubble_ms = summary.bubble_ms;
  result.dispatch_ms = summary.dispatch_ms;
  result.transfer_ms = summary.transfer_ms;
  result.param_bytes = bytes.params + frozen_bytes;
  result.grad_bytes = bytes.grads;
  result.optimizer_bytes = bytes.optimizer;
  for (const StepMetrics& step : summary.steps) result.step_peak_bytes.push_back(step.peak_bytes);
  return result;
}

c10::Device rank_device(const RunConfig& config, const parallel::DistEnv& env) {
  const c10::Device device = parse_device(config.device);
  if (!device.is_cuda() || env.world_size <= 1) return device;  // one rank runs where it is told
  if (config.device != "cuda") throw InvalidInput("--device", kGpuPerRank);
  return parse_device("cuda:" + std::to_string(env.local_rank));  // checks that it exists
}

// Each step: to the caller, into the record (rank 0), and to our launcher's live view.
TrainerCallbacks rank_callbacks(const parallel::DistEnv& env, const RankRunOptions& options,
                                const RunRecorder& recorder, c10d::Store& store,
                                const std::atomic<bool>& cancel) {
  TrainerCallbacks callbacks;
  callbacks.cancel = &cancel;
  const bool feed = env.launcher == "rematlab" && step_feed_requested();
  const int rank = env.rank;
  callbacks.on_step = [&options, &recorder, &store, feed, rank](const StepMetrics& step) {
    if (options.on_step) options.on_step(step);
    recorder.add_step(step);
    if (!feed) return;
    try {
      publish_step(store, rank, step);
    } catch (const std::exception&) {
      // Its launcher's live view misses a step; the run, recorded by rank 0, goes on.
    }
  };
  return callbacks;
}

// MFU's peak: rank 0's, kept in its database or measured while the others wait, for all.
void share_peak_flops(parallel::DistContext& context, bool leader, RunStore* store,
                      RunConfig& config) {
  if (leader) resolve_peak_flops(config, store);
  const nlohmann::json peak = {{"flops", config.peak_flops}, {"source", config.peak_flops_source}};
  const nlohmann::json chosen =
      parse_json(context.exchange("peak_flops", leader ? peak.dump() : "{}").front());
  config.peak_flops = chosen.at("flops").get<double>();
  config.peak_flops_source = chosen.at("source").get<std::string>();
}

// A plan's chain costs: one rank alone measures and keeps them as one process does. Over several
// ranks the database's, when rank 0 has them kept for this configuration, go to every rank;
// else the Trainer measures them on all of them at once (parallel/ranks_profile.h), and rank 0
// keeps what they agreed on (keep_measured_chain_costs).
void share_kept_chain_costs(parallel::DistContext& context, bool leader, RunStore* store,
                            RunConfig& config, const std::atomic<bool>* cancel) {
  if (!plan::needs_chain_costs(config)) return;
  if (context.world_size() == 1) {
    resolve_chain_costs(config, store, cancel);
    return;
  }
  std::string kept_text;
  if (leader && store) {
    if (const auto kept = kept_chain_costs(config, *store, plan::ProfileOptions{}.repeats)) {
      kept_text = nlohmann::json{{"costs", plan::to_json(kept->costs)},
                                 {"profile_ms", kept->profile_ms},
                                 {"source", kept->source}}
                      .dump();
    }
  }
  const std::string shared = context.exchange("kept_chain_costs", kept_text).front();
  if (shared.empty()) return;
  const nlohmann::json json = parse_json(shared);
  KnownChainCosts known;
  known.key = plan::profile_key(config, plan::ProfileOptions{}.repeats);
  known.costs = plan::chain_costs_from_json(json.at("costs"));
  known.profile_ms = json.at("profile_ms").get<double>();
  known.source = json.at("source").get<std::string>();
  config.known_chain_costs = std::make_shared<const KnownChainCosts>(std::move(known));
}

// `brought`: the costs the run started with (null when the Trainer measured them itself).
void keep_measured_chain_costs(const Trainer& trainer, RunStore* store,
                               const std::shared_ptr<const KnownChainCosts>& brought) {
  const std::shared_ptr<const KnownChainCosts>& known = trainer.config().known_chain_costs;
  if (!store || !known || known == brought) return;
  KnownChainCosts kept = *known;
  keep_chain_costs(store, kept);
}

// Data parallelism, tensor parallelism with data parallelism over its groups, or a pipeline.
struct RankExchange {
  std::shared_ptr<parallel::GradientExchange> exchange;
  std::function<parallel::ModelStateBytes()> state_bytes;
  std::function<int64_t()> buffer_peak_bytes;
};

RankExchange make_exchange(const std::shared_ptr<parallel::DistContext>& context,
                           const RunConfig& config) {
  const parallel::DataParallelOptions options{parse_shard(config.shard), config.bucket_bytes};
  if (config.pp > 1) {
    // The activations a stage sends are counted as activations; its buffers are the buckets its
    // data ranks average.
    auto pipeline =
        std::make_shared<parallel::PipelineExchange>(context, config.pp, config.tp, options);
    return {pipeline, [pipeline] { return pipeline->model_state_bytes(); },
            [pipeline] { return pipeline->buffer_peak_bytes(); }};
  }
  if (config.ep > 1) {
    auto experts = std::make_shared<parallel::ExpertParallelExchange>(
        context, static_cast<int>(config.ep), options);
    return {experts, [experts] { return experts->model_state_bytes(); },
            [experts] { return experts->buffer_peak_bytes(); }};
  }
  if (config.tp > 1) {
    auto tensor = std::make_shared<parallel::TensorParallelExchange>(
        context, static_cast<int>(config.tp), options);
    return {tensor, [tensor] { return tensor->model_state_bytes(); },
            [tensor] { return tensor->buffer_peak_bytes(); }};
  }
  std::shared_ptr<parallel::DataExchange> data;
  if (options.shard == ShardMode::kParameters) {
    data = std::make_shared<parallel::FullyShardedParameters>(context);
  } else {
    data = std::make_shared<parallel::DataParallel>(context, options);
  }
  return {data, [data] { return data->model_state_bytes(); },
          [data] { return data->buffer_peak_bytes(); }};
}

// The run's record, begun once the Trainer has chosen what the run left to it: a balanced split
// is recorded from the start, so a run that fails keeps the split its steps ran with.
RunRecorder begin_record(RunWriter& writer, const RankRunOptions& options, RunConfig requested,
                         RunConfig recorded, const RunConfig& chosen) {
  requested.pp_split = chosen.pp_split;
  recorded.pp_split = chosen.pp_split;
  return RunRecorder(&writer, experiment_for(writer, options.experiment, options.experiment_spec),
                     options.name.empty() ? describe_run(requested) : options.name, recorded);
}

}  // namespace

std::optional<RunSummary> run_as_rank(RunConfig config, const parallel::DistEnv& env,
                                      const RankRunOptions& options,
                                      const std::atomic<bool>& cancel) {
  config.world_size = env.world_size;
  validate(config);
  const c10::Device device = rank_device(config, env);
  const bool leader = env.rank == 0;
  // A bad --db is refused before anyone waits on this rank, but the database is created only
  // once every rank has joined with the same configuration: a launch refused at the rendezvous
  // (a port in use, a missing peer, other flags) leaves nothing on disk.
  if (leader && !options.db.empty()) check_database_path(options.db);

  auto context = parallel::DistContext::connect(env, device, options.timeout, &cancel);
  agree_on_config(*context, config);
  std::unique_ptr<RunStore> store;
  if (leader && !options.db.empty()) store = std::make_unique<RunStore>(options.db);
  RunConfig rank_config = config;
  rank_config.device = device.str();
  share_kept_chain_costs(*context, leader, store.get(), rank_config, &cancel);
  share_peak_flops(*context, leader, store.get(), rank_config);

  const RankExchange exchange = make_exchange(context, config);
  std::unique_ptr<RunWriter> writer;
  RunRecorder recorder;
  // `peer`: this rank stopped because another did. After Stop, that other may have been killed
  // for not stopping in time: the run was cancelled, not failed. This rank's own error is a
  // failure whenever it comes.
  auto fail = [&](const std::string& message, bool peer) {
    const parallel::ForcedEnd end = parallel::forced_end(peer && cancel.load(), message);
    recorder.end(end.status, end.message);
  };
  try {
    Trainer trainer(rank_config, exchange.exchange, &cancel);
    keep_measured_chain_costs(trainer, store.get(), rank_config.known_chain_costs);
    if (store) {
      writer = std::make_unique<RunWriter>(options.db);
      recorder = begin_record(*writer, options, config, rank_config, trainer.config());
      context->store().set(kRunIdKey, std::to_string(*recorder.id()));
    }
    RunSummary summary =
        trainer.run(rank_callbacks(env, options, recorder, context->store(), cancel));
    RankResult mine =
        rank_result(summary, exchange.state_bytes(), trainer.model()->frozen_bytes(), env.rank);
    mine.buffer_peak_bytes = exchange.buffer_peak_bytes();
    const std::vector<std::string> all = context->exchange("result", to_json(mine).dump());
    // Nobody leaves while another may still read the store rank 0 may serve.
    context->wait(context->backend().barrier(), "finishing the run");
    if (!leader) return std::nullopt;
    for (const std::string& text : all) {
      summary.ranks.push_back(rank_result_from_json(parse_json(text)));
    }
    // Stages hold unlike amounts (the first the most micro-batches, the last the head): the
    // run's memory is the fullest stage's, its steps rank 0's.
    // Stages differ, and so do expert ranks (each holds what its experts drew).
    if (config.pp > 1 || config.ep > 1) summary.take_memory_of_fullest_rank();
    summary.run_id = recorder.id();
    recorder.finish(summary);
    return summary;
  } catch (const parallel::PeerFailure& failure) {
    const std::string message =
        who_failed(*context) + "; rank " + std::to_string(env.rank) + " stopped: " + failure.what();
    fail(message, true);
    throw parallel::PeerFailure(message);
  } catch (...) {
    const std::string message =
        "rank " + std::to_string(env.rank) + " failed: " + describe_current_exception();
    try {
      context->store().set("failed/" + std::to_string(env.rank), message);
    } catch (const std::exception&) {
      // The others then report a peer failure without a reason.
    }
    fail(message, false);
    throw;
  }
}

}  // namespace rematlab::launch
