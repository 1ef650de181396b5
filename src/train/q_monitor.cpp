#include "train/q_monitor.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.hpp"

namespace zs {

namespace {

const QMonitorConfig& validated(const QMonitorConfig& c) {
  c.validate();
  return c;
}

}  // namespace

void QMonitorConfig::validate() const {
  require(sample >= 0, "QMonitorConfig: sample = ", sample, " is invalid; expected an index >= 0");
  require(std::isfinite(threshold) && threshold > 0, "QMonitorConfig: threshold = ", threshold,
          " is invalid; expected a finite number > 0");
  require(patience >= 1, "QMonitorConfig: patience = ", patience,
          " is invalid; expected an integer >= 1");
  require(std::isfinite(collapse_mean) && collapse_mean >= 0, "QMonitorConfig: collapse_mean = ",
          collapse_mean, " is invalid; expected a finite number >= 0");
  require(std::isfinite(collapse_variance) && collapse_variance >= 0,
          "QMonitorConfig: collapse_variance = ", collapse_variance,
          " is invalid; expected a finite number >= 0");
}

QPatience::QPatience(const QMonitorConfig& config) : config_(validated(config)) {}

QMonitorStatus QPatience::update(std::int64_t seq, const QRecord& record) {
  QMonitorStatus s;
  s.has_record = true;
  s.seq = seq;
  s.record = record;
  s.fresh = seq > last_seq_;
  if (s.fresh) {
    last_seq_ = seq;
    if (record.diverged) {
      if (consecutive_ == 0) {
        run_min_ = record.min;
        run_max_ = record.max;
        run_nonfinite_ = false;
      }
      ++consecutive_;
      run_min_ = std::min(run_min_, record.min);
      run_max_ = std::max(run_max_, record.max);
      run_nonfinite_ = run_nonfinite_ || !std::isfinite(record.mean);
      if (consecutive_ >= config_.patience) {
        fail("Q-value divergence: Q in [", run_min_, ", ", run_max_, "] exceeded |Q| > ",
             config_.threshold, run_nonfinite_ ? " (with NaN/Inf values)" : "", " on ",
             consecutive_, " consecutive checks; training stopped");
      }
    } else {
      consecutive_ = 0;
    }
  }
  s.consecutive = consecutive_;
  // NaN compares false, so a non-finite row never reads as collapsed.
  if (std::fabs(record.mean) < config_.collapse_mean && record.variance < config_.collapse_variance) {
    s.collapse_warning = true;
    s.warning = str("Q-value collapse: Q mean = ", record.mean, ", variance = ", record.variance,
                    " (|mean| < ", config_.collapse_mean, " and variance < ",
                    config_.collapse_variance, "); the network may have stopped learning");
  }
  return s;
}

QMonitor::QMonitor(const QMonitorConfig& config)
    : config_(validated(config)), patience_(config_), box_("zs::q_monitor::record") {}

void QMonitor::observe(const ExecSpace& exec, Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> q) {
  kernels::q_batch_stats(exec, q, box_.device());
  kernels::q_divergence_check(exec, q, box_.device(), config_.sample, config_.threshold);
  box_.post(exec);
}

QMonitorStatus QMonitor::poll() {
  const auto rec = box_.read();
  if (!rec) return QMonitorStatus{};
  return patience_.update(rec->seq, decode(rec->value));
}

QRecord QMonitor::decode(const kernels::QMonitorRecord& m) {
  QRecord r;
  r.max_q_min = m.batch.max_q_min;
  r.max_q_max = m.batch.max_q_max;
  r.max_q_mean = m.batch.max_q_mean;
  r.mean_all = m.batch.mean_all;
  r.min = m.row.min;
  r.max = m.row.max;
  r.mean = m.row.mean;
  r.variance = m.row.variance;
  r.diverged = m.row.flag != 0.0;
  return r;
}

}  // namespace zs
