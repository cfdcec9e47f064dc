#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "common/errors.h"
#include "common/posix_files.h"
#include "data/batch_source.h"

namespace rematlab {
namespace {

TEST(BatchSource, SameSeedSameBatchesAndTargetsAreShifted) {
  auto a = make_batch_source("synthetic", 32, 256, 7);
  auto b = make_batch_source("synthetic:markov", 32, 256, 7);
  auto c = make_batch_source("synthetic", 32, 256, 8);
  const TokenBatch first = a->next(4);
  EXPECT_EQ(first.tokens.sizes(), torch::IntArrayRef({4, 32}));
  EXPECT_EQ(first.tokens.dtype(), torch::kLong);
  EXPECT_TRUE(torch::equal(first.tokens, b->next(4).tokens));
  EXPECT_FALSE(torch::equal(first.tokens, c->next(4).tokens));
  EXPECT_TRUE(torch::equal(first.tokens.narrow(1, 1, 31), first.targets.narrow(1, 0, 31)));
  EXPECT_FALSE(torch::equal(first.tokens, a->next(4).tokens));  // the stream moves on
}

TEST(BatchSource, MarkovTokensHaveExactlyTwoSuccessors) {
  auto source = make_batch_source("synthetic:markov", 64, 16, 1);
  std::vector<std::set<int64_t>> successors(16);
  for (int i = 0; i < 20; ++i) {
    const TokenBatch batch = source->next(8);
    const auto tokens = batch.tokens.accessor<int64_t, 2>();
    const auto targets = batch.targets.accessor<int64_t, 2>();
    for (int64_t r = 0; r < 8; ++r) {
      for (int64_t t = 0; t < 64; ++t) successors[tokens[r][t]].insert(targets[r][t]);
    }
  }
  for (const auto& next : successors) EXPECT_LE(next.size(), 2u);
}

TEST(BatchSource, CopyRepeatsTheFirstHalf) {
  auto source = make_batch_source("synthetic:copy", 31, 256, 1);  // sequences of 32 tokens
  const TokenBatch batch = source->next(3);
  const torch::Tensor full = torch::cat({batch.tokens, batch.targets.narrow(1, 30, 1)}, 1);
  EXPECT_TRUE(torch::equal(full.narrow(1, 0, 16), full.narrow(1, 16, 16)));
}

TEST(BatchSource, ReadsBytesOfATextFile) {
  const std::string path = files::join(files::temp_directory(), "rematlab_test_text.txt");
  {
    std::ofstream out(path);
    for (int i = 0; i < 50; ++i) out << "abcdefghij";
  }
  auto source = make_batch_source("text:" + path, 16, 256, 3);
  const TokenBatch batch = source->next(5);
  const auto tokens = batch.tokens.accessor<int64_t, 2>();
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t t = 1; t < 16; ++t) {
      EXPECT_EQ((tokens[r][t] - 'a') % 10, (tokens[r][t - 1] - 'a' + 1) % 10);
    }
  }
  EXPECT_EQ(source->describe(), "text:" + path);
  files::remove_file(path);
}

TEST(BatchSource, RejectsBadSourcesNamingTheFlag) {
  auto field_of = [](auto make) -> std::string {
    try {
      make();
    } catch (const InvalidInput& error) {
      return error.field();
    }
    return "accepted";
  };
  EXPECT_EQ(field_of([] { make_batch_source("imagenet", 16, 256, 0); }), "--data");
  EXPECT_EQ(field_of([] { make_batch_source("text:/no/such/file.txt", 16, 256, 0); }), "--data");
  const std::string path = files::join(files::temp_directory(), "rematlab_test_short.txt");
  { std::ofstream(path) << "short"; }
  EXPECT_EQ(field_of([&] { make_batch_source("text:" + path, 16, 256, 0); }), "--data");
  EXPECT_EQ(field_of([&] { make_batch_source("text:" + path, 2, 100, 0); }), "--vocab");
  files::remove_file(path);
}

}  // namespace
}  // namespace rematlab
