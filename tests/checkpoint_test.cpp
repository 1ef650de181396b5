// Trainer checkpoints: a resumed run continues bit for bit like the uninterrupted one, and a
// checkpoint of another config, or a truncated, corrupt or incomplete one, is refused with a
// message and changes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

namespace {

zs::Config config(std::uint64_t seed, int atoms = 11) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {12}}, {"head_hidden", 6}, {"branches", {3, 2}},
                                {"atoms", atoms}, {"lr", 3e-3}, {"seed", seed}, {"spectral_norm", 2.0},
                                {"precision", "fp32"}});
}

std::vector<float> all_state(const zs::Trainer& t) {
  std::vector<float> s;
  for (const auto* buf : {&t.online(), &t.target(), &t.optimizer().m(), &t.optimizer().v()}) {
    const auto h = zs::test::to_host(buf->flat());
    s.insert(s.end(), h.begin(), h.end());
  }
  return s;
}

void run(zs::Trainer& t, const zs::Config& c, int from, int to, std::uint64_t seed) {
  for (int s = from; s < to; ++s) {
    zs::upload(t.stream().exec(), c, zs::random_batch(c, 8, seed + s), t.batch());
    t.step();
  }
  t.synchronize();
}

std::string temp(const std::string& name) { return zs::test::temp_path(name); }

std::string error_of(zs::Trainer& t, const std::string& path) {
  try {
    t.load(path);
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Checkpoint, ResumedRunContinuesExactlyLikeTheUninterruptedOne) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = config(seed);
  zs::TrainerOptions opt;
  opt.batch_size = 8;
  opt.guard.warmup_steps = 2;  // the guard's step counter matters after warm-up: it must survive too
  zs::Trainer whole(c, opt);
  run(whole, c, 0, 10, seed);

  const std::string path = temp("zs_resume.safetensors");
  {
    zs::Trainer first(c, opt);
    run(first, c, 0, 4, seed);
    first.save(path);
  }
  zs::Trainer resumed(c, opt);
  resumed.load(path);
  EXPECT_EQ(resumed.steps_enqueued(), 4);
  run(resumed, c, 4, 10, seed);
  const auto a = all_state(whole), b = all_state(resumed);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  ASSERT_TRUE(whole.metrics() && resumed.metrics());
  EXPECT_EQ(whole.metrics()->step, resumed.metrics()->step);
  EXPECT_EQ(whole.metrics()->raw_loss, resumed.metrics()->raw_loss);
}

TEST(Checkpoint, RefusesOtherConfigTruncatedCorruptOrIncompleteFilesAndChangesNothing) {
  const auto seed = zs::test::fresh_seed();
  const auto c = config(seed);
  zs::TrainerOptions opt;
  opt.batch_size = 8;
  zs::Trainer t(c, opt);
  run(t, c, 0, 2, seed);
  const std::string good = temp("zs_good.safetensors");
  t.save(good);
  const auto before = all_state(t);

  {  // another config
    zs::Trainer other(config(seed, 13), opt);
    const std::string p = temp("zs_other.safetensors");
    other.save(p);
    const auto msg = error_of(t, p);
    EXPECT_NE(msg.find("was written with config"), std::string::npos) << msg;
  }
  std::ifstream in(good, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {  // truncated
    const std::string p = temp("zs_trunc.safetensors");
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() * 2 / 3));
    const auto msg = error_of(t, p);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
  {  // corrupt header length
    auto bad = bytes;
    bad[0] ^= 0x5a;
    const std::string p = temp("zs_corrupt.safetensors");
    std::ofstream(p, std::ios::binary).write(bad.data(), static_cast<std::streamsize>(bad.size()));
    EXPECT_FALSE(error_of(t, p).empty());
  }
  {  // a tensor missing
    auto f = zs::safetensors::read(good);
    f.tensors.erase("adam_v.branch.1.1.weight");
    const std::string p = temp("zs_incomplete.safetensors");
    zs::safetensors::write(p, f);
    const auto msg = error_of(t, p);
    EXPECT_NE(msg.find("adam_v.branch.1.1.weight"), std::string::npos) << msg;
  }
  {  // not a zerosync checkpoint
    zs::safetensors::File f;
    f.tensors["x"] = zs::safetensors::Tensor::from<float>({1}, {1.f});
    const std::string p = temp("zs_foreign.safetensors");
    zs::safetensors::write(p, f);
    const auto msg = error_of(t, p);
    EXPECT_NE(msg.find("expected a file written by zerosync"), std::string::npos) << msg;
  }
  EXPECT_FALSE(error_of(t, temp("zs_no_such_file.safetensors")).empty());
  const auto after = all_state(t);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
  // And the good one still loads.
  EXPECT_NO_THROW(t.load(good));
}

// A corrupt byte anywhere in a checkpoint — header, metadata, checksums, any tensor's data — is
// refused with a message, and the trainer keeps its state.
TEST(Checkpoint, ACorruptByteAnywhereIsRefused) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = config(seed);
  zs::TrainerOptions opt;
  opt.batch_size = 8;
  zs::Trainer t(c, opt);
  run(t, c, 0, 3, seed);
  const std::string good = temp("zs_flip_good.safetensors"), bad = temp("zs_flip_bad.safetensors");
  t.save(good);
  std::ifstream in(good, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto before = all_state(t);
  std::mt19937_64 rng(seed);
  // Every byte of the header (where a flip could otherwise change a name, a shape or the config),
  // then random bytes of the data.
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < 8 + header; i += 1 + (i > 8 ? rng() % 7 : 0)) where.push_back(i);
  for (int k = 0; k < 300; ++k) where.push_back(8 + header + rng() % (bytes.size() - 8 - header));
  for (std::size_t i : where) {
    auto b = bytes;
    b[i] = static_cast<char>(b[i] ^ (1 << (rng() % 8)));
    std::ofstream(bad, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
    EXPECT_FALSE(error_of(t, bad).empty()) << "byte " << i << " of " << bytes.size() << " changed unnoticed";
  }
  EXPECT_EQ(std::memcmp(before.data(), all_state(t).data(), before.size() * sizeof(float)), 0);
  EXPECT_NO_THROW(t.load(good));
}
