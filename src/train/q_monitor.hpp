// The Q-value monitor's host side: enqueues the batch statistics and the divergence check with a
// mailbox post, and applies the patience rule (stop after N consecutive diverged checks) and the
// collapse warning to what arrives in the mailbox, never waiting for the device.
#pragma once
#include <cstdint>
#include <string>

#include "backends/backend.hpp"
#include "kernels/q_stats.hpp"
#include "backends/mailbox.hpp"

namespace zs {

struct QMonitorConfig {
  int sample = 0;                   // the batch row the divergence check watches
  double threshold = 1e4;           // diverged when |min| or |max| of that row exceeds this
  int patience = 3;                 // consecutive diverged checks that stop training
  double collapse_mean = 1e-4;      // collapse warning when |mean| < collapse_mean ...
  double collapse_variance = 1e-4;  // ... and variance < collapse_variance
  // Throws zs::Error naming the first bad field, its value and what is expected.
  void validate() const;
};

// One mailbox record, decoded.
struct QRecord {
  double max_q_min = 0, max_q_max = 0, max_q_mean = 0, mean_all = 0;  // batch statistics
  double min = 0, max = 0, mean = 0, variance = 0;                    // the watched row
  bool diverged = false;
};

struct QMonitorStatus {
  bool has_record = false;  // false until the first post has arrived
  bool fresh = false;       // the record is newer than the one the previous poll saw
  std::int64_t seq = 0;     // mailbox sequence number: one per observe()
  QRecord record;
  int consecutive = 0;  // diverged records in a row, each counted once
  bool collapse_warning = false;
  std::string warning;  // the collapse warning's text; empty without one
};

// The patience rule on record values alone, so it can be tested without a device. Counts
// consecutive diverged *new* records: a record whose seq was already seen is not counted again,
// and a clean new record resets the count. Records the host never saw (it polled less often than
// it observed) cannot be judged, so the count is over the records it did see.
class QPatience {
 public:
  explicit QPatience(const QMonitorConfig& config = QMonitorConfig{});
  // Throws zs::Error, naming the Q range of the diverged run and the threshold, when the count
  // reaches patience.
  QMonitorStatus update(std::int64_t seq, const QRecord& record);
  int consecutive() const { return consecutive_; }

 private:
  QMonitorConfig config_;
  std::int64_t last_seq_ = 0;
  int consecutive_ = 0;
  double run_min_ = 0, run_max_ = 0;  // the Q range over the current diverged run
  bool run_nonfinite_ = false;
};

class QMonitor {
 public:
  explicit QMonitor(const QMonitorConfig& config = QMonitorConfig{});
  // A copy would share the device record but keep its own patience count.
  QMonitor(const QMonitor&) = delete;
  QMonitor& operator=(const QMonitor&) = delete;
  QMonitor(QMonitor&&) = default;
  QMonitor& operator=(QMonitor&&) = default;

  // Enqueues batch statistics, the divergence check of config().sample and a mailbox post on
  // `exec`; no sync. Empty Q, or a sample outside the batch, throws zs::Error.
  void observe(const ExecSpace& exec, Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace> q);
  // The newest record through the patience rule; never waits. Throws zs::Error at patience.
  QMonitorStatus poll();

  const QMonitorConfig& config() const { return config_; }
  // The device record, for kernels or tests that read it in place.
  Kokkos::View<const kernels::QMonitorRecord, MemSpace> record() const { return box_.device(); }

  static QRecord decode(const kernels::QMonitorRecord& r);

 private:
  QMonitorConfig config_;
  QPatience patience_;
  RecordBox<kernels::QMonitorRecord> box_;
};

}  // namespace zs
