#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using zs::Config;

namespace {
std::string error_of(const nlohmann::json& j) {
  try {
    Config::from_json(j);
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, DefaultsAreTheReferenceConfigAndValid) {
  Config c;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.state_dim, 48);
  EXPECT_EQ(c.trunk, (std::vector<int>{256, 256}));
  EXPECT_EQ(c.head_hidden, 128);
  EXPECT_EQ(c.branches, (std::vector<int>{5, 3, 3}));
  EXPECT_EQ(c.atoms, 51);
  EXPECT_FLOAT_EQ(c.v_min, -10.f);
  EXPECT_FLOAT_EQ(c.v_max, 10.f);
}

TEST(Config, JsonRoundTrip) {
  nlohmann::json j = {{"state_dim", 4}, {"trunk", {64}}, {"head_hidden", 32}, {"branches", {2}},
                      {"atoms", 11}, {"v_min", -1.5}, {"v_max", 2.5}, {"gamma", 0.9},
                      {"n_step", 2}, {"lr", 3e-4}, {"spectral_norm", 1.5}, {"seed", 7},
                      {"precision", "fp32"}};
  Config c = Config::from_json(j);
  EXPECT_EQ(c.state_dim, 4);
  EXPECT_EQ(c.trunk, std::vector<int>{64});
  EXPECT_EQ(c.branches, std::vector<int>{2});
  EXPECT_FLOAT_EQ(c.spectral_norm, 1.5f);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.precision, zs::Precision::fp32);
  Config d = Config::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
}

TEST(Config, SpectralNormFalseMeansOff) {
  EXPECT_FLOAT_EQ(Config::from_json({{"spectral_norm", false}}).spectral_norm, 0.f);
  EXPECT_NE(error_of({{"spectral_norm", true}}).find("spectral_norm = true"), std::string::npos);
  EXPECT_NE(error_of({{"spectral_norm", -2}}).find("spectral_norm"), std::string::npos);
}

TEST(Config, RejectsUnknownKeyNamingIt) {
  const auto msg = error_of({{"atom", 51}});
  EXPECT_NE(msg.find("unknown key 'atom'"), std::string::npos) << msg;
}

TEST(Config, RejectsBadValuesNamingValueAndExpectation) {
  struct Case { nlohmann::json j; std::string needle; };
  const std::vector<Case> cases = {
      {{{"atoms", 1}}, "atoms = 1"},
      {{{"atoms", 51.5}}, "atoms = 51.5"},
      {{{"state_dim", 0}}, "state_dim = 0"},
      {{{"trunk", nlohmann::json::array()}}, "trunk = []"},
      {{{"trunk", {256, -1}}}, "trunk = [256, -1]"},
      {{{"branches", {5, 0}}}, "branches = [5, 0]"},
      {{{"v_min", 10}, {"v_max", -10}}, "v_min < v_max"},
      {{{"gamma", 1.5}}, "gamma = 1.5"},
      {{{"lr", 0}}, "lr = 0"},
      {{{"adam_beta2", 1.0}}, "adam_beta2 = 1"},
      {{{"tau", -0.1}}, "tau = -0.1"},
      {{{"precision", "bf16"}}, "precision = \"bf16\""},
      {{{"seed", -3}}, "seed = -3"},
      {nlohmann::json::array(), "JSON object"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of(c.j);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.j.dump() << " -> '" << msg << "'";
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
}

TEST(Config, MissingFileAndBadJsonAreClearErrors) {
  try {
    Config::from_file("/nonexistent/zerosync.json");
    FAIL() << "no error";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/zerosync.json"), std::string::npos);
  }
  const std::string path = zs::test::temp_path("bad_config.json");
  { std::ofstream(path) << "{\"atoms\": 51,"; }
  try {
    Config::from_file(path);
    FAIL() << "no error";
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}
