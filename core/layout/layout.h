// A training layout of one model on a cluster, and what the layout planner says about it.
//
// The degrees multiply to the GPUs: tp × cp × dp × pp, placed as Megatron-LM places them (tensor
// ranks innermost, inside a node; then context, then data; pipeline stages outermost), which
// decides which links each collective runs over. A mixture of experts may split its experts over
// ep neighbouring data or context ranks (expert parallelism, folding the context ranks in as
// Megatron-LM does): ep divides dp × cp and is no further degree.
// docs/layout.md gives the model of memory and time these figures come from, and what it leaves
// out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/precision.h"
#include "estimate/architecture.h"
#include "layout/gpu_catalog.h"
#include "run/shard_mode.h"

namespace rematlab::layout {

struct Cluster {
  GpuKind gpu;
  int64_t gpus = 1;
  int64_t gpus_per_node = 1;
  int64_t host_memory_bytes = 0;  // per node
  // Bytes/s a node's CPUs stream through host memory (the offloaded optimizer's update).
  double host_memory_bandwidth = 200e9;

  // The GPUs of one node the cluster uses (its tensor ranks' reach, and what shares the node's host
  // memory and CPUs): a cluster smaller than a node fills only part of one.
  int64_t node_gpus() const { return std::min(gpus, gpus_per_node); }
};

enum class Offload {
  kNone,
  kOptimizer,   // ZeRO-Offload: gradients' shards, master copy and moments in host memory (ZeRO 1+)
  kParameters,  // ZeRO-Infinity: the weights' shards too (ZeRO stage 3 only)
  kActivations,  // recomputed segments' inputs wait in host memory
};
std::string to_string(Offload offload);
Offload parse_layout_offload(const std::string& text);  // throws InvalidInput("--offload", …)

enum class ActivationModel {
  kEngine,    // RematLab's own accounting, tensor by tensor (estimate/activation_memory.h)
  kMegatron,  // Korthikanti et al.'s per-layer terms for a GPT-3-style block
};

struct Layout {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t vp = 1;  // model chunks per pipeline rank (interleaved schedule when > 1)
  int64_t cp = 1;
  int64_t dp = 1;
  int64_t ep = 1;  // data × context ranks that split one set of experts (a mixture only)
  bool sp = false;
  int zero = 0;  // 0 none, 1 optimizer, 2 + gradients, 3 + parameters (over dp × cp ranks)
  int64_t micro_batch = 1;
  int64_t accum = 1;  // micro-batches per step and pipeline
  Offload offload = Offload::kNone;
  std::vector<std::string> stage_checkpoints;  // one policy per pipeline stage
  // The blocks of each model chunk in chain order, as --pp-split takes them (chunk c on pipeline
  // rank c mod pp). Empty in a layout searched: its evaluation's is filled in (layout_split.cpp).
  std::vector<int64_t> split;

  // "every:1" when every stage has it, else the stages' policies joined by '|'.
  std::string checkpoint_text() const;
};

// "TP 8+SP PP 4×2 DP 2 ZeRO 1 micro-batch 1" (with "split 9,3" after the pipeline where it is
// not the engine's rule): for reasons and tables.
std::string layout_name(const Layout& layout);
// The blocks the split's chunks hold, and the split as --pp-split takes it ("9,3").
int64_t split_blocks(const Layout& layout);
std::string split_text(const std::vector<int64_t>& split);

// What the engine's --shard is for the layout's ZeRO stage (none without data parallelism).
ShardMode engine_shard(const Layout& layout);

// Dimensions the search must keep: each absent one is searched.
struct FixedDimensions {
  std::optional<int64_t> tp, pp, vp, cp, dp, micro_batch;
  std::optional<bool> sp;
  std::optional<int> zero;
  std::optional<std::string> checkpoint;  // for every stage
  std::optional<Offload> offload;
  std::optional<int64_t> ep;
  // --pp-split: the blocks of each model chunk (with fixed pp), or every pipeline searched
  // balanced by the chain's predicted times; neither: the engine's rule (rule_split).
  std::vector<int64_t> pp_split;
  bool pp_split_balanced = false;
};

// Values of gradients a data rank reduces at once, by default (Megatron-LM's).
inline constexpr int64_t kBucketValues = 40'000'000;

struct LayoutRequest {
  estimate::Architecture arch;  // seq_len: the sequence trained
  Precision precision = Precision::kBf16;
  bool fp32_gradients = false;  // Megatron-LM accumulates gradients in fp32 (4 bytes each)
  Cluster cluster;
  int64_t global_batch = 1;  // sequences per step
  FixedDimensions fixed;
  // Share of peak, at least kMinMatmulEfficiency (below it a step's time is past what a double
  // divides into); 0: the GPU kind's default.
  double matmul_efficiency = 0.0;
  double fragmentation = 0.05;  // allowance on top of what is allocated, as a share of it
  // Gradients a data rank reduces in one collective (values): how many collectives its
  // reduction takes, and what ZeRO 2 and offloading hold of them whole.
  int64_t bucket_values = kBucketValues;
  ActivationModel activation_model = ActivationModel::kEngine;
  // Search only what RematLab's engine runs: no context parallelism, no pipeline with sharded
  // parameters or offload, model states on the GPUs.
  bool engine_only = false;
  int64_t top = 5;

  static constexpr double kMinMatmulEfficiency = 1e-3;

  // Bytes of one gradient: 4 when `fp32_gradients`, else the precision's.
  int64_t gradient_bytes() const;
  // The buckets as `run --bucket-size` takes them: bytes of the engine's gradients, fp32 in
  // every precision (its parameters are fp32; autocast computes in 16 bits), the same values.
  int64_t engine_bucket_bytes() const { return bucket_values * 4; }
  // Sets the buckets from `text`, bytes of the planned gradients (gradient_bytes() each), as
  // `layout --bucket-size` takes it: whole gradients, at least one, at most run's limit (2^38
  // values). Throws InvalidInput naming --bucket-size.
  void set_bucket_size(const std::string& text);

  double efficiency() const {
    return matmul_efficiency > 0.0 ? matmul_efficiency : cluster.gpu.matmul_efficiency;
  }
};

struct MemoryParts {
  int64_t weights = 0;
  int64_t gradients = 0;
  int64_t master = 0;     // fp32 copy of 16-bit weights
  int64_t optimizer = 0;  // AdamW's moments
  int64_t activations = 0;
  int64_t buffers = 0;    // communication buffers: buckets, gathered units, pipeline sends
  int64_t allowance = 0;  // fragmentation, stated
  int64_t total() const {
    return weights + gradients + master + optimizer + activations + buffers + allowance;
  }
};

// Seconds of one step, by what they are spent on (after overlap: what remains exposed).
struct TimeParts {
  double compute = 0.0;    // model FLOPs at the matmul efficiency
  double recompute = 0.0;  // what the checkpoint policies run again (matmuls and element-wise)
  // Forward's and backward's element-wise work (norms, residual adds, activations) by memory
  // bandwidth, beside the matmuls' FLOPs in `compute` (layout/elementwise_work.h).
  double elementwise = 0.0;
  double tensor = 0.0;     // tensor/sequence-parallel collectives
  double experts = 0.0;    // expert parallelism's all-to-all dispatch and combine
  double context = 0.0;    // context-parallel key/value exchange
  double pipeline = 0.0;   // sends between stages
  double bubble = 0.0;     // pipeline fill and drain
  double data = 0.0;       // gradient reduction (and parameter gathers) left exposed
  double offload = 0.0;    // host transfers and the host's optimizer update
  double optimizer = 0.0;  // the update on the GPU, bound by memory bandwidth
};

struct StageFigures {
  std::string checkpoint;
  int64_t layers = 0;     // blocks the stage holds (all its chunks)
  int64_t in_flight = 0;  // micro-batch chunks whose activations it holds at its peak
  MemoryParts memory;
  double microbatch_s = 0.0;  // forward and backward of one micro-batch on this stage
  // Of a pipeline's step, the time the stage waits on its neighbours (the fill and drain, and a
  // slower stage's pace): the step's walked orders less its own micro-batches.
  double idle_s = 0.0;
};

struct LayoutEvaluation {
  Layout layout;
  std::vector<StageFigures> stages;
  MemoryParts memory;      // the stage with the most
  int64_t host_bytes = 0;  // per GPU, offloaded
  TimeParts time;
  double step_s = 0.0;
  double tokens_per_s = 0.0;
  double mfu = 0.0;
  bool fits = false;
  bool device_fits = false;  // within the GPU's memory (host memory may still be short)
  bool recomputes = false;   // some stage runs part of its forward again
  std::string reason;        // why it does not fit
  // Dimensions predicted here that RematLab's engine cannot run yet.
  std::vector<std::string> engine_lacks;
};

}  // namespace rematlab::layout
