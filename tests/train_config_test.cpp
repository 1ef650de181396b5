// `zerosync train`'s configuration: the built-in defaults validate and survive a JSON round trip,
// partial files override only what they name, and every bad key or value is refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "kernels/loop_schedules.hpp"
#include "rl/train_config.hpp"

namespace {

using json = nlohmann::json;
using zs::TrainConfig;
using zs::test::error_of;

TEST(TrainConfig, DefaultsValidateAndRoundTripThroughJson) {
  for (const char* env : {"cartpole", "market"}) {
    SCOPED_TRACE(env);
    const TrainConfig c = TrainConfig::defaults_for(env);
    EXPECT_NO_THROW(c.validate());
    const TrainConfig back = TrainConfig::from_json(c.to_json());
    EXPECT_EQ(back.to_json(), c.to_json());
    EXPECT_EQ(back.env, env);
  }
}

TEST(TrainConfig, PartialConfigOverridesOnlyWhatItNames) {
  const json j = {{"envs", 3}, {"network", {{"lr", 0.005}, {"trunk", {16}}}}, {"epsilon", {{"end", 0.1}}},
                  {"replay", {{"prioritized", false}}}};
  const TrainConfig c = TrainConfig::from_json(j);
  const TrainConfig d = TrainConfig::defaults_for("cartpole");
  EXPECT_EQ(c.envs, 3);
  EXPECT_FLOAT_EQ(c.network.lr, 0.005f);
  EXPECT_EQ(c.network.trunk, std::vector<int>{16});
  EXPECT_EQ(c.network.atoms, d.network.atoms);
  EXPECT_FLOAT_EQ(c.epsilon.end, 0.1f);
  EXPECT_FLOAT_EQ(c.epsilon.start, d.epsilon.start);
  EXPECT_EQ(c.epsilon.steps, d.epsilon.steps);
  EXPECT_FALSE(c.prioritized);
  EXPECT_EQ(c.replay_capacity, d.replay_capacity);
  // Naming another environment brings that environment's defaults.
  const TrainConfig m = TrainConfig::from_json({{"env", "market"}});
  EXPECT_EQ(m.to_json(), TrainConfig::defaults_for("market").to_json());
}

TEST(TrainConfig, BadKeysAndValuesAreClearErrors) {
  const auto err = [](const json& j) { return error_of([&] { TrainConfig::from_json(j); }); };
  EXPECT_NE(err({{"stepz", 5}}).find("unknown key 'stepz'"), std::string::npos);
  EXPECT_NE(err({{"env", "pong"}}).find("env = 'pong'"), std::string::npos);
  EXPECT_NE(err({{"envs", 0}}).find("envs = 0"), std::string::npos);
  EXPECT_NE(err({{"envs", 2.5}}).find("expected an integer"), std::string::npos);
  EXPECT_NE(err({{"batch_size", -1}}).find("batch_size = -1"), std::string::npos);
  EXPECT_NE(err({{"network", {{"state_dim", 3}}}}).find("network.state_dim"), std::string::npos);
  EXPECT_NE(err({{"network", {{"atomz", 3}}}}).find("unknown key 'atomz'"), std::string::npos);
  EXPECT_NE(err({{"network", {{"atoms", 1}}}}).find("atoms = 1"), std::string::npos);
  EXPECT_NE(err({{"replay", {{"alpha", "high"}}}}).find("alpha = \"high\""), std::string::npos);
  EXPECT_NE(err({{"replay", {{"capacity", 3}}}}).find("replay.capacity = 3"), std::string::npos);
  EXPECT_NE(err({{"replay", {{"beta", {{"start", 2}}}}}}).find("replay.beta.start = 2"), std::string::npos);
  EXPECT_NE(err({{"epsilon", {{"end", -0.5}}}}).find("epsilon.end = -0.5"), std::string::npos);
  EXPECT_NE(err({{"eval", {{"episodes", 0}}}}).find("eval.episodes = 0"), std::string::npos);
  EXPECT_NE(err({{"eval", {{"every", 0}, {"stop_when_solved", true}}}}).find("stop_when_solved"), std::string::npos);
  EXPECT_NE(err({{"guard", {{"loss_clip", -1}}}}).find("loss_clip"), std::string::npos);
  EXPECT_NE(err(json::array()).find("expected a JSON object"), std::string::npos);
}

TEST(TrainConfig, FilesThatAreMissingOrNotJsonAreRefused) {
  const std::string missing = zs::test::temp_path("missing.json");
  EXPECT_NE(error_of([&] { TrainConfig::from_file(missing); }).find("cannot open"), std::string::npos);
  const std::string bad = zs::test::temp_path("bad.json");
  std::ofstream(bad) << "{\"envs\": 4,";
  EXPECT_NE(error_of([&] { TrainConfig::from_file(bad); }).find("not valid JSON"), std::string::npos);
  const std::string good = zs::test::temp_path("good.json");
  std::ofstream(good) << "{\"envs\": 4, \"steps\": 1000}";
  const TrainConfig c = TrainConfig::from_file(good);
  EXPECT_EQ(c.envs, 4);
  EXPECT_EQ(c.steps, 1000);
}

TEST(TrainConfig, AlphaIsANumberOrASchedule) {
  const TrainConfig n = TrainConfig::from_json({{"replay", {{"alpha", 0.5}}}});
  EXPECT_FLOAT_EQ(n.alpha.start, 0.5f);
  EXPECT_FLOAT_EQ(n.alpha.end, 0.5f);
  const TrainConfig s = TrainConfig::from_json({{"replay", {{"alpha", {{"start", 0.7}, {"end", 0.4}, {"steps", 900}}}}}});
  EXPECT_FLOAT_EQ(s.alpha.start, 0.7f);
  EXPECT_FLOAT_EQ(s.alpha.end, 0.4f);
  EXPECT_EQ(s.alpha.steps, 900);
  EXPECT_EQ(TrainConfig::from_json(s.to_json()).to_json(), s.to_json());
  EXPECT_NE(error_of([] { TrainConfig::from_json({{"replay", {{"alpha", {{"end", 11}}}}}}); }).find("replay.alpha.end = 11"),
            std::string::npos);
  EXPECT_NE(error_of([] { TrainConfig::from_json({{"replay", {{"alpha", {{"stop", 1}}}}}}); }).find("replay.alpha.stop is an unknown key"),
            std::string::npos);
}

TEST(TrainConfig, LinearScheduleRampsThenHolds) {
  const zs::kernels::LinearRamp s{1.f, 0.1f, 100};
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
  EXPECT_NEAR(s.at(50), 0.55, 1e-7);
  EXPECT_NEAR(s.at(100), 0.1, 1e-7);
  EXPECT_NEAR(s.at(1000), 0.1, 1e-7);
  EXPECT_NEAR((zs::kernels::LinearRamp{0.3f, 0.7f, 0}.at(0)), 0.7, 1e-7);
}

}  // namespace

namespace {

TEST(TrainConfig, IntegersNeverWrapAndSeedsFollowOnePolicy) {
  const auto err = [](const json& j) { return error_of([&] { TrainConfig::from_json(j); }); };
  EXPECT_NE(err({{"envs", 4294967304ull}}).find("envs = 4294967304 is invalid; expected an integer in [1, 1048576]"),
            std::string::npos);
  EXPECT_NE(err({{"batch_size", 4294967360ull}}).find("batch_size = 4294967360 is invalid"), std::string::npos);
  EXPECT_NE(err({{"steps", 9223372036854775808ull}}).find("steps = 9223372036854775808 is invalid"), std::string::npos);
  EXPECT_NE(err({{"steps", std::int64_t{1} << 51}}).find("expected an integer in [1, 1125899906842624]"),
            std::string::npos);
  EXPECT_NE(err({{"eval", {{"episodes", 4294967297ull}}}}).find("eval.episodes = 4294967297 is invalid"),
            std::string::npos);
  EXPECT_NE(err({{"replay", {{"capacity", 4294967296ull}}}}).find("replay.capacity = 4294967296 is invalid"),
            std::string::npos);
  EXPECT_NE(err({{"epsilon", {{"steps", -1}}}}).find("epsilon.steps = -1 is invalid"), std::string::npos);
  EXPECT_NE(err({{"seed", -1}}).find("train config: seed = -1 is invalid; expected an integer in [0, 18446744073709551615]"),
            std::string::npos);
  EXPECT_NE(err({{"seed", 2.5}}).find("seed = 2.5 is invalid"), std::string::npos);
  EXPECT_NE(err({{"network", {{"seed", -1}}}}).find("seed = -1 is invalid"), std::string::npos);
  EXPECT_EQ(TrainConfig::from_json({{"seed", 18446744073709551615ull}}).seed, 18446744073709551615ull);
}

TEST(TrainConfig, FilesAreReadStrictly) {
  const auto file_error = [](const std::string& text) {
    const std::string path = zs::test::temp_path("strict.json");
    std::ofstream(path) << text;
    return error_of([&] { TrainConfig::from_file(path); });
  };
  EXPECT_NE(file_error("{\"envs\": 4} {\"envs\": 8}").find("strict.json' is not valid JSON: more follows"),
            std::string::npos);
  EXPECT_NE(file_error("{\"envs\": 4, \"envs\": 8}").find("repeats key 'envs'"), std::string::npos);
  EXPECT_NE(file_error("{\"replay\": {\"capacity\": 1e400}}").find("number overflow"), std::string::npos);
  EXPECT_NE(file_error("{\"env_params\": " + std::string(70000, '[') + std::string(70000, ']') + "}")
                .find("more than 64 levels deep"),
            std::string::npos);
}

}  // namespace
