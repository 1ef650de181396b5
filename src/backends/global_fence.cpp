// Kokkos::fence(), reported to the tools (fence_events.hpp says why and how).
#include "backends/fence_events.hpp"

#if KOKKOS_VERSION < 30500

namespace zs::fence_events {

void real_global_fence() asm("__real__ZN6Kokkos5fenceEv");
void global_fence() asm("__wrap__ZN6Kokkos5fenceEv");
void global_fence() { reported_fence("Kokkos::fence()", [] { real_global_fence(); }); }

}  // namespace zs::fence_events

#endif
