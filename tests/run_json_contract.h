// The keys of `rematlab-cli run --json` that ../shared/design/product.md promises.
#pragma once

#include <array>

namespace rematlab::testing {

inline constexpr std::array<const char*, 27> kRunJsonKeys = {"status",
                                                             "device",
                                                             "precision",
                                                             "attention",
                                                             "checkpoint",
                                                             "offload",
                                                             "params",
                                                             "layers",
                                                             "d_model",
                                                             "heads",
                                                             "seq_len",
                                                             "vocab",
                                                             "batch",
                                                             "accum",
                                                             "steps",
                                                             "first_loss",
                                                             "final_loss",
                                                             "tokens_per_s",
                                                             "step_ms",
                                                             "forward_ms",
                                                             "backward_ms",
                                                             "peak_bytes",
                                                             "baseline_bytes",
                                                             "peak_activation_bytes",
                                                             "offloaded_peak_bytes",
                                                             "rss_peak_bytes",
                                                             "run_id"};

}  // namespace rematlab::testing
