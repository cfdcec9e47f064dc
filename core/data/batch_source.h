// Training data: token batches generated deterministically from a seed. Sources:
//   synthetic[:markov]  a random sparse Markov chain: every token has two equally likely
//                       successors, so the best reachable loss is ln 2 ≈ 0.693 nats/token
//                       (from ln(vocab) at initialisation);
//   synthetic:copy      a random first half followed by its exact repeat: the second half is
//                       predictable only by attending back, so the loss floor is about half of
//                       ln(vocab);
//   text:FILE           byte-level windows of a text file (vocab must be at least 256).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace rematlab {

struct TokenBatch {
  torch::Tensor tokens;   // (batch, seq_len) int64, CPU
  torch::Tensor targets;  // tokens shifted by one
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual TokenBatch next(int64_t batch) = 0;
  virtual std::string describe() const = 0;
};

// Throws InvalidInput("--data", …) for an unknown source or unreadable/too-short file, and
// InvalidInput("--vocab", …) when the vocabulary cannot hold the source's tokens.
std::unique_ptr<BatchSource> make_batch_source(const std::string& spec, int64_t seq_len,
                                               int64_t vocab, uint64_t seed);

}  // namespace rematlab
