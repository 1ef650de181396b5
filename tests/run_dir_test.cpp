// The run directory's small pieces: CSV logs that a resumed run trims back to its checkpoint,
// the checks that keep a run out of folders and files that are not its own, the learning
// curve's plot, and the progress bar's text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "app/progress.hpp"
#include "app/run_dir.hpp"
#include "test_util.hpp"

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(RunDir, CsvLogAppendsAndResumeDropsRowsAfterTheCheckpoint) {
  const std::string path = zs::test::temp_path("metrics.csv");
  std::filesystem::remove(path);
  {
    zs::CsvLog log(path, {"env_steps", "loss"}, zs::CsvLog::Mode::fresh);
    for (int s : {100, 200, 300, 400}) log.row({std::to_string(s), "1.5"});
  }
  {
    zs::CsvLog again(path, {"env_steps", "loss"}, zs::CsvLog::Mode::append);  // no second header
    again.row({"500", "0.5"});
  }
  EXPECT_EQ(read_lines(path).size(), 6u);
  zs::CsvLog::truncate_after(path, 300);
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "env_steps,loss");
  EXPECT_EQ(lines[3], "300,1.5");
  zs::CsvLog::truncate_after(zs::test::temp_path("missing.csv"), 10);  // nothing to trim: no error
}

TEST(RunDir, ProgressBarAndCompactNumbers) {
  EXPECT_EQ(zs::ProgressBar::bar(0.5, 10), "[#####.....]");
  EXPECT_EQ(zs::ProgressBar::bar(2.0, 4), "[####]");
  EXPECT_EQ(zs::ProgressBar::bar(NAN, 4), "[....]");
  EXPECT_EQ(zs::compact(45000), "45.0k");
  EXPECT_EQ(zs::compact(2.5e6), "2.50M");
  EXPECT_EQ(zs::compact(475), "475");
  EXPECT_EQ(zs::compact(0.0123), "0.0123");
  EXPECT_EQ(zs::compact(NAN), "-");
  // Off a terminal the bar prints a plain line at most every line_every_s seconds.
  std::ostringstream out;
  zs::ProgressBar quiet(out, 100, zs::ProgressMode::lines, 3600.0);
  quiet.update(10, "a");
  quiet.update(20, "b");
  EXPECT_EQ(out.str(), "");
  quiet.message("eval done");
  EXPECT_EQ(out.str(), "eval done\n");
  std::ostringstream tty;
  zs::ProgressBar live(tty, 100, zs::ProgressMode::terminal);
  live.update(50, "half");
  live.finish();
  EXPECT_EQ(tty.str(), "\r[############............]  50% half\n");
}

TEST(RunDir, AFreshCsvLogStartsAnewInsteadOfAppendingToAStaleFile) {
  const std::string path = zs::test::temp_path("metrics.csv");
  std::ofstream(path) << "old_header\n1,2\n";
  {
    zs::CsvLog log(path, {"env_steps", "loss"}, zs::CsvLog::Mode::fresh);
    log.row({"100", "0.5"});
  }
  EXPECT_EQ(read_lines(path), (std::vector<std::string>{"env_steps,loss", "100,0.5"}));
}

TEST(RunDir, QuietMeansNoProgressOutputAtAllOnOrOffATerminal) {
  EXPECT_EQ(zs::progress_mode(true, false), zs::ProgressMode::off);
  EXPECT_EQ(zs::progress_mode(true, true), zs::ProgressMode::off);
  EXPECT_EQ(zs::progress_mode(false, true), zs::ProgressMode::terminal);
  EXPECT_EQ(zs::progress_mode(false, false), zs::ProgressMode::lines);
  std::ostringstream out;
  zs::ProgressBar off(out, 100, zs::ProgressMode::off, 0.0);  // 0 s: a lines bar would print every update
  off.update(10, "a");
  off.message("eval @ 10 steps");
  off.update(100, "b");
  off.finish();
  EXPECT_EQ(out.str(), "");
}

class RunDirCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    run.dir = zs::test::temp_path("run");
    std::filesystem::remove_all(run.dir);
  }
  void TearDown() override { std::filesystem::remove_all(run.dir); }
  std::string error(bool resume) const {
    return zs::test::error_of([&] { zs::check_run_dir(run, resume); });
  }
  zs::RunPaths run;
};

TEST_F(RunDirCheck, ANewRunTakesAMissingOrEmptyDirectory) {
  EXPECT_EQ(error(false), "");
  zs::create_run_dir(run);
  EXPECT_TRUE(std::filesystem::is_directory(run.dir));
  EXPECT_EQ(error(false), "");
}

TEST_F(RunDirCheck, AFolderWithFilesButNoRunIsNotWrittenInto) {
  std::filesystem::create_directories(run.dir);
  std::ofstream(run.metrics()) << "stale\n";
  const std::string e = error(false);
  EXPECT_NE(e.find("'" + run.dir + "' is not a zerosync run directory"), std::string::npos) << e;
  EXPECT_NE(e.find("'metrics.csv'"), std::string::npos) << e;
  EXPECT_EQ(read_lines(run.metrics()), std::vector<std::string>{"stale"});
  std::ofstream(run.config()) << "{}";
  EXPECT_NE(error(false).find("already holds a run"), std::string::npos);
}

TEST_F(RunDirCheck, AFileIsNoRunDirectoryAndNothingIsCreatedUnderIt) {
  std::ofstream(run.dir) << "x";
  EXPECT_NE(error(false).find("'" + run.dir + "' is a regular file; expected a new or empty directory"),
            std::string::npos)
      << error(false);
  zs::RunPaths under{run.dir + "/sub"};
  const std::string e = zs::test::error_of([&] { zs::create_run_dir(under); });
  EXPECT_NE(e.find("cannot create the run directory '" + under.dir + "'"), std::string::npos) << e;
}

TEST_F(RunDirCheck, AResumedRunRefusesLinksFifosAndDirectoriesWhereItWritesFiles) {
  std::filesystem::create_directories(run.dir);
  std::ofstream(run.config()) << "{}";
  EXPECT_EQ(error(true), "");
  const std::string target = zs::test::temp_path("target.csv");
  std::ofstream(target) << "precious\n";
  std::filesystem::create_symlink(target, run.metrics());
  EXPECT_NE(error(true).find("'" + run.metrics() + "' is a symbolic link"), std::string::npos) << error(true);
  std::filesystem::remove(run.metrics());
  ASSERT_EQ(mkfifo(run.evals().c_str(), 0600), 0);
  EXPECT_NE(error(true).find("'" + run.evals() + "' is a FIFO"), std::string::npos) << error(true);
  std::filesystem::remove(run.evals());
  std::filesystem::create_directories(run.plot());
  EXPECT_NE(error(true).find("'" + run.plot() + "' is a directory"), std::string::npos) << error(true);
  std::filesystem::remove(run.plot());
  std::filesystem::create_directories(run.checkpoint());
  EXPECT_NE(error(true).find("'" + run.checkpoint() + "' is a directory"), std::string::npos) << error(true);
  std::filesystem::remove(run.checkpoint());
  std::filesystem::create_symlink(target, run.checkpoint());
  EXPECT_NE(error(true).find("'" + run.checkpoint() + "' is a symbolic link"), std::string::npos) << error(true);
  EXPECT_EQ(read_lines(target), std::vector<std::string>{"precious"});
}

TEST_F(RunDirCheck, TheLearningCurveIsDrawnWhateverCharactersTheRunDirectoryHolds) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  // A quote used to end the shell's and gnuplot's quoting early: no plot, or a command of the
  // path's choosing.
  run.dir = zs::test::temp_path("it's a run; $(touch pwned)");
  std::filesystem::remove_all(run.dir);
  zs::create_run_dir(run);
  std::ofstream(run.metrics()) << "env_steps,wall_s,updates,episodes,recent_return\n10,0,0,0,1\n20,0,0,0,2\n";
  EXPECT_EQ(zs::draw_learning_curve(run, "title with 'quotes'", 0.0), "");
  std::ifstream png(run.plot(), std::ios::binary);
  char magic[4] = {};
  png.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_FALSE(std::filesystem::exists("pwned"));
}

}  // namespace
