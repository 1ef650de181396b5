// A one-line progress bar for long runs: redrawn in place on a terminal, printed as a plain line
// every few seconds otherwise (logs, CI), so progress is visible either way.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace zs {

class ProgressBar {
 public:
  // `tty`: redraw in place; otherwise one line per `line_every_s` seconds.
  ProgressBar(std::ostream& out, std::int64_t total, bool tty, double line_every_s = 5.0);
  // done of total, then `status` (free text: rates, return, loss, …).
  void update(std::int64_t done, const std::string& status);
  // Ends the bar's line so that what follows starts on a fresh one.
  void finish();
  // Prints a whole line above the bar (clears it first on a terminal).
  void message(const std::string& line);

  static std::string bar(double fraction, int width);

 private:
  std::ostream& out_;
  std::int64_t total_;
  bool tty_;
  double line_every_s_;
  std::chrono::steady_clock::time_point last_line_;
  bool drawn_ = false;
  std::size_t last_width_ = 0;
};

// "1.23k", "45.6M": compact counts for status text.
std::string compact(double v);

}  // namespace zs
