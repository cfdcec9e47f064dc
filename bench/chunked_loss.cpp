// The output head and loss in slices against the whole computation, on one Llama shape with a
// large vocabulary: peak activation memory of one forward and backward, time per step, the loss
// and the largest gradient difference. Every slice count trains the same weights on the same
// tokens, so the figures differ only by the slicing.
//
//   build/bench/chunked_loss [--vocab 32000] [--batch 8] [--threads 2] [--repeats 3]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "memory/memory_tracker.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace {

using rematlab::CheckpointPolicy;
using rematlab::MemoryTracker;
using rematlab::ModelConfig;
using rematlab::Transformer;

struct Measured {
  int64_t chunks = 0;
  int64_t peak_bytes = 0;
  double step_ms = 0.0;
  double loss = 0.0;
  std::vector<torch::Tensor> gradients;
};

Measured measure(ModelConfig config, int64_t loss_chunks, const torch::Tensor& tokens,
                 const torch::Tensor& targets, int repeats) {
  config.loss_chunks = loss_chunks;
  MemoryTracker tracker(c10::Device(c10::kCPU));  // before the model: it sees every free
  torch::manual_seed(0);                          // the same weights for every slice count
  Transformer model(config);
  model->train();
  const auto plan = CheckpointPolicy::parse("none").plan_for(config.layers, 0.0);
  Measured result;
  result.chunks = config.loss_chunk_count();
  std::vector<double> times;
  // The first pass allocates the gradients; later ones zero them in place, so the peak above
  // what lives before the step is activations and their gradients only, as the engine counts.
  for (int repeat = 0; repeat <= repeats; ++repeat) {
    model->zero_grad(/*set_to_none=*/false);
    const int64_t before = tracker.current_bytes();
    tracker.reset_peak();
    const auto start = std::chrono::steady_clock::now();
    const torch::Tensor loss = model->loss(tokens, targets, plan);
    loss.backward();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (repeat == 0) continue;
    times.push_back(ms);
    result.peak_bytes = tracker.peak_bytes() - before;
    result.loss = loss.item<double>();
  }
  std::sort(times.begin(), times.end());
  result.step_ms = times[times.size() / 2];
  for (const auto& p : model->parameters()) result.gradients.push_back(p.grad().clone());
  return result;
}

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t vocab = flag(argc, argv, "--vocab", 32000);
  const int64_t batch = flag(argc, argv, "--batch", 8);
  const int threads = static_cast<int>(flag(argc, argv, "--threads", 2));
  const int repeats = static_cast<int>(flag(argc, argv, "--repeats", 3));
  torch::set_num_threads(threads);
  ModelConfig config = rematlab::model_preset("llama-small");
  config.vocab = vocab;
  config.dropout = 0.0;  // the same function for every slicing
  torch::manual_seed(1);
  const torch::Tensor tokens = torch::randint(0, vocab, {batch, config.seq_len}, torch::kLong);
  const torch::Tensor targets = torch::randint(0, vocab, {batch, config.seq_len}, torch::kLong);

  std::vector<Measured> rows;
  for (int64_t chunks : {int64_t{1}, int64_t{4}, int64_t{8}, rematlab::kAutoLossChunks}) {
    rows.push_back(measure(config, chunks, tokens, targets, repeats));
  }
  const Measured& whole = rows.front();
  double largest_gradient = 0.0;
  for (const auto& g : whole.gradients)
    largest_gradient = std::max(largest_gradient, g.abs().max().item<double>());

  std::printf("llama-small, vocab %lld, batch %lld × %lld tokens, fp32, %d threads, median of %d\n",
              static_cast<long long>(vocab), static_cast<long long>(batch),
              static_cast<long long>(config.seq_len), threads, repeats);
  std::printf(
      "| slices | peak activation MiB | vs whole | step ms | vs whole | loss | "
      "largest gradient difference | relative to largest gradient |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n");
  for (const auto& row : rows) {
    double difference = 0.0;
    for (std::size_t i = 0; i < row.gradients.size(); ++i) {
      difference =
          std::max(difference, (row.gradients[i] - whole.gradients[i]).abs().max().item<double>());
    }
    std::printf("| %lld | %.1f | %.3f | %.0f | %.3f | %.9g | %.3g | %.3g |\n",
                static_cast<long long>(row.chunks), row.peak_bytes / 1048576.0,
                static_cast<double>(row.peak_bytes) / whole.peak_bytes, row.step_ms,
                row.step_ms / whole.step_ms, row.loss, difference, difference / largest_gradient);
  }
  return 0;
}
