// The training guard on the device: NaN/Inf, loss-clip and grad-collapse predicates, a skip flag
// that the optimizer reads, and running loss/grad-norm sums, all in one single-thread launch per
// step; plus a boundary launch that snapshots and resets the sums.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "core/guard_config.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

// One step's verdict. Every record that crosses the mailbox is a struct of doubles like this one
// (a step index stays exact up to 2^53): kernels write the fields, the host reads the same struct.
struct GuardVerdict {
  double halt_nan = 0, halt_loss_clip = 0, halt_grad_collapse = 0;
  double clipped_loss = 0, raw_loss = 0, raw_grad_norm = 0;
  double step = -1;  // the step index the verdict belongs to; −1: no check has run yet
};

// Sums over clean (not skipped) steps, and the count of skipped ones.
struct GuardSums {
  double loss_sum = 0, grad_norm_sum = 0, steps = 0, skipped = 0;
};

// The whole device state of the guard, which is also its mailbox record.
struct GuardState {
  GuardVerdict verdict;
  GuardSums running;          // since the last boundary
  GuardSums snapshot;         // as they were at the last boundary
  double boundary_step = -1;  // the step counter at that boundary; −1: no boundary yet
};

template <class Exec>
struct GuardCheck {
  using mem = typename Exec::memory_space;
  Kokkos::View<const float, mem> loss;
  Kokkos::View<const double, mem> grad_norm;
  Kokkos::View<const float, mem> lr;
  Kokkos::View<std::int64_t, mem> step;
  Kokkos::View<GuardState, mem> state;
  Kokkos::View<int, mem> skip;
  GuardConfig limits;

  // Every load before the first store: the compiler cannot tell the Views apart, so a load after
  // a store would wait for it, and this one thread is the end of the fused step's last phase.
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    const double l = loss();
    const double g = grad_norm();
    const std::int64_t s = step();
    const double rate = double(lr());
    GuardState& st = state();
    GuardSums run = st.running;
    const bool finite = is_finite(l) && is_finite(g);
    // Each flag is its own predicate: +Inf loss sets halt_nan and halt_loss_clip both.
    const bool clip = l > limits.loss_clip;
    // A non-finite norm is halt_nan's business, never a collapse.
    const bool collapse = finite && s >= limits.warmup_steps && g < rate * limits.collapse_multiplier;
    const bool skipped = !finite || clip;

    st.verdict.halt_nan = finite ? 0.0 : 1.0;
    st.verdict.halt_loss_clip = clip ? 1.0 : 0.0;
    st.verdict.halt_grad_collapse = collapse ? 1.0 : 0.0;
    st.verdict.clipped_loss = clip ? limits.loss_clip : l;
    st.verdict.raw_loss = l;
    st.verdict.raw_grad_norm = g;
    st.verdict.step = double(s);
    skip() = skipped ? 1 : 0;

    if (skipped) {
      run.skipped += 1.0;
    } else {
      run.loss_sum += l;
      run.grad_norm_sum += g;
      run.steps += 1.0;
    }
    st.running = run;
    step() = s + 1;
  }
};

template <class Exec>
struct GuardBoundary {
  using mem = typename Exec::memory_space;
  Kokkos::View<const std::int64_t, mem> step;
  Kokkos::View<GuardState, mem> state;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    GuardState& st = state();
    st.snapshot = st.running;
    st.boundary_step = double(step());
    st.running = GuardSums{};
  }
};

namespace guard_detail {
template <class View>
void require_allocated(const View& v, const char* who, const char* name) {
  require(v.data() != nullptr, who, ": ", name, " is not allocated; expected a device view");
}
}  // namespace guard_detail

// The check's functor, its arguments validated: reads loss, grad_norm, lr and the step counter,
// writes the verdict, skip (1 = skip this update) and the running sums; the step counter then
// counts up by one.
template <class Exec>
GuardCheck<Exec> make_guard_check(Kokkos::View<const float, typename Exec::memory_space> loss,
                                  Kokkos::View<const double, typename Exec::memory_space> grad_norm,
                                  Kokkos::View<const float, typename Exec::memory_space> lr,
                                  Kokkos::View<std::int64_t, typename Exec::memory_space> step,
                                  Kokkos::View<GuardState, typename Exec::memory_space> state,
                                  Kokkos::View<int, typename Exec::memory_space> skip,
                                  const GuardConfig& limits) {
  constexpr const char* who = "guard_check";
  guard_detail::require_allocated(loss, who, "loss");
  guard_detail::require_allocated(grad_norm, who, "grad_norm");
  guard_detail::require_allocated(lr, who, "lr");
  guard_detail::require_allocated(step, who, "step");
  guard_detail::require_allocated(state, who, "state");
  guard_detail::require_allocated(skip, who, "skip");
  return GuardCheck<Exec>{loss, grad_norm, lr, step, state, skip, limits};
}

// Enqueues one guard check (make_guard_check) on `exec`. No fence.
template <class Exec>
void guard_check(const Exec& exec, Kokkos::View<const float, typename Exec::memory_space> loss,
                 Kokkos::View<const double, typename Exec::memory_space> grad_norm,
                 Kokkos::View<const float, typename Exec::memory_space> lr,
                 Kokkos::View<std::int64_t, typename Exec::memory_space> step,
                 Kokkos::View<GuardState, typename Exec::memory_space> state,
                 Kokkos::View<int, typename Exec::memory_space> skip, const GuardConfig& limits) {
  Kokkos::parallel_for("zs::guard_check", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       make_guard_check<Exec>(loss, grad_norm, lr, step, state, skip, limits));
}

// Enqueues the boundary on `exec`: the running sums and the step counter into the snapshot, then
// the running sums to zero. No fence.
template <class Exec>
void guard_boundary(const Exec& exec, Kokkos::View<const std::int64_t, typename Exec::memory_space> step,
                    Kokkos::View<GuardState, typename Exec::memory_space> state) {
  constexpr const char* who = "guard_boundary";
  guard_detail::require_allocated(step, who, "step");
  guard_detail::require_allocated(state, who, "state");
  Kokkos::parallel_for("zs::guard_boundary", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       GuardBoundary<Exec>{step, state});
}

}  // namespace zs::kernels
