// N running sums of doubles as one value, so that one team reduction adds them all (Kokkos::Sum
// over it): the spectral norm's independent lanes on the host, the fused step's norms added at once.
#pragma once

#include "backends/backend.hpp"

namespace zs::kernels {

template <int N>
struct DoubleSums {
  double s[N];
  KOKKOS_INLINE_FUNCTION DoubleSums& operator+=(const DoubleSums& o) {
    for (int j = 0; j < N; ++j) s[j] += o.s[j];
    return *this;
  }
  // Kokkos 3.4's team reductions add through volatile references.
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile DoubleSums& o) volatile {
    for (int j = 0; j < N; ++j) s[j] += o.s[j];
  }
};

}  // namespace zs::kernels

namespace Kokkos {
// Kokkos::Sum over DoubleSums starts from all zeros.
template <int N>
struct reduction_identity<zs::kernels::DoubleSums<N>> {
  KOKKOS_FORCEINLINE_FUNCTION static zs::kernels::DoubleSums<N> sum() { return zs::kernels::DoubleSums<N>{}; }
};
}  // namespace Kokkos
