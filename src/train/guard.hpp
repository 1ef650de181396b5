// The training guard's host side: owns the device record, sums, step counter and skip flag, and
// the mailbox the host reads them from lagged, without ever waiting for the device.
#pragma once
#include <cstdint>
#include <optional>

#include "backends/backend.hpp"
#include "backends/mailbox.hpp"
#include "core/guard_config.hpp"
#include "kernels/guard_check.hpp"

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
  explicit TrainingGuard(const GuardConfig& config = GuardConfig{});
  // A copy would share the device state but count its own checks: steps_behind would lie.
  TrainingGuard(const TrainingGuard&) = delete;
  TrainingGuard& operator=(const TrainingGuard&) = delete;
  TrainingGuard(TrainingGuard&&) = default;
  TrainingGuard& operator=(TrainingGuard&&) = default;

  // Enqueues the guard check and a mailbox post on `exec`, one launch; no sync. grad_norm as produced by
  // zs::kernels::global_grad_norm or grad_norms; lr is read on the device, so a schedule may change it.
  void check(const ExecSpace& exec, Kokkos::View<const float, MemSpace> loss,
             Kokkos::View<const double, MemSpace> grad_norm, Kokkos::View<const float, MemSpace> lr);
  // The check and its post as a functor for one thread of a launch of the caller's (the step
  // runs it as the gradient norm's tail). Counts as an enqueued check: run it exactly once.
  using CheckKernel = kernels::ThenPost<ExecSpace, kernels::GuardCheck<ExecSpace>>;
  CheckKernel check_kernel(Kokkos::View<const float, MemSpace> loss, Kokkos::View<const double, MemSpace> grad_norm,
                           Kokkos::View<const float, MemSpace> lr);
  // The same check without its post, and the post alone (its own launch on `exec`, gated by
  // post_every like the check's), for a caller that posts later in the step, off its critical
  // path: a post's system-scope fences then delay no kernel that waits for the verdict. Enqueue
  // the post after the check and before the next check.
  kernels::GuardCheck<ExecSpace> verdict_kernel(Kokkos::View<const float, MemSpace> loss,
                                                Kokkos::View<const double, MemSpace> grad_norm,
                                                Kokkos::View<const float, MemSpace> lr);
  void post(const ExecSpace& exec) const { box_.post_every(exec, step_, config_.post_every); }
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
  // The whole device state as doubles (the mailbox record) and the step counter, for
  // checkpoints: saved as they are and written back on load, outside the step.
  Kokkos::View<double*, MemSpace, Kokkos::MemoryUnmanaged> device_state() const { return box_.doubles(); }
  Kokkos::View<std::int64_t, MemSpace> device_step() const { return step_; }
  // Back to "no step yet": zero sums, step counter and skip flag, host count of checks, and
  // posts that state. Blocking, for set-up only (waits for the device); seq keeps counting up.
  void reset();

  // The host's reading of one record; exposed for tests and tools.
  static GuardStatus decode(std::int64_t seq, const kernels::GuardState& state, std::int64_t checks_enqueued);

 private:
  void initialise();

  GuardConfig config_;
  RecordBox<kernels::GuardState> box_;
  DeviceScalar<std::int64_t> step_;
  DeviceScalar<int> skip_;
  std::int64_t checks_enqueued_ = 0;
};

}  // namespace zs
