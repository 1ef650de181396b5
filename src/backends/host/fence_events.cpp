// Kokkos::OpenMP::fence() (exec.fence(), stream.synchronize(), a parallel_reduce into a host
// scalar), reported to the tools (fence_events.hpp says why and how). Kokkos::Serial::fence()
// is inline and cannot be reached this way; the step runs on the OpenMP instance.
#include "backends/fence_events.hpp"

#if KOKKOS_VERSION < 30500 && defined(KOKKOS_ENABLE_OPENMP)

namespace zs::fence_events {

void real_openmp_fence(const Kokkos::OpenMP* self) asm("__real__ZNK6Kokkos6OpenMP5fenceEv");
void openmp_fence(const Kokkos::OpenMP* self) asm("__wrap__ZNK6Kokkos6OpenMP5fenceEv");
void openmp_fence(const Kokkos::OpenMP* self) {
  reported_fence("Kokkos::OpenMP::fence()", [self] { real_openmp_fence(self); });
}

}  // namespace zs::fence_events

#endif
