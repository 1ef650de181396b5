// The run directory's small pieces: CSV logs that a resumed run trims back to its checkpoint,
// and the progress bar's text.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
    zs::CsvLog log(path, {"env_steps", "loss"});
    for (int s : {100, 200, 300, 400}) log.row({std::to_string(s), "1.5"});
  }
  {
    zs::CsvLog again(path, {"env_steps", "loss"});  // an existing file gets no second header
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
  zs::ProgressBar quiet(out, 100, false, 3600.0);
  quiet.update(10, "a");
  quiet.update(20, "b");
  EXPECT_EQ(out.str(), "");
  quiet.message("eval done");
  EXPECT_EQ(out.str(), "eval done\n");
  std::ostringstream tty;
  zs::ProgressBar live(tty, 100, true);
  live.update(50, "half");
  live.finish();
  EXPECT_EQ(tty.str(), "\r[############............]  50% half\n");
}

}  // namespace
