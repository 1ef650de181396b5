// Target-network hard update over the flat buffer: a copy every K applied updates, a no-op on a
// step the guard skipped; the step counter is read on the device, so one captured graph serves
// every step. Polyak averaging every step is fused into Adam's pass (kernels/adam.hpp).
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/grad_clip.hpp"  // detail::flat_block: the flat kernels' shared work split

namespace zs::kernels {

template <class Exec>
struct HardUpdate {
  Kokkos::View<float*, typename Exec::memory_space> target;
  Kokkos::View<const float*, typename Exec::memory_space> online;
  Kokkos::View<const std::int64_t, typename Exec::memory_space> step;
  Kokkos::View<const int, typename Exec::memory_space> skip;
  std::int64_t period;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    if (skip() != 0) return;
    const std::int64_t s = step();
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

// Enqueues a copy of online into target when `step` is a positive multiple of `period`
// (K), unless `skip` is set. `step` counts applied updates, 1-based, like Adam's t: it is 1
// after the first update, so with K = 3 the copies follow updates 3, 6, 9, … and step 0 (no
// update yet) never copies. Keep the counter still on skipped steps (as Adam's t is), so a
// skipped step neither copies nor shifts the period.
template <class Exec>
void hard_update(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> target,
                 Kokkos::View<const float*, typename Exec::memory_space> online,
                 Kokkos::View<const std::int64_t, typename Exec::memory_space> step,
                 Kokkos::View<const int, typename Exec::memory_space> skip,
                 const std::int64_t period) {
  detail::check_target_shapes("hard_update", target, online);
  require(period >= 1, "hard_update: period K = ", period, " is invalid; expected K >= 1");
  Kokkos::parallel_for(
      "zs::hard_update", detail::flat_policy(exec, target.extent(0)),
      HardUpdate<Exec>{target, online, step, skip, period});
}

}  // namespace zs::kernels
