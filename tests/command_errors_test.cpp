// The program's commands on hostile input: every failure is a zs::Error that names the path and
// the problem (the program prints it and exits 2), never another exception that would abort it;
// outputs that are not regular files are refused before any work and left as they were; a
// folder that is not a run is not written into; --quiet prints no progress.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <ios>
#include <iterator>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include "app/explain.hpp"
#include "app/step_command.hpp"
#include "app/train_command.hpp"
#include "core/file_kind.hpp"
#include "core/safetensors.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace st = zs::safetensors;

// Only zs::Error is caught: any other exception fails the test, as it would abort the program.
std::string step_error(const zs::StepCommand& cmd) {
  return zs::test::error_of([&] {
    std::ostringstream log;
    zs::run_step_command(cmd, log);
  });
}

std::string train_error(const zs::TrainCommand& cmd) {
  return zs::test::error_of([&] {
    std::ostringstream log;
    zs::run_train_command(cmd, log);
  });
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class StepInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = zs::test::temp_path("dir");
    fs::remove_all(dir);
    fs::create_directories(dir);
    cmd.config_path = dir + "/config.json";
    cmd.batch_path = dir + "/batch.safetensors";
    cmd.out_path = dir + "/out.safetensors";
    std::ofstream(cmd.config_path) << R"({"state_dim": 2, "trunk": [4], "head_hidden": 3, "branches": [2],
                                          "atoms": 5, "precision": "fp32"})";
    st::File b;
    b.tensors["states"] = st::Tensor::from<float>({1, 2}, {0.1f, 0.2f});
    b.tensors["next_states"] = st::Tensor::from<float>({1, 2}, {0.3f, 0.4f});
    b.tensors["actions"] = st::Tensor::from<std::int32_t>({1, 1}, {1});
    b.tensors["rewards"] = st::Tensor::from<float>({1}, {1.f});
    b.tensors["dones"] = st::Tensor::from<float>({1}, {0.f});
    b.tensors["weights"] = st::Tensor::from<float>({1}, {1.f});
    st::write(cmd.batch_path, b);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
  zs::StepCommand cmd;
};

TEST_F(StepInputs, RunsOnTheseInputs) {
  EXPECT_EQ(step_error(cmd), "");
  EXPECT_EQ(zs::file_kind(cmd.out_path), "a regular file");
}

TEST_F(StepInputs, OutRefusesAFifoALinkAndADirectoryAndLeavesThemAsTheyWere) {
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  std::ofstream(dir + "/target") << "precious";
  fs::create_symlink(dir + "/target", dir + "/link");
  fs::create_directories(dir + "/folder");
  for (const auto& [name, kind] : {std::pair<std::string, std::string>{"fifo", "a FIFO (named pipe)"},
                                   {"link", "a symbolic link"},
                                   {"folder", "a directory"}}) {
    cmd.out_path = dir + "/" + name;
    const std::string e = step_error(cmd);
    EXPECT_NE(e.find("step --out: '" + cmd.out_path + "' is " + kind), std::string::npos) << e;
  }
  EXPECT_EQ(zs::file_kind(dir + "/fifo"), "a FIFO (named pipe)");
  EXPECT_EQ(zs::file_kind(dir + "/link"), "a symbolic link");
  EXPECT_EQ(slurp(dir + "/target"), "precious");
  EXPECT_EQ(zs::file_kind(dir + "/folder"), "a directory");
}

TEST_F(StepInputs, OutUnderAFileIsRefusedBeforeAnyWork) {
  cmd.out_path = cmd.config_path + "/out.safetensors";
  const std::string e = step_error(cmd);
  EXPECT_NE(e.find("the folder '" + cmd.config_path + "' of '" + cmd.out_path + "' is a regular file"),
            std::string::npos)
      << e;
}

TEST_F(StepInputs, ADirectoryAsConfigBatchOrParamsIsAClearError) {
  for (std::string zs::StepCommand::*field :
       {&zs::StepCommand::config_path, &zs::StepCommand::batch_path, &zs::StepCommand::params_path}) {
    auto c = cmd;
    c.*field = dir;
    const std::string e = step_error(c);
    EXPECT_NE(e.find("'" + dir + "' is a directory; expected a file"), std::string::npos) << e;
  }
}

TEST_F(StepInputs, ANumberTooLargeForADoubleIsAnErrorNamingTheConfig) {
  std::ofstream(cmd.config_path) << R"({"lr": 1e400})";
  const std::string e = step_error(cmd);
  EXPECT_NE(e.find("config '" + cmd.config_path + "' is not valid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("1e400"), std::string::npos) << e;
}

TEST(Explained, TurnsForeignExceptionsIntoErrorsThatSayWhatWasBeingDone) {
  const auto msg = [](const std::function<void()>& f) {
    return zs::test::error_of([&] { zs::explained("reading 'x'", f); });
  };
  EXPECT_EQ(msg([] { throw std::bad_alloc(); }).rfind("reading 'x': out of memory", 0), 0u);
  EXPECT_EQ(msg([] {
              throw fs::filesystem_error("cannot create", "a/b", std::make_error_code(std::errc::not_a_directory));
            }),
            "reading 'x': " + std::make_error_code(std::errc::not_a_directory).message() + " ('a/b')");
  EXPECT_NE(msg([] {
              const auto j = nlohmann::json::parse("{");
              (void)j;
            }).find("reading 'x': [json.exception.parse_error"),
            std::string::npos);
  EXPECT_EQ(msg([] { throw std::ios_base::failure("underflow"); }).rfind("reading 'x': reading or writing failed", 0),
            0u);
  EXPECT_EQ(msg([] { zs::fail("config: lr = -1 is invalid"); }), "config: lr = -1 is invalid");
  EXPECT_EQ(zs::explained("x", [] { return 7; }), 7);
}

// A small cart-pole run that evaluates twice.
std::string small_train_config(const std::string& path) {
  std::ofstream(path) << R"({"network": {"trunk": [16], "head_hidden": 8, "atoms": 11}, "envs": 4,
    "batch_size": 8, "learning_starts": 40, "checkpoint_every": 0, "replay": {"capacity": 1000},
    "eval": {"every": 40, "episodes": 4, "stop_when_solved": false}})";
  return path;
}

TEST(TrainInputs, AFolderWithAStaleMetricsFileButNoRunIsNotWrittenInto) {
  zs::TrainCommand cmd;
  cmd.config_path = small_train_config(zs::test::temp_path("config.json"));
  cmd.steps = 80;
  cmd.quiet = true;
  cmd.out = zs::test::temp_path("run");
  fs::remove_all(cmd.out);
  fs::create_directories(cmd.out);
  std::ofstream(cmd.out + "/metrics.csv") << "someone else's data\n";
  const std::string e = train_error(cmd);
  EXPECT_NE(e.find("'" + cmd.out + "' is not a zerosync run directory"), std::string::npos) << e;
  EXPECT_EQ(slurp(cmd.out + "/metrics.csv"), "someone else's data\n");
  EXPECT_FALSE(fs::exists(cmd.out + "/config.json"));
  fs::remove_all(cmd.out);
}

TEST(TrainInputs, QuietPrintsNoProgressOnlyTheStartAndTheSummary) {
  zs::TrainCommand cmd;
  cmd.config_path = small_train_config(zs::test::temp_path("config.json"));
  cmd.steps = 120;
  cmd.quiet = true;
  cmd.out = zs::test::temp_path("run");
  fs::remove_all(cmd.out);
  std::ostringstream log;
  zs::run_train_command(cmd, log);
  const std::string text = log.str();
  EXPECT_EQ(text.find("eval @"), std::string::npos) << text;
  EXPECT_EQ(text.find("[#"), std::string::npos) << text;
  EXPECT_EQ(text.find("[."), std::string::npos) << text;
  EXPECT_NE(text.find("zerosync train: env cartpole"), std::string::npos) << text;
  EXPECT_NE(text.find("best evaluation mean return"), std::string::npos) << text;
  fs::remove_all(cmd.out);
}

TEST(TrainInputs, OutUnderAFileAndBadConfigsAreClearErrors) {
  zs::TrainCommand cmd;
  cmd.config_path = small_train_config(zs::test::temp_path("config.json"));
  cmd.steps = 8;
  cmd.quiet = true;
  cmd.out = cmd.config_path + "/run";
  std::string e = train_error(cmd);
  EXPECT_NE(e.find("'" + cmd.out + "'"), std::string::npos) << e;
  EXPECT_NE(e.find(std::make_error_code(std::errc::not_a_directory).message()), std::string::npos) << e;

  cmd.out = zs::test::temp_path("run");
  fs::remove_all(cmd.out);
  cmd.config_path = ::testing::TempDir();
  e = train_error(cmd);
  EXPECT_NE(e.find("is a directory; expected a file"), std::string::npos) << e;
  cmd.config_path = zs::test::temp_path("huge.json");
  std::ofstream(cmd.config_path) << R"({"seed": 1, "eval": {"solve_return": -1e999}})";
  e = train_error(cmd);
  EXPECT_NE(e.find("train config '" + cmd.config_path + "' is not valid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("-1e999"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(cmd.out));
}

}  // namespace
