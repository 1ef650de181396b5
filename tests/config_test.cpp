#include <gtest/gtest.h>

#include <filesystem>
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

namespace {
std::string file_error(const std::string& name, const std::string& text) {
  const std::string path = zs::test::temp_path(name);
  { std::ofstream(path) << text; }
  try {
    Config::from_file(path);
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, FilesAreReadStrictlyAndNameTheFile) {
  struct Case { std::string text, needle; };
  const std::vector<Case> cases = {
      {"{\"atoms\": 11} trailing", "more follows the first value"},
      {"{\"atoms\": 11}\n{\"atoms\": 21}", "more follows the first value"},
      {"{\"atoms\": 11, \"atoms\": 21}", "repeats key 'atoms'"},
      {"{\"v_min\": 1e400}", "number overflow"},
      {std::string(70000, '[') + std::string(70000, ']'), "more than 64 levels deep"},
      {"{\"iqn\": " + std::string(70000, '[') + std::string(70000, ']') + "}", "more than 64 levels deep"},
  };
  for (const auto& c : cases) {
    const auto msg = file_error("strict.json", c.text);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg.substr(0, 200);
    EXPECT_NE(msg.find("strict.json"), std::string::npos) << msg.substr(0, 200);
  }
  const std::string dir = zs::test::temp_path("dir");
  std::filesystem::create_directories(dir);
  EXPECT_NE(zs::test::error_of([&] { Config::from_file(dir); }).find("is a directory"), std::string::npos);
  // A value error names the file too.
  EXPECT_NE(file_error("bad_atoms.json", "{\"atoms\": 1}").find("bad_atoms.json': config: atoms = 1"), std::string::npos);
}

TEST(Config, IntegersNeverWrapAndSeedsFollowOnePolicy) {
  struct Case { nlohmann::json j; std::string needle; };
  const std::vector<Case> cases = {
      {{{"atoms", 4294967307ull}}, "atoms = 4294967307 is invalid; expected an integer in [2, 1024]"},
      {{{"state_dim", 2147483648ll}}, "state_dim = 2147483648 is invalid; expected an integer in [1, 1048576]"},
      {{{"n_step", -4294967295ll}}, "n_step = -4294967295 is invalid"},
      {{{"trunk", {4294967297ull}}}, "trunk = [4294967297] is invalid"},
      {{{"branches", {2, 4294967298ull}}}, "branches = [2, 4294967298] is invalid"},
      {{{"iqn", {{"n_tau", 4294967304ull}}}}, "iqn.n_tau = 4294967304 is invalid; expected an integer in [1, 1024]"},
      {{{"ensemble", {{"k", 4294967298ull}}}}, "ensemble.k = 4294967298 is invalid"},
      {{{"seed", -1}}, "seed = -1 is invalid; expected an integer in [0, 18446744073709551615]"},
      {{{"seed", 1.5}}, "seed = 1.5 is invalid"},
      {{{"seed", 1e20}}, "seed = 1e+20 is invalid"},
      {{{"lr", 1e39}}, "lr = 1e+39 is invalid; expected a number within the range of a float"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of(c.j);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.j.dump() << " -> '" << msg << "'";
  }
  EXPECT_EQ(Config::from_json({{"seed", 18446744073709551615ull}}).seed, 18446744073709551615ull);
  // Through a file, 2^64 itself arrives as a double and is refused, not rounded.
  EXPECT_NE(file_error("seed.json", "{\"seed\": 18446744073709551616}").find("seed = 1.8446744073709552e+19 is invalid"),
            std::string::npos);
}

TEST(Config, TheSupportMustGiveFiniteIncreasingAtomsInFloat) {
  struct Case { nlohmann::json j; std::string needle; };
  const std::vector<Case> cases = {
      {{{"v_min", -2e38}, {"v_max", 2e38}}, "expected a span v_max - v_min finite in float"},
      {{{"v_min", 0}, {"v_max", 1e-45}}, "expected finite, strictly increasing atoms"},
      {{{"v_min", 1e7}, {"v_max", 1e7 + 1}}, "atom 1 (1e+07) is not above atom 0"},
  };
  for (const auto& c : cases) {
    const auto msg = error_of(c.j);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.j.dump() << " -> '" << msg << "'";
  }
  // Wide and narrow supports that give distinct finite atoms stay valid.
  EXPECT_NO_THROW(Config::from_json({{"v_min", -1e38}, {"v_max", 1e38}}));
  EXPECT_NO_THROW(Config::from_json({{"v_min", 0}, {"v_max", 1e-30}}));
  EXPECT_NO_THROW(Config::from_json({{"v_min", 1e7}, {"v_max", 1e7 + 64}, {"atoms", 5}}));
}

TEST(Config, ListKeysAreBounded) {
  EXPECT_NE(error_of({{"trunk", std::vector<int>(65, 8)}}).find("trunk = [8, 8"), std::string::npos);
  EXPECT_NE(error_of({{"trunk", std::vector<int>(65, 8)}}).find("expected a list of 1 to 64 integers"),
            std::string::npos);
  EXPECT_NO_THROW(Config::from_json({{"trunk", std::vector<int>(64, 8)}}));
  EXPECT_NE(error_of({{"branches", std::vector<int>(33, 2)}}).find("expected a list of 1 to 32 integers"),
            std::string::npos);
  // validate() holds the same bounds for a Config built in code.
  Config c;
  c.trunk.assign(2600000, 8);
  EXPECT_NE(zs::test::error_of([&] { c.validate(); }).find("trunk has 2600000 entries; expected at most 64"),
            std::string::npos);
  c = Config{};
  c.branches.assign(33, 2);
  EXPECT_NE(zs::test::error_of([&] { c.validate(); }).find("expected at most 32"), std::string::npos);
}
