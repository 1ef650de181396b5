#include "app/run_dir.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "core/error.hpp"
#include "core/file_kind.hpp"

extern char** environ;

namespace zs {

namespace fs = std::filesystem;

CsvLog::CsvLog(const std::string& path, const std::vector<std::string>& header, Mode mode) : path_(path) {
  require_output_file(path, "train");
  std::error_code ec;
  const bool fresh = mode == Mode::fresh || file_kind(path).empty() || (fs::file_size(path, ec) == 0 && !ec);
  out_.open(path, mode == Mode::fresh ? std::ios::trunc : std::ios::app);
  if (!out_.good()) {
    const int err = errno;
    fail("train: cannot open '", path, "' for writing: ", std::strerror(err));
  }
  if (fresh) row(header);
}

void CsvLog::row(const std::vector<std::string>& cells) {
  for (std::size_t i = 0; i < cells.size(); ++i) out_ << (i ? "," : "") << cells[i];
  out_ << '\n';
  out_.flush();
  require(out_.good(), "train: writing a row to '", path_, "' failed (disk full or file-size limit?)");
}

void CsvLog::truncate_after(const std::string& path, std::int64_t env_steps) {
  if (file_kind(path).empty()) return;
  require_output_file(path, "train --resume");
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
  out.flush();
  require(out.good(), "train --resume: cannot rewrite '", path, "' (disk full or file-size limit?)");
}

std::string fmt_num(double v, int precision) {
  if (std::isnan(v)) return "nan";
  std::ostringstream os;
  os.precision(precision);
  os << v;
  return os.str();
}

namespace {

// The files a run writes at its top level; each must be absent or a regular file.
std::vector<std::string> run_files(const RunPaths& run) {
  return {run.config(),      run.metrics(),     run.evals(), run.checkpoint(),
          run.best_model(), run.plot_script(), run.plot(),  run.plot_log()};
}

std::string listing(const std::string& dir, std::size_t at_most) {
  std::error_code ec;
  std::string names;
  std::size_t n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (n < at_most) names += (n ? ", '" : "'") + it->path().filename().string() + "'";
    ++n;
  }
  if (n > at_most) names += ", ...";
  return names;
}

}  // namespace

void check_run_dir(const RunPaths& run, bool resume) {
  const std::string what = resume ? "train --resume --out" : "train --out";
  std::error_code ec;
  const fs::file_status s = fs::status(run.dir, ec);  // a link to a directory serves as one
  if (s.type() == fs::file_type::not_found) return;  // new: created later; resumed: no config.json to read
  require(!ec, what, ": cannot inspect '", run.dir, "': ", ec.message());
  require(s.type() == fs::file_type::directory, what, ": '", run.dir, "' is ", file_kind(run.dir),
          "; expected ", resume ? "the directory of an earlier zerosync train run" : "a new or empty directory");
  if (!resume) {
    require(file_kind(run.checkpoint()).empty() && file_kind(run.config()).empty(), "train: '", run.dir,
            "' already holds a run; expected a new directory, or --resume to continue it");
    // A folder that is not a run but holds files (a stale metrics.csv, someone's data) is not
    // ours to write into: rows would be appended to, or files replaced, that no run of ours made.
    const std::string held = listing(run.dir, 3);
    require(held.empty(), what, ": '", run.dir, "' is not a zerosync run directory (no config.json) and is not empty",
            " (it holds ", held, "); expected a new or empty directory");
  }
  for (const auto& f : run_files(run)) require_output_file(f, what);
}

void create_run_dir(const RunPaths& run) {
  std::error_code ec;
  fs::create_directories(run.dir, ec);
  require(!ec, "train: cannot create the run directory '", run.dir, "': ", ec.message());
}

namespace {

// gnuplot's single-quoted strings hold a quote as two, and nothing else is special in them.
std::string gp_string(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// Runs `gnuplot script` with stderr to `log`, without a shell: the paths reach gnuplot as they
// are, whatever characters they hold. Returns "" or why it did not succeed.
std::string run_gnuplot(const std::string& script, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string arg0 = "gnuplot", arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err == ENOENT) return "gnuplot is not installed (Debian: apt-get install gnuplot-nox); the data is in the CSV files";
  if (err != 0) return std::string("gnuplot could not be started: ") + std::strerror(err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return std::string("waiting for gnuplot failed: ") + std::strerror(errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "gnuplot failed; see " + log;
  return "";
}

}  // namespace

std::string draw_learning_curve(const RunPaths& run, const std::string& title, double solve_return) {
  // The checks of check_run_dir again: the run took a while, and a link made meanwhile would
  // be written through by gnuplot.
  try {
    for (const auto& f : {run.plot_script(), run.plot(), run.plot_log()}) require_output_file(f, "plot");
  } catch (const Error& e) {
    return e.what();
  }
  {
    std::ofstream gp(run.plot_script());
    if (!gp.good()) return "cannot write '" + run.plot_script() + "': " + std::strerror(errno);
    // Columns: metrics.csv 1 env_steps, 5 recent_return; eval.csv 1 env_steps, 4 mean, 5 min, 6 max.
    gp << "set terminal pngcairo size 1000,600 noenhanced\n"
       << "set output " << gp_string(run.plot()) << "\n"
       << "set datafile separator ','\n"
       << "set key bottom right opaque box\n"
       << "set style fill transparent solid 0.35 noborder\n"
       << "set title " << gp_string(title) << "\n"
       << "set xlabel 'environment steps'\nset ylabel 'episode return'\nset grid\n";
    std::error_code ec;
    const bool evals = !file_kind(run.evals()).empty() && fs::file_size(run.evals(), ec) > 0 && !ec;
    gp << "plot ";
    if (evals)
      gp << gp_string(run.evals()) << " using 1:5:6 with filledcurves lc rgb '#f4a261' title 'evaluation min-max', ";
    gp << gp_string(run.metrics())
       << " using 1:5 with lines lw 1.5 lc rgb '#5566bb' title 'training (latest episode per env)'";
    if (evals)
      gp << ", " << gp_string(run.evals())
         << " using 1:4 with linespoints lw 2 pt 7 lc rgb '#c0392b' title 'evaluation mean'";
    if (solve_return != 0) gp << ", " << solve_return << " with lines dt 2 lc rgb 'gray30' title 'solved'";
    gp << "\n";
    gp.flush();
    if (!gp.good()) return "writing '" + run.plot_script() + "' failed (disk full or file-size limit?)";
  }
  const std::string why = run_gnuplot(run.plot_script(), run.plot_log());
  if (!why.empty()) return why;
  std::error_code ec;
  fs::remove(run.plot_log(), ec);
  return "";
}

}  // namespace zs
