// The one place that says which backend is compiled in. Everything above src/backends/ uses
// zs::ExecSpace, zs::MemSpace and zs::PinnedSpace and never tests a KOKKOS_ENABLE_* macro.
#pragma once
#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include "backends/cuda/spaces.hpp"
#else
#include "backends/host/spaces.hpp"
#endif

// Unrolls the loop that follows in device code, where register arrays must be indexed by
// constants to stay in registers; nothing on the host compiler.
#if defined(__CUDA_ARCH__)
#define ZS_UNROLL _Pragma("unroll")
#else
#define ZS_UNROLL
#endif

namespace zs {

using DeviceFloats = Kokkos::View<float*, MemSpace>;
using ConstDeviceFloats = Kokkos::View<const float*, MemSpace>;
template <class T>
using DeviceScalar = Kokkos::View<T, MemSpace>;

}  // namespace zs
