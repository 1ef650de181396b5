// Training guard (seed 003): NaN/Inf, loss-clip and grad-collapse predicates on the device, a
// skip flag that Adam and the target update read, and running loss/grad-norm sums, all in one
// single-thread launch per step; plus a boundary launch that snapshots and resets the sums.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "core/guard_config.hpp"
#include "kernels/math.hpp"

namespace zs {

namespace kernels {

// Slots of the guard record (doubles: a step index stays exact up to 2^53). Slot names are
// enumerators, not constexpr ints: View::operator() takes indices by reference, and nvcc rejects
// that use of a host variable in device code.
namespace guard_record {
enum : int {
  halt_nan = 0,
  halt_loss_clip = 1,
  halt_grad_collapse = 2,
  clipped_loss = 3,
  raw_loss = 4,
  raw_grad_norm = 5,
  reserved = 6,
  step = 7,
  size = 8,
};
}  // namespace guard_record

// Running sums since the last boundary. Only clean (not skipped) steps enter the sums.
namespace guard_totals {
enum : int {
  loss_sum = 0,
  grad_norm_sum = 1,
  steps = 2,
  skipped = 3,
  size = 4,
};
}  // namespace guard_totals

// The totals as they were at the last boundary, and the step counter at that moment (the index
// of the first step after the boundary). boundary_step < 0 means no boundary yet.
namespace guard_snapshot {
enum : int {
  loss_sum = 0,
  grad_norm_sum = 1,
  steps = 2,
  skipped = 3,
  boundary_step = 4,
  size = 5,
};
}  // namespace guard_snapshot

template <class Exec>
struct GuardCheck {
  using mem = typename Exec::memory_space;
  Kokkos::View<const float, mem> loss;
  Kokkos::View<const double, mem> grad_norm;
  Kokkos::View<const float, mem> lr;
  Kokkos::View<std::int64_t, mem> step;
  Kokkos::View<double*, mem> record;
  Kokkos::View<double*, mem> totals;
  Kokkos::View<int, mem> skip;
  double loss_clip;
  double collapse_multiplier;
  std::int64_t warmup_steps;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    const double l = loss();
    const double g = grad_norm();
    const std::int64_t s = step();
    const bool finite = is_finite(l) && is_finite(g);
    // Each flag is its own predicate: +Inf loss sets halt_nan and halt_loss_clip both.
    const bool clip = l > loss_clip;
    // A non-finite norm is halt_nan's business, never a collapse.
    const bool collapse = finite && s >= warmup_steps && g < double(lr()) * collapse_multiplier;
    const bool skipped = !finite || clip;

    record(guard_record::halt_nan) = finite ? 0.0 : 1.0;
    record(guard_record::halt_loss_clip) = clip ? 1.0 : 0.0;
    record(guard_record::halt_grad_collapse) = collapse ? 1.0 : 0.0;
    record(guard_record::clipped_loss) = clip ? loss_clip : l;
    record(guard_record::raw_loss) = l;
    record(guard_record::raw_grad_norm) = g;
    record(guard_record::reserved) = 0.0;
    record(guard_record::step) = double(s);
    skip() = skipped ? 1 : 0;

    if (skipped) {
      totals(guard_totals::skipped) += 1.0;
    } else {
      totals(guard_totals::loss_sum) += l;
      totals(guard_totals::grad_norm_sum) += g;
      totals(guard_totals::steps) += 1.0;
    }
    step() = s + 1;
  }
};

template <class Exec>
struct GuardBoundary {
  using mem = typename Exec::memory_space;
  Kokkos::View<const std::int64_t, mem> step;
  Kokkos::View<double*, mem> totals;
  Kokkos::View<double*, mem> snapshot;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    snapshot(guard_snapshot::loss_sum) = totals(guard_totals::loss_sum);
    snapshot(guard_snapshot::grad_norm_sum) = totals(guard_totals::grad_norm_sum);
    snapshot(guard_snapshot::steps) = totals(guard_totals::steps);
    snapshot(guard_snapshot::skipped) = totals(guard_totals::skipped);
    snapshot(guard_snapshot::boundary_step) = double(step());
    for (int i = 0; i < guard_totals::size; ++i) totals(i) = 0.0;
  }
};

namespace guard_detail {
template <class View>
void require_allocated(const View& v, const char* who, const char* name) {
  require(v.data() != nullptr, who, ": ", name, " is not allocated; expected a device view");
}
template <class View>
void require_extent(const View& v, std::size_t expected, const char* who, const char* name) {
  require(v.extent(0) == expected, who, ": ", name, " has ", v.extent(0), " slots; expected ",
          expected);
}
}  // namespace guard_detail

// The check's functor, its arguments validated: reads loss, grad_norm, lr and the step counter,
// writes record [guard_record::size], skip (1 = skip this update) and adds to totals
// [guard_totals::size]; the step counter then counts up by one.
template <class Exec>
GuardCheck<Exec> make_guard_check(Kokkos::View<const float, typename Exec::memory_space> loss,
                                  Kokkos::View<const double, typename Exec::memory_space> grad_norm,
                                  Kokkos::View<const float, typename Exec::memory_space> lr,
                                  Kokkos::View<std::int64_t, typename Exec::memory_space> step,
                                  Kokkos::View<double*, typename Exec::memory_space> record,
                                  Kokkos::View<double*, typename Exec::memory_space> totals,
                                  Kokkos::View<int, typename Exec::memory_space> skip,
                                  const GuardConfig& config) {
  constexpr const char* who = "guard_check";
  config.validate();
  guard_detail::require_allocated(loss, who, "loss");
  guard_detail::require_allocated(grad_norm, who, "grad_norm");
  guard_detail::require_allocated(lr, who, "lr");
  guard_detail::require_allocated(step, who, "step");
  guard_detail::require_allocated(skip, who, "skip");
  guard_detail::require_extent(record, guard_record::size, who, "record");
  guard_detail::require_extent(totals, guard_totals::size, who, "totals");
  return GuardCheck<Exec>{loss,           grad_norm, lr, step, record, totals, skip, config.loss_clip,
                          config.collapse_multiplier, config.warmup_steps};
}

// The check, then `After` in the same thread: a post of the record it just wrote costs a step
// graph no node of its own.
template <class Exec, class After>
struct GuardCheckThen {
  GuardCheck<Exec> check;
  After after;

  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    check(i);
    after(i);
  }
};

// Enqueues one guard check (make_guard_check) on `exec`. No fence.
template <class Exec>
void guard_check(const Exec& exec, Kokkos::View<const float, typename Exec::memory_space> loss,
                 Kokkos::View<const double, typename Exec::memory_space> grad_norm,
                 Kokkos::View<const float, typename Exec::memory_space> lr,
                 Kokkos::View<std::int64_t, typename Exec::memory_space> step,
                 Kokkos::View<double*, typename Exec::memory_space> record,
                 Kokkos::View<double*, typename Exec::memory_space> totals,
                 Kokkos::View<int, typename Exec::memory_space> skip, const GuardConfig& config) {
  Kokkos::parallel_for("zs::guard_check", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       make_guard_check<Exec>(loss, grad_norm, lr, step, record, totals, skip, config));
}

// Enqueues the boundary on `exec`: copies totals and the step counter into snapshot
// [guard_snapshot::size], then zeroes totals. No fence.
template <class Exec>
void guard_boundary(const Exec& exec, Kokkos::View<const std::int64_t, typename Exec::memory_space> step,
                    Kokkos::View<double*, typename Exec::memory_space> totals,
                    Kokkos::View<double*, typename Exec::memory_space> snapshot) {
  constexpr const char* who = "guard_boundary";
  guard_detail::require_allocated(step, who, "step");
  guard_detail::require_extent(totals, guard_totals::size, who, "totals");
  guard_detail::require_extent(snapshot, guard_snapshot::size, who, "snapshot");
  Kokkos::parallel_for("zs::guard_boundary", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       GuardBoundary<Exec>{step, totals, snapshot});
}

}  // namespace kernels
}  // namespace zs
