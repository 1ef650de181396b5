#include "app/progress.hpp"

#include <cmath>
#include <cstdio>

namespace zs {

ProgressMode progress_mode(bool quiet, bool terminal) {
  if (quiet) return ProgressMode::off;
  return terminal ? ProgressMode::terminal : ProgressMode::lines;
}

ProgressBar::ProgressBar(std::ostream& out, std::int64_t total, ProgressMode mode, double line_every_s)
    : out_(out), total_(total > 0 ? total : 1), mode_(mode), tty_(mode == ProgressMode::terminal),
      line_every_s_(line_every_s), last_line_(std::chrono::steady_clock::now()) {}

std::string ProgressBar::bar(double fraction, int width) {
  fraction = std::isfinite(fraction) ? std::fmin(1.0, std::fmax(0.0, fraction)) : 0.0;
  const int full = static_cast<int>(std::lround(fraction * width));
  return "[" + std::string(full, '#') + std::string(width - full, '.') + "]";
}

void ProgressBar::update(std::int64_t done, const std::string& status) {
  if (mode_ == ProgressMode::off) return;
  const double f = static_cast<double>(done) / static_cast<double>(total_);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3.0f%%", 100.0 * std::fmin(1.0, f));
  const std::string line = bar(f, 24) + " " + pct + " " + status;
  if (tty_) {
    out_ << '\r' << line;
    if (line.size() < last_width_) out_ << std::string(last_width_ - line.size(), ' ');
    out_.flush();
    last_width_ = line.size();
    drawn_ = true;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_line_).count() < line_every_s_) return;
  last_line_ = now;
  out_ << line << std::endl;
}

void ProgressBar::finish() {
  if (tty_ && drawn_) out_ << std::endl;
  drawn_ = false;
  last_width_ = 0;
}

void ProgressBar::message(const std::string& line) {
  if (mode_ == ProgressMode::off) return;
  if (tty_ && drawn_) out_ << '\r' << std::string(last_width_, ' ') << '\r';
  out_ << line << std::endl;
  drawn_ = false;
  last_width_ = 0;
}

std::string compact(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (!std::isfinite(v)) return std::isnan(v) ? "-" : (v > 0 ? "inf" : "-inf");
  if (a >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (a >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (a >= 1e4) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else if (a >= 100 || a == 0) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace zs
