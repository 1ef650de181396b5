// The one place that says which backend is compiled in. Everything above src/backends/ uses
// zs::ExecSpace, zs::MemSpace and zs::PinnedSpace and never tests a KOKKOS_ENABLE_* macro.
#pragma once
#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include "backends/cuda/spaces.hpp"
#else
#include "backends/host/spaces.hpp"
#endif

namespace zs {

using DeviceFloats = Kokkos::View<float*, MemSpace>;
using ConstDeviceFloats = Kokkos::View<const float*, MemSpace>;
template <class T>
using DeviceScalar = Kokkos::View<T, MemSpace>;

}  // namespace zs
