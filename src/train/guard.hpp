// The training guard's host side: owns the device record, sums, step counter and skip flag, and
// the mailbox the host reads them from lagged, without ever waiting for the device.
#pragma once
#include <cstdint>
#include <optional>

#include "backends/backend.hpp"
#include "kernels/guard_check.hpp"
#include "backends/mailbox.hpp"

namespace zs {

struct GuardTotals {
  double loss_sum = 0;
  double grad_norm_sum = 0;
  std::int64_t steps = 0;    // clean steps, the ones in the sums
  std::int64_t skipped = 0;  // steps whose update was skipped (NaN/Inf or loss above the clip)
  // NaN when no clean step was summed: there is no mean to report.
  double mean_loss() const;
  double mean_grad_norm() const;
};

struct GuardSnapshot : GuardTotals {
  std::int64_t boundary_step = -1;  // step counter at the boundary; -1: no boundary yet
  bool taken() const { return boundary_step >= 0; }
};

struct GuardStatus {
  std::int64_t seq = 0;  // mailbox sequence number: one per check() and per boundary()
  bool halt_nan = false;
  bool halt_loss_clip = false;
  bool halt_grad_collapse = false;
  double clipped_loss = 0;
  double raw_loss = 0;
  double raw_grad_norm = 0;
  std::int64_t step = -1;  // the step index this record belongs to; -1: no check has run yet
  // Checks enqueued after the one this record belongs to: 0 means fully up to date.
  std::int64_t steps_behind = 0;
  GuardTotals running;      // since the last boundary, up to and including `step`
  GuardSnapshot snapshot;   // at the last boundary
  // The device skipped this step's update (Adam and target update read the same predicate).
  bool skipped() const { return halt_nan || halt_loss_clip; }
  // Any reason for the host to stop: the skip reasons, and grad collapse after warm-up.
  bool halt() const { return halt_nan || halt_loss_clip || halt_grad_collapse; }
};

class TrainingGuard {
 public:
  // Slots of the device state, which is posted to the mailbox as it is.
  static constexpr int record_offset = 0;
  static constexpr int totals_offset = record_offset + kernels::guard_record::size;
  static constexpr int snapshot_offset = totals_offset + kernels::guard_totals::size;
  static constexpr int state_size = snapshot_offset + kernels::guard_snapshot::size;

  explicit TrainingGuard(const GuardConfig& config = GuardConfig{});
  // A copy would share the device state but count its own checks: steps_behind would lie.
  TrainingGuard(const TrainingGuard&) = delete;
  TrainingGuard& operator=(const TrainingGuard&) = delete;
  TrainingGuard(TrainingGuard&&) = default;
  TrainingGuard& operator=(TrainingGuard&&) = default;

  // Enqueues the guard check and a mailbox post on `exec`, one launch; no sync. grad_norm as produced by
  // zs::kernels::global_grad_norm; lr is read on the device, so a schedule may change it.
  void check(const ExecSpace& exec, Kokkos::View<const float, MemSpace> loss,
             Kokkos::View<const double, MemSpace> grad_norm, Kokkos::View<const float, MemSpace> lr);
  // Enqueues snapshot-and-reset of the sums and a mailbox post on `exec`; no sync.
  void boundary(const ExecSpace& exec);

  // The newest completed record, or nothing before the first post arrives. Never waits.
  // steps_behind counts from the check() calls made on this object; a caller that replays a
  // captured graph holding check() passes its own count of checks enqueued instead.
  std::optional<GuardStatus> latest() const { return latest(checks_enqueued_); }
  std::optional<GuardStatus> latest(std::int64_t checks_enqueued) const;

  std::int64_t checks_enqueued() const { return checks_enqueued_; }
  const GuardConfig& config() const { return config_; }
  // For later kernels on the same stream: 1 = skip this step's update.
  Kokkos::View<const int, MemSpace> skip_flag() const { return skip_; }
  // Index of the next step to be checked (counts up once per executed check).
  Kokkos::View<const std::int64_t, MemSpace> step_counter() const { return step_; }
  const Mailbox& mailbox() const { return mailbox_; }
  // The whole device state (record, totals, snapshot: state_size doubles) and the step counter,
  // for checkpoints: saved as they are and written back on load, outside the step.
  Kokkos::View<double*, MemSpace> device_state() const { return state_; }
  Kokkos::View<std::int64_t, MemSpace> device_step() const { return step_; }
  // Back to "no step yet": zero sums, step counter and skip flag, host count of checks, and
  // posts that state. Blocking, for set-up only (waits for the device); seq keeps counting up.
  void reset();

  // Decodes a mailbox payload of state_size doubles; exposed for tests and tools.
  static GuardStatus decode(std::int64_t seq, const double* state, std::int64_t checks_enqueued);

 private:
  void initialise();

  GuardConfig config_;
  Kokkos::View<double*, MemSpace> state_;
  Kokkos::View<double*, MemSpace> record_, totals_, snapshot_;  // slices of state_
  DeviceScalar<std::int64_t> step_;
  DeviceScalar<int> skip_;
  Mailbox mailbox_;
  std::int64_t checks_enqueued_ = 0;
};

}  // namespace zs
