// A tile's own clocks for the fused step's timeline (FusedOptions::timeline): the team's first
// thread stores its multiprocessor's cycle counter where the timeline keeps the tile's parts.
#pragma once
#include <cstdint>

#include "backends/backend.hpp"

namespace zs::kernels {

// *at = v, by the team's first thread: a store at once, so that no clock stays in a register
// across the tile.
template <class Member>
KOKKOS_FORCEINLINE_FUNCTION void store_clock(const Member& team, std::uint64_t* at, std::uint64_t v) {
  if (team.team_rank() != 0) return;
  Kokkos::single(Kokkos::PerThread(team), [&]() { *at = v; });
}

// clocks[i] = this multiprocessor's cycles, by the team's first thread; nothing when clocks is null.
template <class Member>
KOKKOS_FORCEINLINE_FUNCTION void stamp_cycles(const Member& team, std::uint64_t* clocks, int i) {
  if (clocks != nullptr) store_clock(team, clocks + i, sm_cycles());
}

}  // namespace zs::kernels
