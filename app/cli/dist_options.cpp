#include "cli/dist_options.h"

#include "common/byte_size.h"
#include "common/errors.h"
#include "parallel/dist_context.h"
#include "parallel/dist_env.h"
#include "run/pipeline_config.h"

namespace rematlab::cli {

void DistOptions::add_to(CLI::App& command) {
  command.add_option(
      "--nproc", nproc_,
      "Start N ranks on this host; each group of --tp of them trains --batch rows of "
      "every global batch (docs/distributed.md, docs/parallel.md)");
  command
      .add_option("--shard", shard_,
                  "Data parallel: none, optimizer (ZeRO-1: AdamW state partitioned), "
                  "gradients (ZeRO-2: gradients too) or parameters (ZeRO-3: weights too, each "
                  "layer gathered whole while it runs); with --tp, over the ranks that hold the "
                  "same tensor part (--nproc / --tp)")
      ->capture_default_str();
  command.add_option("--tp", tp_,
                     "Tensor parallel: ranks that split every layer of one model (attention "
                     "heads, MLP or experts' width, vocabulary); --nproc must be a multiple "
                     "(default 1)");
  command.add_flag("--sequence-parallel", sequence_parallel_,
                   "Tensor parallel: split the residual stream and the norms between the "
                   "layers along the sequence (needs --tp 2 or more)");
  command.add_option("--pp", pp_,
                     "Pipeline parallel: stages that each run a share of the blocks, the step's "
                     "--accum micro-batches passing through them in 1F1B order (--nproc equal "
                     "to it, or a multiple: the pipelines are data ranks; --accum at least it)");
  command.add_option("--ep", ep_,
                     "Expert parallel: data ranks that split a mixture of experts' experts, each "
                     "token sent to its expert's rank and back (all-to-all); it divides the data "
                     "ranks (--nproc) and the experts (default 1)");
  command.add_option("--virtual-stages", virtual_stages_,
                     "Pipeline parallel: model chunks per stage, run under the interleaved 1F1B "
                     "schedule (--pp × it blocks at least; --accum a multiple of --pp)");
  command.add_option("--pp-split", pp_split_,
                     "Pipeline parallel: the blocks of each stage, comma-separated (with "
                     "--virtual-stages, of each model chunk in chain order: chunk c·P + s is "
                     "stage s's c-th), e.g. 3,5; or balanced: chosen when the run starts from the "
                     "chain's measured times, the embedding's with the first chunk and the "
                     "head's with the last (kept with the runs database like plan:'s profile); "
                     "default: equal middle stages, the ends, which also run the embedding and "
                     "the head, no larger");
  command.add_option("--bucket-size", bucket_size_,
                     "Data parallel: gradient bucket size (bytes, KiB, MiB; default 25MiB)");
  command.add_option("--dist-timeout", timeout_s_,
                     "Data parallel: seconds a rank waits for the others (rendezvous and every "
                     "collective) before it stops with an error (default 120)");
}

void DistOptions::apply(RunConfig& config) const {
  if (nproc_) {
    if (*nproc_ < 1 || *nproc_ > kMaxWorldSize) {
      throw InvalidInput("--nproc", "must be between 1 and " + std::to_string(kMaxWorldSize));
    }
    config.world_size = *nproc_;
  } else if (const parallel::DistEnv env = parallel::dist_env_from_process(); env.distributed()) {
    config.world_size = env.world_size;  // a rank its launcher started: the run's size is known
  }
  config.shard = shard_;
  if (tp_) config.tp = *tp_;
  if (pp_) config.pp = *pp_;
  if (ep_) config.ep = *ep_;
  if (virtual_stages_) config.virtual_stages = *virtual_stages_;
  if (!pp_split_.empty()) set_pp_split(config, pp_split_);  // else --config's, or the rule
  if (sequence_parallel_) config.sequence_parallel = true;
  if (!bucket_size_.empty()) config.bucket_bytes = parse_byte_size(bucket_size_, "--bucket-size");
  if (timeout_s_ && !(*timeout_s_ >= 1.0 && *timeout_s_ <= 86400.0)) {
    throw InvalidInput("--dist-timeout", "must be between 1 and 86400 seconds");
  }
  validate(config);
}

std::chrono::milliseconds DistOptions::timeout() const {
  if (!timeout_s_) return parallel::kDefaultTimeout;
  return std::chrono::milliseconds(static_cast<int64_t>(*timeout_s_ * 1000.0));
}

}  // namespace rematlab::cli
