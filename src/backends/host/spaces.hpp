// Host backend (OpenMP or Serial): device and "pinned" memory are both plain host memory.
#pragma once
#include <Kokkos_Core.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace zs {
using ExecSpace = Kokkos::DefaultHostExecutionSpace;
using MemSpace = Kokkos::HostSpace;
using PinnedSpace = Kokkos::HostSpace;
inline constexpr const char* kBackendName = "openmp";
// On the host a team is one thread: the parallelism is across samples.
inline constexpr int kAtomTeam = 1;
// The bias added by each core to the rows it has just multiplied lost to the GEMM batch and a
// bias pass on a 2-core host (BM_StepFusedBias at B = 256: 29.1 against 26.8 ms).
inline constexpr bool kBiasInProducts = false;
// The plans' padded output layers and stacked heads were measured on CUDA only: the host keeps
// the plain shapes.
inline constexpr bool kPaddedOutputs = false;
inline constexpr int kWideHeadsBatch = 1 << 30;
// The fused step's tiles run on the host's scalar loops, far slower than OpenBLAS: the host
// keeps the launch plans (TrainerOptions::fused_step), and runs the fused kernel in tests.
inline constexpr bool kFusedStep = false;
inline constexpr int kFusedMaxBatch = 1 << 30;
// OpenMP runs a league's teams on however many threads it has, in turns: a team waiting at a grid
// barrier could wait for one that never starts, so a phased kernel is one launch per phase.
inline constexpr bool kCanPersist = false;

KOKKOS_INLINE_FUNCTION void system_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// Host launches run in order: nothing to wait for.
KOKKOS_INLINE_FUNCTION void wait_for_prior_grids() {}
// Host launches run in order: no grid is scheduled early.
KOKKOS_INLINE_FUNCTION void allow_dependent_grids() {}
// The fused step's timeline clocks (see the CUDA backend): one steady clock for both, one
// "multiprocessor".
inline std::uint64_t global_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
inline std::uint64_t sm_cycles() { return global_ns(); }
inline int sm_index() { return 0; }
}  // namespace zs
