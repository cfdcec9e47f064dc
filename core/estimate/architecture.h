// The shape of a transformer as far as counting needs it: the engine's shapes, GPT-2 and Llama
// (exact, so the count equals the engine's), and gpt3-175b and llama3-405b, which only the
// estimator and the layout planner know.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace rematlab::estimate {

struct Architecture {
  std::string name = "custom";
  int64_t layers = 0;
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;    // < heads: grouped-query attention
  int64_t mlp_hidden = 0;  // inner width of the MLP
  int64_t seq_len = 0;
  int64_t vocab = 0;
  bool gated_mlp = false;         // SwiGLU: three matrices instead of two
  bool biases = true;             // every linear layer has one
  bool qkv_bias = false;          // only q, k and v have one (Qwen 2)
  bool qk_norm = false;           // an RMSNorm on each head's q and k (Qwen 3)
  bool rms_norm = false;          // RMSNorm has a scale only; LayerNorm a scale and a shift
  bool tied_head = true;          // the LM head reuses the token embedding
  bool learned_positions = true;  // GPT's position table (Llama rotates instead: no weights)
  bool rotary = false;            // Llama's rotary positions (cos/sin tables: buffers)
  int64_t loss_chunks = 1;        // the head and loss in this many slices of tokens
  AttentionKind attention = AttentionKind::kSdpa;
  double dropout = 0.0;
  bool engine_shape = false;  // the engine trains it (GPT-2 or Llama): calibrated figures apply

  int64_t head_width = 0;      // 0: d_model / heads
  int64_t sliding_window = 0;  // each token attends to this many latest keys; 0: all
  // Fine-tuning: adapters on a frozen base (none by default). A frozen projection keeps no input
  // for a weight's gradient; its adapter keeps that input and its own rank-wide values.
  LoraOptions lora;
  // A mixture of experts in every block's MLP (none by default), each expert `expert_hidden`
  // wide (SwiGLU).
  MoeOptions moe;
  int64_t expert_hidden = 0;
  // Expert parallelism: the rows the fullest rank's experts take over the rows its own tokens
  // route (a run's `expert_rank_load`; 1 when balanced, and always without expert ranks).
  double expert_rank_load = 1.0;
  // The same for one block's forward alone, the busiest (a run's `expert_block_load`): a
  // recomputed block's experts hold its own rows, not the step's mean. None: the rank load
  // (every block at the mean).
  std::optional<double> expert_block_load;
  // The ranks the experts are split over (--ep: each holds experts / expert_ranks of a block's)
  // and the busiest expert's load: the most rows one expert took in a block's forward over its
  // even share, the choices of the ranks it serves spread evenly (a run's `expert_load`; 1 when
  // balanced). Experts run one at a time, each backward holding gradients for its own rows.
  int64_t expert_ranks = 1;
  double expert_load = 1.0;
  // A pipeline stage after the first (the layout planner's chunks): under a frozen base its input
  // still wants a gradient when adapters lie before it, which the stage sends back.
  bool input_trains = false;

  double busiest_block_load() const {
    return std::max(expert_block_load.value_or(expert_rank_load), expert_rank_load);
  }
  int64_t head_dim() const { return head_width > 0 ? head_width : d_model / heads; }
  int64_t q_dim() const { return heads * head_dim(); }  // the queries' and the context's width
  int64_t kv_dim() const { return kv_heads * head_dim(); }
};

// The engine's own shape for `config` (GPT-2 or Llama family).
Architecture from_model_config(const ModelConfig& config);

// Engine presets (GPT-2 and Llama), then gpt3-175b and llama3-405b.
const std::vector<std::string>& architecture_names();
// Whether the engine trains the named shape (false for the estimation-only ones).
bool is_engine_preset(const std::string& name);
// Throws InvalidInput("--model", …) for an unknown name.
Architecture architecture_preset(const std::string& name);
// The same model as the engine's ModelConfig, for shape flags to refine before it is counted.
ModelConfig architecture_model_config(const std::string& name);

// Throws InvalidInput naming the flag of the first field that cannot describe a model.
void validate(const Architecture& arch);

// Exact parameter count, embeddings and head included.
int64_t parameter_count(const Architecture& arch);
// The most values any one parameter tensor holds (the embedding, the MLP's fused gate-and-up…).
int64_t largest_parameter_count(const Architecture& arch);
// Weights that take part in a matrix multiply per token: every block's projections and the LM
// head (embedding lookups, norms and biases do no multiply-adds worth counting); of a mixture of
// experts, the router, the k experts a token goes to and a shared expert (its active weights).
int64_t matmul_parameter_count(const Architecture& arch);
// The parameters one token's forward uses: every one but the experts it is not sent to.
int64_t active_parameter_count(const Architecture& arch);
// Of a mixture of experts: its routed experts' weights (0 for a dense model), and the parameters
// one of `expert_ranks` expert-parallel ranks holds (all but the other ranks' experts).
int64_t expert_parameter_count(const Architecture& arch);
int64_t expert_rank_parameter_count(const Architecture& arch, int64_t expert_ranks);

}  // namespace rematlab::estimate
