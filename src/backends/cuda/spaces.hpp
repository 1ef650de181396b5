// CUDA backend: device memory for the step, pinned host memory for the mailbox.
#pragma once
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace zs {
using ExecSpace = Kokkos::Cuda;
using MemSpace = Kokkos::CudaSpace;
// Pinned host memory: the step's stream stores into it without the host waiting.
using PinnedSpace = Kokkos::CudaHostPinnedSpace;
inline constexpr const char* kBackendName = "cuda";
// Threads of a team whose threads split one sample's atoms (51 by default): two warps.
inline constexpr int kAtomTeam = 64;
// A dense layer's bias and ReLU inside its product (cuBLASLt's epilogue) beat a product and a
// bias pass here: the H200 step 3.5 % faster at B = 256, 5.1 % at 4096 / 512 / 256.
inline constexpr bool kBiasInProducts = true;
// The launch plans' output layers computing rows padded to 16 bytes (TrainerOptions::
// padded_outputs) won at every batch measured: H100, BM_StepPlanOptions, medians of 3, 163.3 →
// 157.4 µs at B = 512 / 256 / 128, 283.0 → 279.7 at 1024 / 512 / 256, 682.3 → 655.2 at 4096.
inline constexpr bool kPaddedOutputs = true;
// From this batch on the plans also take heads_bias and stacked_heads (TrainerOptions::
// wide_heads_from): the two together with padded outputs 682.3 → 606.1 µs at B = 4096 / 512 /
// 256 on an H100; at 1024 and 512 each lost (283.0 → 310.2 together at 1024). 2048 unmeasured.
inline constexpr int kWideHeadsBatch = 4096;
// The C51 term's forward, loss and backward as one fused kernel a phase (TrainerOptions::
// fused_step) for batches up to kFusedMaxBatch. H200, graph replay (BM_StepFused, BM_Step):
// fused 114.8 µs against the plans' 126.4 at B = 256 (trunk 256, heads 128), 92 against 116 at
// B = 64; at B = 512 the plans win (154.5 against 168.1), at 1024 by 1.3× and at
// 4096 / 512 / 256 by 2.5× (cuBLAS's products).
inline constexpr bool kFusedStep = true;
inline constexpr int kFusedMaxBatch = 256;
// Every block of a launch can be kept resident (a league sized by persistent_grid_teams), so a
// phased kernel may run as one launch with grid barriers between its phases.
inline constexpr bool kCanPersist = true;

// Orders a thread's stores as seen by the host (PCIe/NVLink), not only by other GPU threads.
KOKKOS_INLINE_FUNCTION void system_fence() {
#if defined(__CUDA_ARCH__)
  __threadfence_system();
#endif
}
// Waits until the grids this one depends on through a programmatic edge of its graph have
// finished and their stores are visible (PTX griddepcontrol.wait); returns at once otherwise.
// The kernels wrapped in AfterPriorGrids call it first thing.
KOKKOS_INLINE_FUNCTION void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the grids that follow this one through a programmatic edge be scheduled once every block
// of this grid has called it or exited (PTX griddepcontrol.launch_dependents); their
// wait_for_prior_grids still waits for this grid to finish. Without it they are scheduled when
// every block has exited.
KOKKOS_INLINE_FUNCTION void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Clocks for the fused step's timeline (FusedOptions::timeline): the global nanosecond timer,
// comparable across multiprocessors but coarse; the multiprocessor's cycle counter, fine but its
// own; and which multiprocessor a block runs on.
KOKKOS_INLINE_FUNCTION std::uint64_t global_ns() {
#if defined(__CUDA_ARCH__)
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return 0;
#endif
}
KOKKOS_INLINE_FUNCTION std::uint64_t sm_cycles() {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(clock64());
#else
  return 0;
#endif
}
KOKKOS_INLINE_FUNCTION int sm_index() {
#if defined(__CUDA_ARCH__)
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return static_cast<int>(id);
#else
  return 0;
#endif
}
}  // namespace zs
