// Target-network hard update over the flat buffer: a copy every K applied updates, a no-op on a
// step the guard skipped; Adam's step count t is read on the device, so one captured graph
// serves every step. Polyak averaging every step is fused into Adam's pass (kernels/adam.hpp).
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/adam.hpp"  // Adam's state (t), and detail::flat_range: the flat kernels' work split

namespace zs::kernels {

template <class Exec>
struct HardUpdate {
  Kokkos::View<float*, typename Exec::memory_space> target;
  Kokkos::View<const float*, typename Exec::memory_space> online;
  Kokkos::View<const double*, typename Exec::memory_space> adam_state;
  Kokkos::View<const int, typename Exec::memory_space> skip;
  std::int64_t period;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    if (skip() != 0) return;
    const std::int64_t s = static_cast<std::int64_t>(adam_state(kAdamT));
    if (s <= 0 || s % period != 0) return;
    std::int64_t begin, end;
    detail::flat_range<Exec>(item, target.extent(0), begin, end);
    for (std::int64_t i = begin; i < end; ++i) target(i) = online(i);
  }
};

namespace detail {

template <class A, class B>
void check_target_shapes(const char* who, const A& target, const B& online) {
  require(target.extent(0) == online.extent(0), who, ": target has ", target.extent(0),
          " elements but online has ", online.extent(0), "; expected the same length");
  require(target.extent(0) > 0, who, ": the buffers are empty (0 elements); expected at least 1");
}

}  // namespace detail

// Enqueues a copy of online into target when Adam's t (the applied updates, 1-based: 1 after
// the first update) is a positive multiple of `period` (K), unless `skip` is set: with K = 3 the
// copies follow updates 3, 6, 9, … and t = 0 (no update yet) never copies. t stands still on
// skipped steps, so a skipped step neither copies nor shifts the period. Run it after the Adam
// update of the same step.
template <class Exec>
void hard_update(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> target,
                 Kokkos::View<const float*, typename Exec::memory_space> online,
                 Kokkos::View<const double*, typename Exec::memory_space> adam_state,
                 Kokkos::View<const int, typename Exec::memory_space> skip,
                 const std::int64_t period) {
  detail::check_target_shapes("hard_update", target, online);
  detail::check_adam_state("hard_update", adam_state);
  require(period >= 1, "hard_update: period K = ", period, " is invalid; expected K >= 1");
  Kokkos::parallel_for(
      "zs::hard_update", detail::flat_policy(exec, target.extent(0)),
      HardUpdate<Exec>{target, online, adam_state, skip, period});
}

}  // namespace zs::kernels
