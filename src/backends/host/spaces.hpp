// Host backend (OpenMP or Serial): device and "pinned" memory are both plain host memory.
#pragma once
#include <Kokkos_Core.hpp>
#include <atomic>

namespace zs {
using ExecSpace = Kokkos::DefaultHostExecutionSpace;
using MemSpace = Kokkos::HostSpace;
using PinnedSpace = Kokkos::HostSpace;
inline constexpr const char* kBackendName = "openmp";
// On the host a team is one thread: the parallelism is across samples.
inline constexpr int kAtomTeam = 1;

KOKKOS_INLINE_FUNCTION void system_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// Host launches run in order: nothing to wait for.
KOKKOS_INLINE_FUNCTION void wait_for_prior_grids() {}
}  // namespace zs
