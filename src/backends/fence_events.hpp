// Kokkos 3.4 has a tools slot for fences but never calls it, so a fence inside a graph body
// would reach no tool, and the SyncWatch could not see it. The linker sends calls to
// Kokkos::fence() and to the backend's execution-space fence here instead (--wrap, set in
// CMakeLists.txt, only for Kokkos before 3.5): global_fence.cpp and <backend>/fence_events.cpp
// report each fence to the tools around the real one, as Kokkos 3.5 and later do themselves.
#pragma once
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace zs::fence_events {

template <class Fence>
void reported_fence(const char* name, const Fence& fence) {
  if (!Kokkos::Tools::profileLibraryLoaded()) return fence();
  std::uint64_t handle = 0;
  Kokkos::Tools::beginFence(name, 0, &handle);
  fence();
  Kokkos::Tools::endFence(handle);
}

}  // namespace zs::fence_events
