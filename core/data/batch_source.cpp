#include "data/batch_source.h"

#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "common/errors.h"

namespace rematlab {
namespace {

// Fills (batch, seq_len + 1) sequences row by row and splits them into inputs and targets.
template <typename FillRow>
TokenBatch make_batch(int64_t batch, int64_t seq_len, FillRow fill_row) {
  torch::Tensor sequences = torch::empty({batch, seq_len + 1}, torch::kLong);
  auto* data = sequences.data_ptr<int64_t>();
  for (int64_t row = 0; row < batch; ++row) fill_row(data + row * (seq_len + 1));
  return {sequences.narrow(1, 0, seq_len).contiguous(),
          sequences.narrow(1, 1, seq_len).contiguous()};
}

class MarkovSource : public BatchSource {
 public:
  MarkovSource(int64_t seq_len, int64_t vocab, uint64_t seed)
      : seq_len_(seq_len), vocab_(vocab), random_(seed) {
    std::uniform_int_distribution<int64_t> token(0, vocab - 1);
    successors_.resize(static_cast<std::size_t>(2 * vocab));
    for (auto& successor : successors_) successor = token(random_);
  }

  TokenBatch next(int64_t batch) override {
    return make_batch(batch, seq_len_, [this](int64_t* row) {
      std::uniform_int_distribution<int64_t> token(0, vocab_ - 1);
      std::bernoulli_distribution coin(0.5);
      row[0] = token(random_);
      for (int64_t i = 1; i <= seq_len_; ++i) {
        row[i] = successors_[static_cast<std::size_t>(2 * row[i - 1] + (coin(random_) ? 1 : 0))];
      }
    });
  }

  std::string describe() const override { return "synthetic:markov"; }

 private:
  int64_t seq_len_;
  int64_t vocab_;
  std::mt19937_64 random_;
  std::vector<int64_t> successors_;
};

class CopySource : public BatchSource {
 public:
  CopySource(int64_t seq_len, int64_t vocab, uint64_t seed)
      : seq_len_(seq_len), vocab_(vocab), random_(seed) {}

  TokenBatch next(int64_t batch) override {
    return make_batch(batch, seq_len_, [this](int64_t* row) {
      std::uniform_int_distribution<int64_t> token(0, vocab_ - 1);
      const int64_t half = (seq_len_ + 1 + 1) / 2;
      for (int64_t i = 0; i <= seq_len_; ++i) row[i] = i < half ? token(random_) : row[i - half];
    });
  }

  std::string describe() const override { return "synthetic:copy"; }

 private:
  int64_t seq_len_;
  int64_t vocab_;
  std::mt19937_64 random_;
};

class TextFileSource : public BatchSource {
 public:
  TextFileSource(const std::string& path, int64_t seq_len, int64_t vocab, uint64_t seed)
      : path_(path), seq_len_(seq_len), random_(seed) {
    if (vocab < 256) {
      throw InvalidInput(
          "--vocab", "byte-level text needs a vocab of at least 256, got " + std::to_string(vocab));
    }
    std::ifstream file(path, std::ios::binary);
    if (!file) throw InvalidInput("--data", "cannot read text file '" + path + "'");
    bytes_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    if (file.bad()) throw InvalidInput("--data", "error while reading '" + path + "'");
    if (static_cast<int64_t>(bytes_.size()) < seq_len + 1) {
      throw InvalidInput("--data",
                         "'" + path + "' has " + std::to_string(bytes_.size()) +
                             " bytes, fewer than seq_len + 1 = " + std::to_string(seq_len + 1));
    }
  }

  TokenBatch next(int64_t batch) override {
    std::uniform_int_distribution<std::size_t> start(0, bytes_.size() - seq_len_ - 1);
    return make_batch(batch, seq_len_, [this, &start](int64_t* row) {
      const std::size_t offset = start(random_);
      for (int64_t i = 0; i <= seq_len_; ++i) {
        row[i] = static_cast<unsigned char>(bytes_[offset + static_cast<std::size_t>(i)]);
      }
    });
  }

  std::string describe() const override { return "text:" + path_; }

 private:
  std::string path_;
  int64_t seq_len_;
  std::mt19937_64 random_;
  std::vector<char> bytes_;
};

}  // namespace

std::unique_ptr<BatchSource> make_batch_source(const std::string& spec, int64_t seq_len,
                                               int64_t vocab, uint64_t seed) {
  if (spec == "synthetic" || spec == "synthetic:markov") {
    return std::make_unique<MarkovSource>(seq_len, vocab, seed);
  }
  if (spec == "synthetic:copy") return std::make_unique<CopySource>(seq_len, vocab, seed);
  if (spec.rfind("text:", 0) == 0 && spec.size() > 5) {
    return std::make_unique<TextFileSource>(spec.substr(5), seq_len, vocab, seed);
  }
  throw InvalidInput("--data",
                     "unknown data source '" + spec +
                         "' (use synthetic, synthetic:markov, synthetic:copy or text:FILE)");
}

}  // namespace rematlab
