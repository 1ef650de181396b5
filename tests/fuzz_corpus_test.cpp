// Every file of the fuzzers' corpus (fuzz/corpus/<target>/: the seeds, and each input a fuzzer
// once crashed on) through its target, in this build and under its sanitizers: a crash found by
// fuzzing stays fixed once its input is in the corpus.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/host_batch.hpp"
#include "targets.hpp"

namespace {

namespace fs = std::filesystem;

using Target = int (*)(const std::uint8_t*, std::size_t);

std::size_t replay(const std::string& name, Target target) {
  const fs::path dir = fs::path(ZS_FUZZ_DIR) / "corpus" / name;
  std::size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(target(bytes.data(), bytes.size()), 0);
    ++n;
  }
  return n;
}

TEST(FuzzCorpus, ConfigReader) { EXPECT_GE(replay("config", zs::fuzz::config), 3u); }
TEST(FuzzCorpus, TrainConfigReader) { EXPECT_GE(replay("train_config", zs::fuzz::train_config), 2u); }
TEST(FuzzCorpus, SafetensorsReader) { EXPECT_GE(replay("safetensors", zs::fuzz::safetensors), 2u); }
TEST(FuzzCorpus, BatchLoader) { EXPECT_GE(replay("batch", zs::fuzz::batch), 1u); }

TEST(FuzzCorpus, TheBatchSeedIsABatchOfTheBatchTargetsConfig) {
  // The seed must be accepted, or the batch fuzzer would start from an input it rejects at once.
  const auto c = zs::Config::from_json(nlohmann::json::parse(zs::fuzz::fuzz_batch_config()));
  const auto b = zs::read_batch(std::string(ZS_FUZZ_DIR) + "/corpus/batch/small.safetensors", c);
  EXPECT_EQ(b.size, 3);
}

}  // namespace
