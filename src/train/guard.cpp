#include "train/guard.hpp"

#include <limits>
#include <utility>

namespace zs {

namespace {

const GuardConfig& validated(const GuardConfig& c) {
  c.validate();
  return c;
}

std::int64_t as_count(double x) { return static_cast<std::int64_t>(x); }

}  // namespace

double GuardTotals::mean_loss() const {
  return steps > 0 ? loss_sum / double(steps) : std::numeric_limits<double>::quiet_NaN();
}
double GuardTotals::mean_grad_norm() const {
  return steps > 0 ? grad_norm_sum / double(steps) : std::numeric_limits<double>::quiet_NaN();
}

TrainingGuard::TrainingGuard(const GuardConfig& config)
    : config_(validated(config)),
      state_("zs::guard::state", state_size),
      record_(Kokkos::subview(state_, std::make_pair(record_offset, totals_offset))),
      totals_(Kokkos::subview(state_, std::make_pair(totals_offset, snapshot_offset))),
      snapshot_(Kokkos::subview(state_, std::make_pair(snapshot_offset, state_size))),
      step_("zs::guard::step"),
      skip_("zs::guard::skip"),
      mailbox_(state_size) {
  initialise();
}

void TrainingGuard::reset() {
  Kokkos::fence();  // work in flight may still read or write the state
  initialise();
  // Posted, so latest() shows the reset state instead of the last record before it.
  const ExecSpace exec;
  mailbox_.post(exec, state_);
  Kokkos::fence();
}

void TrainingGuard::initialise() {
  // "Nothing yet" markers, so a post before the first check or boundary decodes honestly.
  auto h = Kokkos::create_mirror_view(state_);
  for (int i = 0; i < state_size; ++i) h(i) = 0.0;
  h(record_offset + kernels::guard_record::step) = -1.0;
  h(snapshot_offset + kernels::guard_snapshot::boundary_step) = -1.0;
  Kokkos::deep_copy(state_, h);
  Kokkos::deep_copy(step_, std::int64_t{0});
  Kokkos::deep_copy(skip_, 0);
  checks_enqueued_ = 0;
}

void TrainingGuard::check(const ExecSpace& exec, Kokkos::View<const float, MemSpace> loss,
                          Kokkos::View<const double, MemSpace> grad_norm,
                          Kokkos::View<const float, MemSpace> lr) {
  // The post rides in the check's thread (one launch, not two). It runs after step_ has counted
  // up, so every post_every-th check posts its record.
  using CheckThenPost = kernels::GuardCheckThen<ExecSpace, kernels::MailboxPost<ExecSpace>>;
  Kokkos::parallel_for(
      "zs::guard_check", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
      CheckThenPost{kernels::make_guard_check<ExecSpace>(loss, grad_norm, lr, step_, record_, totals_, skip_, config_),
                    mailbox_.poster(state_, step_, config_.post_every)});
  ++checks_enqueued_;
}

void TrainingGuard::boundary(const ExecSpace& exec) {
  kernels::guard_boundary(exec, Kokkos::View<const std::int64_t, MemSpace>(step_), totals_,
                          snapshot_);
  mailbox_.post(exec, state_);
}

std::optional<GuardStatus> TrainingGuard::latest(std::int64_t checks_enqueued) const {
  const auto rec = mailbox_.read();
  if (!rec) return std::nullopt;
  return decode(rec->seq, rec->values.data(), checks_enqueued);
}

GuardStatus TrainingGuard::decode(std::int64_t seq, const double* state,
                                  std::int64_t checks_enqueued) {
  namespace r = kernels::guard_record;
  namespace t = kernels::guard_totals;
  namespace s = kernels::guard_snapshot;
  const double* rec = state + record_offset;
  const double* tot = state + totals_offset;
  const double* snap = state + snapshot_offset;
  GuardStatus g;
  g.seq = seq;
  g.halt_nan = rec[r::halt_nan] != 0.0;
  g.halt_loss_clip = rec[r::halt_loss_clip] != 0.0;
  g.halt_grad_collapse = rec[r::halt_grad_collapse] != 0.0;
  g.clipped_loss = rec[r::clipped_loss];
  g.raw_loss = rec[r::raw_loss];
  g.raw_grad_norm = rec[r::raw_grad_norm];
  g.step = as_count(rec[r::step]);
  g.steps_behind = checks_enqueued - 1 - g.step;
  g.running.loss_sum = tot[t::loss_sum];
  g.running.grad_norm_sum = tot[t::grad_norm_sum];
  g.running.steps = as_count(tot[t::steps]);
  g.running.skipped = as_count(tot[t::skipped]);
  g.snapshot.loss_sum = snap[s::loss_sum];
  g.snapshot.grad_norm_sum = snap[s::grad_norm_sum];
  g.snapshot.steps = as_count(snap[s::steps]);
  g.snapshot.skipped = as_count(snap[s::skipped]);
  g.snapshot.boundary_step = as_count(snap[s::boundary_step]);
  return g;
}

}  // namespace zs
