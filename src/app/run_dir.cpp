#include "app/run_dir.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"

namespace zs {

CsvLog::CsvLog(const std::string& path, const std::vector<std::string>& header) {
  const bool fresh = !std::filesystem::exists(path) || std::filesystem::file_size(path) == 0;
  out_.open(path, std::ios::app);
  require(out_.good(), "cannot open '", path, "' for writing");
  if (fresh) row(header);
}

void CsvLog::row(const std::vector<std::string>& cells) {
  for (std::size_t i = 0; i < cells.size(); ++i) out_ << (i ? "," : "") << cells[i];
  out_ << '\n';
  out_.flush();
}

void CsvLog::truncate_after(const std::string& path, std::int64_t env_steps) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (!header) {
      char* end = nullptr;
      const long long first = std::strtoll(line.c_str(), &end, 10);
      if (end == line.c_str() || first > env_steps) continue;
    }
    header = false;
    kept += line + '\n';
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  out << kept;
  require(out.good(), "cannot rewrite '", path, "'");
}

std::string fmt_num(double v, int precision) {
  if (std::isnan(v)) return "nan";
  std::ostringstream os;
  os.precision(precision);
  os << v;
  return os.str();
}

std::string draw_learning_curve(const RunPaths& run, const std::string& title, double solve_return) {
  {
    std::ofstream gp(run.plot_script());
    require(gp.good(), "cannot write '", run.plot_script(), "'");
    // Columns: metrics.csv 1 env_steps, 5 recent_return; eval.csv 1 env_steps, 4 mean, 5 min, 6 max.
    gp << "set terminal pngcairo size 1000,600 noenhanced\n"
       << "set output '" << run.plot() << "'\n"
       << "set datafile separator ','\n"
       << "set key bottom right opaque box\n"
       << "set style fill transparent solid 0.35 noborder\n"
       << "set title '" << title << "'\n"
       << "set xlabel 'environment steps'\nset ylabel 'episode return'\nset grid\n";
    const bool evals = std::filesystem::exists(run.evals()) && std::filesystem::file_size(run.evals()) > 0;
    gp << "plot ";
    if (evals)
      gp << "'" << run.evals() << "' using 1:5:6 with filledcurves lc rgb '#f4a261' title 'evaluation min-max', ";
    gp << "'" << run.metrics() << "' using 1:5 with lines lw 1.5 lc rgb '#5566bb' title 'training (latest episode per env)'";
    if (evals)
      gp << ", '" << run.evals() << "' using 1:4 with linespoints lw 2 pt 7 lc rgb '#c0392b' title 'evaluation mean'";
    if (solve_return != 0) gp << ", " << solve_return << " with lines dt 2 lc rgb 'gray30' title 'solved'";
    gp << "\n";
  }
  const std::string cmd = "gnuplot '" + run.plot_script() + "' 2>'" + run.dir + "/gnuplot.log'";
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    return "gnuplot is not installed (Debian: apt-get install gnuplot-nox); the data is in the CSV files";
  if (std::system(cmd.c_str()) != 0) return "gnuplot failed; see " + run.dir + "/gnuplot.log";
  std::filesystem::remove(run.dir + "/gnuplot.log");
  return "";
}

}  // namespace zs
