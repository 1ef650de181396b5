// Small device-safe helpers shared by the kernels: the same code on CUDA and on the host.
#pragma once
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace zs::kernels {

// Bit test, not x == x: immune to fast-math folding, and callable in device code.
KOKKOS_INLINE_FUNCTION bool is_finite(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7f800000u) != 0x7f800000u;
}
KOKKOS_INLINE_FUNCTION bool is_finite(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

}  // namespace zs::kernels
