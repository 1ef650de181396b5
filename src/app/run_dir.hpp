// A training run's directory: the config it used, metrics and evaluations as CSV, checkpoints,
// the best evaluated parameters and a learning-curve PNG drawn by gnuplot.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace zs {

class CsvLog {
 public:
  // Opens `path` for appending; writes `header` first when the file is new or empty.
  CsvLog(const std::string& path, const std::vector<std::string>& header);
  void row(const std::vector<std::string>& cells);
  // Drops the rows whose first column (an env-step count) exceeds `env_steps`: what a run wrote
  // after the checkpoint it resumes from is replaced by what it writes now.
  static void truncate_after(const std::string& path, std::int64_t env_steps);

 private:
  std::ofstream out_;
};

std::string fmt_num(double v, int precision = 6);

struct RunPaths {
  std::string dir;
  std::string config() const { return dir + "/config.json"; }
  std::string metrics() const { return dir + "/metrics.csv"; }
  std::string evals() const { return dir + "/eval.csv"; }
  std::string checkpoint() const { return dir + "/checkpoint.safetensors"; }
  std::string best_model() const { return dir + "/best_model.safetensors"; }
  std::string plot_script() const { return dir + "/learning_curve.gp"; }
  std::string plot() const { return dir + "/learning_curve.png"; }
};

// Writes the gnuplot script and runs gnuplot on it. Returns "" on success, otherwise why no PNG
// was drawn (gnuplot missing or failing): the CSV files hold the data either way.
std::string draw_learning_curve(const RunPaths& run, const std::string& title, double solve_return);

}  // namespace zs
