// `zerosync step` through its library entry point: OUT holds every promised tensor, the loss of
// a step from given parameters matches the double reference, and bad files are refused clearly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "network_reference.hpp"
#include "core/safetensors.hpp"
#include "app/step_command.hpp"
#include "test_util.hpp"

namespace st = zs::safetensors;

namespace {

const nlohmann::json kConfig = {{"state_dim", 4}, {"trunk", {10, 9}}, {"head_hidden", 5}, {"branches", {2, 3}},
                                {"atoms", 7}, {"v_min", -3}, {"v_max", 3}, {"lr", 1e-3}, {"precision", "fp32"}};

struct Files {
  std::string config = zs::test::temp_path("config.json"), batch = zs::test::temp_path("batch.safetensors"),
              params = zs::test::temp_path("params.safetensors"), out = zs::test::temp_path("out.safetensors");
};

st::File make_batch(int B, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> s, s2, r, d, w;
  std::vector<std::int32_t> a;
  for (int i = 0; i < B * 4; ++i) s.push_back(n(rng)), s2.push_back(n(rng));
  for (int i = 0; i < B; ++i) {
    a.push_back(static_cast<int>(rng() % 2));
    a.push_back(static_cast<int>(rng() % 3));
    r.push_back(n(rng));
    d.push_back(i % 3 == 0 ? 1.f : 0.f);
    w.push_back(1.f + 0.1f * i);
  }
  st::File f;
  f.tensors["states"] = st::Tensor::from<float>({B, 4}, s);
  f.tensors["next_states"] = st::Tensor::from<float>({B, 4}, s2);
  f.tensors["actions"] = st::Tensor::from<std::int32_t>({B, 2}, a);
  f.tensors["rewards"] = st::Tensor::from<float>({B}, r);
  f.tensors["dones"] = st::Tensor::from<float>({B}, d);
  f.tensors["weights"] = st::Tensor::from<float>({B}, w);
  return f;
}

std::string run_error(const zs::StepCommand& cmd) {
  std::ostringstream log;
  try {
    zs::run_step_command(cmd, log);
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(StepCommand, WritesEveryOutputAndMatchesTheReferenceLoss) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Files files;
  std::ofstream(files.config) << kConfig.dump();
  const int B = 6;
  st::write(files.batch, make_batch(B, seed));
  // Parameters and a different target, PyTorch naming.
  const auto c = zs::Config::from_json(kConfig);
  const zs::ParamLayout layout(c);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> n(0.f, 0.5f);
  st::File p;
  std::vector<double> online(layout.size(), 0.0), target(layout.size(), 0.0);
  for (const auto& t : layout.tensors()) {
    std::vector<float> w(t.size()), tw(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
      w[i] = n(rng), tw[i] = n(rng);
      online[t.offset + i] = w[i], target[t.offset + i] = tw[i];
    }
    const std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    p.tensors[t.name] = st::Tensor::from<float>(shape, w);
    p.tensors["target." + t.name] = st::Tensor::from<float>(shape, tw);
  }
  st::write(files.params, p);

  zs::StepCommand cmd{files.config, files.batch, files.params, files.out, 1};
  std::ostringstream log;
  zs::run_step_command(cmd, log);
  EXPECT_NE(log.str().find("guard ok"), std::string::npos) << log.str();
  const auto out = st::read(files.out);
  for (const char* key : {"loss", "grad_norm"}) EXPECT_EQ(out.at(key).shape, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(out.at("priorities").shape, (std::vector<std::int64_t>{B}));
  EXPECT_EQ(out.at("guard").shape, (std::vector<std::int64_t>{7}));
  EXPECT_EQ(out.metadata.at("guard_fields"),
            "halt_nan, halt_loss_clip, halt_grad_collapse, clipped_loss, raw_loss, raw_grad_norm, step");
  for (const auto& t : layout.tensors())
    for (const char* prefix : {"grad.", "param.", "target."})
      EXPECT_EQ(out.tensors.count(prefix + t.name), 1u) << prefix << t.name;

  zs::test::RefNet ref(c, layout);
  zs::test::RefBatch rb;
  const auto bf = make_batch(B, seed);
  rb.B = B;
  for (float x : bf.f32("states", {B, 4})) rb.states.push_back(x);
  for (float x : bf.f32("next_states", {B, 4})) rb.next_states.push_back(x);
  rb.actions = bf.i32("actions", {B, 2});
  for (float x : bf.f32("rewards", {B})) rb.rewards.push_back(x);
  for (float x : bf.f32("dones", {B})) rb.dones.push_back(x);
  for (float x : bf.f32("weights", {B})) rb.weights.push_back(x);
  const auto expect = ref.loss(online, target, rb);
  EXPECT_NEAR(out.f32("loss", {1})[0], expect.loss, 1e-5 * expect.loss + 1e-6);
  const auto prio = out.f32("priorities", {B});
  for (int i = 0; i < B; ++i) EXPECT_NEAR(prio[i], expect.priorities[i], 1e-5 * expect.priorities[i] + 1e-6);
  const auto guard = out.f32("guard", {7});
  EXPECT_EQ(guard[0], 0.f);                                   // halt_nan
  EXPECT_NEAR(guard[4], expect.loss, 1e-5 * expect.loss + 1e-6);  // raw_loss
  EXPECT_EQ(guard[6], 0.f);                                   // step: the first step has index 0
}

TEST(StepCommand, RefusesBadFilesWithClearMessages) {
  Files files;
  std::ofstream(files.config) << kConfig.dump();
  st::write(files.batch, make_batch(3, 5));
  zs::StepCommand cmd{files.config, files.batch, "", files.out, 1};
  EXPECT_EQ(run_error(cmd), "");

  auto with = [&](const std::function<void(st::File&)>& edit) {
    auto f = make_batch(3, 5);
    edit(f);
    const std::string p = zs::test::temp_path("bad.safetensors");
    st::write(p, f);
    auto c = cmd;
    c.batch_path = p;
    return run_error(c);
  };
  EXPECT_NE(with([](st::File& f) { f.tensors["actions"] = st::Tensor::from<float>({3, 2}, std::vector<float>(6, 0.f)); })
                .find("is F32; expected I32"),
            std::string::npos);
  EXPECT_NE(with([](st::File& f) { f.tensors["states"] = st::Tensor::from<float>({3, 5}, std::vector<float>(15, 0.f)); })
                .find("expected [3, 4]"),
            std::string::npos);
  EXPECT_NE(with([](st::File& f) { f.tensors.erase("weights"); }).find("weights"), std::string::npos);
  EXPECT_NE(with([](st::File& f) { f.tensors["extra"] = st::Tensor::from<float>({1}, {0.f}); }).find("unknown tensor 'extra'"),
            std::string::npos);
  EXPECT_NE(with([](st::File& f) {
              f.tensors["actions"] = st::Tensor::from<std::int32_t>({3, 2}, std::vector<std::int32_t>{0, 0, 0, 3, 0, 0});
            }).find("actions[1, 1] = 3; expected 0..2"),
            std::string::npos);
  EXPECT_NE(with([](st::File& f) {
              f = make_batch(1, 1);
              for (auto& [name, t] : f.tensors) {
                t.shape[0] = 0;
                t.bytes.clear();
              }
            }).find("empty batch"),
            std::string::npos);

  auto c = cmd;
  c.batch_path = zs::test::temp_path("no_such_batch.safetensors");
  EXPECT_NE(run_error(c).find("no_such_batch"), std::string::npos);
  c = cmd;
  c.config_path = zs::test::temp_path("bad_config.json");
  std::ofstream(c.config_path) << R"({"atoms": 51, "atom": 3})";
  EXPECT_NE(run_error(c).find("unknown key 'atom'"), std::string::npos);
  c = cmd;
  c.params_path = zs::test::temp_path("partial_params.safetensors");
  {
    st::File p;
    p.tensors["trunk.0.weight"] = st::Tensor::from<float>({10, 4}, std::vector<float>(40, 0.1f));
    st::write(c.params_path, p);
  }
  EXPECT_NE(run_error(c).find("trunk.0.bias"), std::string::npos);
}

TEST(StepCommand, AuxiliariesWriteTheirLossesNormsAndTensors) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Files files;
  auto j = kConfig;
  j["seed"] = seed;
  j["iqn"] = {{"n_tau", 4}, {"embed_dim", 6}};
  j["ensemble"] = {{"k", 2}};
  j["cql"] = {{"alpha", 0.5}};
  std::ofstream(files.config) << j.dump();
  const int B = 5;
  st::write(files.batch, make_batch(B, seed));
  zs::StepCommand cmd{files.config, files.batch, "", files.out, 2};
  std::ostringstream log;
  zs::run_step_command(cmd, log);
  EXPECT_NE(log.str().find("guard ok"), std::string::npos) << log.str();
  const auto out = st::read(files.out);
  for (const char* name : {"iqn", "ensemble", "cql"})
    for (const char* what : {".loss", ".grad_norm"}) {
      const auto v = out.f32(std::string("aux.") + name + what, {1});
      EXPECT_TRUE(std::isfinite(v[0]) && v[0] > 0.f) << name << what << " = " << v[0];
    }
  EXPECT_EQ(out.at("aux.ensemble.spread").shape, (std::vector<std::int64_t>{B}));
  for (const char* name : {"iqn.embed.weight", "iqn.1.bias", "ensemble.1.value.0.weight", "ensemble.0.branch.1.1.bias"})
    for (const char* prefix : {"grad.", "param.", "target."})
      EXPECT_EQ(out.tensors.count(prefix + std::string(name)), 1u) << prefix << name;
}
