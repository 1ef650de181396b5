// A one-line progress bar for long runs: redrawn in place on a terminal, printed as a plain line
// every few seconds otherwise (logs, CI), so progress is visible either way; or silent.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace zs {

enum class ProgressMode {
  terminal,  // one line redrawn in place
  lines,     // a plain line every few seconds (logs, CI)
  off,       // nothing at all (--quiet)
};

// --quiet wins over everything; otherwise a terminal gets the live bar, anything else lines.
ProgressMode progress_mode(bool quiet, bool terminal);

class ProgressBar {
 public:
  // `lines`: at most one line per `line_every_s` seconds.
  ProgressBar(std::ostream& out, std::int64_t total, ProgressMode mode, double line_every_s = 5.0);
  // done of total, then `status` (free text: rates, return, loss, …).
  void update(std::int64_t done, const std::string& status);
  // Ends the bar's line so that what follows starts on a fresh one.
  void finish();
  // Prints a whole line of progress news above the bar (clears it first on a terminal); nothing
  // when the mode is off.
  void message(const std::string& line);

  static std::string bar(double fraction, int width);

 private:
  std::ostream& out_;
  std::int64_t total_;
  ProgressMode mode_;
  bool tty_;
  double line_every_s_;
  std::chrono::steady_clock::time_point last_line_;
  bool drawn_ = false;
  std::size_t last_width_ = 0;
};

// "1.23k", "45.6M": compact counts for status text.
std::string compact(double v);

}  // namespace zs
