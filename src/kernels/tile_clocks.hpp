// A tile's own clocks for the fused step's timeline (FusedOptions::timeline): the team's first
// thread stores its multiprocessor's cycle counter where the timeline keeps the tile's parts.
#pragma once
#include <cstdint>

#include "backends/backend.hpp"

namespace zs::kernels {

// clocks[i] = this multiprocessor's cycles, by the team's first thread; nothing when clocks is null.
template <class Member>
KOKKOS_FORCEINLINE_FUNCTION void stamp_cycles(const Member& team, std::uint64_t* clocks, int i) {
  if (clocks == nullptr || team.team_rank() != 0) return;
  Kokkos::single(Kokkos::PerThread(team), [&]() { clocks[i] = sm_cycles(); });
}

}  // namespace zs::kernels
