#include "train/guard.hpp"

#include <cmath>
#include <limits>

namespace zs {

namespace {

const GuardConfig& validated(const GuardConfig& c) {
  c.validate();
  return c;
}

std::int64_t as_count(double x) { return static_cast<std::int64_t>(x); }

GuardTotals totals_of(const kernels::GuardSums& s) {
  GuardTotals t;
  t.loss_sum = s.loss_sum;
  t.grad_norm_sum = s.grad_norm_sum;
  t.steps = as_count(s.steps);
  t.skipped = as_count(s.skipped);
  return t;
}

}  // namespace

double GuardTotals::mean_loss() const {
  return steps > 0 ? loss_sum / double(steps) : std::numeric_limits<double>::quiet_NaN();
}
double GuardTotals::mean_grad_norm() const {
  return steps > 0 ? grad_norm_sum / double(steps) : std::numeric_limits<double>::quiet_NaN();
}

TrainingGuard::TrainingGuard(const GuardConfig& config)
    : config_(validated(config)), box_("zs::guard::state"), step_("zs::guard::step"), skip_("zs::guard::skip") {
  initialise();
}

void TrainingGuard::reset() {
  Kokkos::fence();  // work in flight may still read or write the state
  initialise();
  // Posted, so latest() shows the reset state instead of the last record before it.
  box_.post(ExecSpace());
  Kokkos::fence();
}

void TrainingGuard::initialise() {
  // A value-initialised state holds the "nothing yet" markers (step −1, no boundary).
  Kokkos::deep_copy(box_.device(), kernels::GuardState{});
  Kokkos::deep_copy(step_, std::int64_t{0});
  Kokkos::deep_copy(skip_, 0);
  checks_enqueued_ = 0;
}

void TrainingGuard::check(const ExecSpace& exec, Kokkos::View<const float, MemSpace> loss,
                          Kokkos::View<const double, MemSpace> grad_norm, Kokkos::View<const float, MemSpace> lr) {
  Kokkos::parallel_for("zs::guard_check", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), check_kernel(loss, grad_norm, lr));
}

TrainingGuard::CheckKernel TrainingGuard::check_kernel(Kokkos::View<const float, MemSpace> loss,
                                                       Kokkos::View<const double, MemSpace> grad_norm,
                                                       Kokkos::View<const float, MemSpace> lr) {
  // The post rides in the check's thread (one launch, not two). It runs after step_ has counted
  // up, so every post_every-th check posts its record.
  return CheckKernel{verdict_kernel(loss, grad_norm, lr), box_.poster(step_, config_.post_every)};
}

kernels::GuardCheck<ExecSpace> TrainingGuard::verdict_kernel(Kokkos::View<const float, MemSpace> loss,
                                                              Kokkos::View<const double, MemSpace> grad_norm,
                                                              Kokkos::View<const float, MemSpace> lr) {
  ++checks_enqueued_;
  return kernels::make_guard_check<ExecSpace>(loss, grad_norm, lr, step_, box_.device(), skip_, config_);
}

void TrainingGuard::boundary(const ExecSpace& exec) {
  kernels::guard_boundary(exec, Kokkos::View<const std::int64_t, MemSpace>(step_), box_.device());
  box_.post(exec);
}

std::optional<GuardStatus> TrainingGuard::latest(std::int64_t checks_enqueued) const {
  const auto rec = box_.read();
  if (!rec) return std::nullopt;
  return decode(rec->seq, rec->value, checks_enqueued);
}

GuardStatus TrainingGuard::decode(std::int64_t seq, const kernels::GuardState& state, std::int64_t checks_enqueued) {
  const kernels::GuardVerdict& v = state.verdict;
  GuardStatus g;
  g.seq = seq;
  g.halt_nan = v.halt_nan != 0.0;
  g.halt_loss_clip = v.halt_loss_clip != 0.0;
  g.halt_grad_collapse = v.halt_grad_collapse != 0.0;
  g.clipped_loss = v.clipped_loss;
  g.raw_loss = v.raw_loss;
  g.raw_grad_norm = v.raw_grad_norm;
  g.step = as_count(v.step);
  g.steps_behind = checks_enqueued - 1 - g.step;
  g.running = totals_of(state.running);
  static_cast<GuardTotals&>(g.snapshot) = totals_of(state.snapshot);
  g.snapshot.boundary_step = as_count(state.boundary_step);
  return g;
}

}  // namespace zs
