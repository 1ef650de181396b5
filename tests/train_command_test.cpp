// `zerosync train` through its library entry point: the run directory holds what the docs
// promise, a finished run resumes with a longer budget, and misuse is refused clearly.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <string>

#include "test_util.hpp"
#include "app/train_command.hpp"

namespace {

namespace fs = std::filesystem;

std::string write_config(const std::string& name, std::uint64_t seed) {
  const std::string path = zs::test::temp_path(name);
  std::ofstream(path) << R"({"network": {"trunk": [32], "head_hidden": 16, "atoms": 11},
    "envs": 4, "batch_size": 16, "learning_starts": 100, "checkpoint_every": 400,
    "replay": {"capacity": 2000}, "epsilon": {"steps": 400},
    "eval": {"every": 400, "episodes": 4, "stop_when_solved": false}, "seed": )"
                      << seed << "}";
  return path;
}

std::size_t lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

TEST(TrainCommand, RunDirectoryHoldsConfigMetricsCheckpointModelAndPlot) {
  zs::TrainCommand cmd;
  cmd.config_path = write_config("config.json", zs::test::fresh_seed());
  cmd.steps = 1200;
  cmd.out = zs::test::temp_path("run");
  cmd.quiet = true;
  fs::remove_all(cmd.out);
  std::ostringstream log;
  const zs::TrainSummary s = zs::run_train_command(cmd, log);
  SCOPED_TRACE(log.str());
  EXPECT_EQ(s.outcome, zs::TrainOutcome::finished);
  EXPECT_EQ(s.env_steps, 1200);
  EXPECT_TRUE(fs::exists(cmd.out + "/config.json"));
  EXPECT_TRUE(fs::is_regular_file(cmd.out + "/checkpoint.safetensors"));
  EXPECT_TRUE(fs::exists(cmd.out + "/best_model.safetensors"));
  EXPECT_EQ(lines(cmd.out + "/eval.csv"), 1u + 3u);  // header + evaluations at 400, 800, 1200
  EXPECT_GE(lines(cmd.out + "/metrics.csv"), 2u);
  EXPECT_NE(log.str().find("run directory: " + cmd.out), std::string::npos);
  // The bootstrap installs gnuplot, so there the PNG is part of the contract; a machine without
  // it (the lent GPU machine) must say why there is no plot instead.
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    ASSERT_EQ(s.plot, cmd.out + "/learning_curve.png") << "no plot drawn";
    std::ifstream png(s.plot, std::ios::binary);
    char magic[8] = {};
    png.read(magic, 8);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
    EXPECT_NE(log.str().find("plot:          " + s.plot), std::string::npos);
  } else {
    EXPECT_TRUE(s.plot.empty());
    EXPECT_NE(log.str().find("gnuplot is not installed"), std::string::npos);
  }

  // Resume with a longer budget: it continues at 1200 and evaluates at 1600.
  zs::TrainCommand more;
  more.out = cmd.out;
  more.resume = true;
  more.steps = 1600;
  more.quiet = true;
  std::ostringstream log2;
  const zs::TrainSummary s2 = zs::run_train_command(more, log2);
  EXPECT_NE(log2.str().find("resuming"), std::string::npos) << log2.str();
  EXPECT_EQ(s2.env_steps, 1600);
  EXPECT_EQ(lines(cmd.out + "/eval.csv"), 1u + 4u);
}

TEST(TrainCommand, MisuseIsRefusedWithClearMessages) {
  const auto err = [](const zs::TrainCommand& c) {
    return zs::test::error_of([&] {
      std::ostringstream log;
      zs::run_train_command(c, log);
    });
  };
  zs::TrainCommand c;
  c.out = zs::test::temp_path("run");
  fs::remove_all(c.out);
  c.resume = true;
  EXPECT_NE(err(c).find("no config.json"), std::string::npos);
  c.resume = false;
  c.config_path = zs::test::temp_path("missing.json");
  EXPECT_NE(err(c).find("cannot open"), std::string::npos);
  c.config_path = zs::test::temp_path("cartpole.json");
  std::ofstream(c.config_path) << R"({"env": "cartpole"})";
  c.env = "market";
  EXPECT_NE(err(c).find("disagree"), std::string::npos);
  c.config_path = write_config("config.json", 1);
  // An existing run is never overwritten.
  c.env.clear();
  c.steps = 8;
  c.quiet = true;
  std::ostringstream log;
  zs::run_train_command(c, log);
  EXPECT_NE(err(c).find("already holds a run"), std::string::npos);
  zs::TrainCommand r;
  r.out = c.out;
  r.resume = true;
  r.seed = 3;
  EXPECT_NE(err(r).find("not allowed"), std::string::npos);
}

}  // namespace

namespace {

TEST(TrainCommand, TheGuardStopsTheRunWithAClearMessage) {
  zs::TrainCommand cmd;
  cmd.config_path = zs::test::temp_path("config.json");
  // Every C51 loss is above this clip: the first training step trips the guard, which skips the
  // update on the device; the host sees the record and stops the run.
  std::ofstream(cmd.config_path) << R"({"network": {"trunk": [32], "head_hidden": 16, "atoms": 11},
    "envs": 4, "batch_size": 16, "learning_starts": 40, "checkpoint_every": 0, "replay": {"capacity": 2000},
    "eval": {"every": 0, "stop_when_solved": false}, "guard": {"loss_clip": 1e-9}})";
  cmd.steps = 1000000;
  cmd.out = zs::test::temp_path("run");
  cmd.quiet = true;
  std::filesystem::remove_all(cmd.out);
  std::ostringstream log;
  const zs::TrainSummary s = zs::run_train_command(cmd, log);
  SCOPED_TRACE(log.str());
  EXPECT_EQ(s.outcome, zs::TrainOutcome::guard_stopped);
  EXPECT_LT(s.env_steps, 1000000);
  EXPECT_NE(s.message.find("stopped by the training guard"), std::string::npos);
  EXPECT_NE(s.message.find("loss above guard.loss_clip"), std::string::npos);
  // Nothing was saved before the problem, and nothing is saved after it.
  EXPECT_FALSE(std::filesystem::exists(cmd.out + "/checkpoint.safetensors"));
  EXPECT_NE(log.str().find("no checkpoint was saved before the problem"), std::string::npos);
}

}  // namespace
