// Kokkos::Cuda::fence() (exec.fence(), stream.synchronize()), reported to the tools
// (fence_events.hpp says why and how). Capture refuses the fence anyway; reported, the
// SyncWatch around the capture can say that it was a fence.
#include "backends/fence_events.hpp"

#if KOKKOS_VERSION < 30500

namespace zs::fence_events {

void real_cuda_fence(const Kokkos::Cuda* self) asm("__real__ZNK6Kokkos4Cuda5fenceEv");
void cuda_fence(const Kokkos::Cuda* self) asm("__wrap__ZNK6Kokkos4Cuda5fenceEv");
void cuda_fence(const Kokkos::Cuda* self) {
  reported_fence("Kokkos::Cuda::fence()", [self] { real_cuda_fence(self); });
}

}  // namespace zs::fence_events

#endif
