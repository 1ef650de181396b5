// Global L2 norm of the flat gradient buffer, for the guard and for clipping.
// Accumulates in double: a ~200 K-term sum of squares in float loses digits that the
// grad-collapse threshold (lr × multiplier) can care about, and double costs nothing here.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/backend.hpp"
#include "error.hpp"

namespace zs::kernels {

template <class Exec>
struct SumOfSquaresSqrt {
  using value_type = double;
  Kokkos::View<const float*, typename Exec::memory_space> grad;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i, double& acc) const {
    const double x = grad(i);
    acc += x * x;
  }
  // Runs once on the reduced value: the norm is ready in the result without another launch.
  KOKKOS_INLINE_FUNCTION void final(double& acc) const { acc = ::sqrt(acc); }
};

// Enqueues ‖grad‖₂ into `norm` (a rank-0 device view of double) on `exec`. No fence.
// NaN or ±Inf anywhere in `grad` gives a NaN or +Inf norm, which the guard catches.
template <class Exec, class NormView>
void global_grad_norm(const Exec& exec, Kokkos::View<const float*, typename Exec::memory_space> grad,
                      const NormView& norm) {
  static_assert(Kokkos::is_view<NormView>::value && NormView::rank == 0,
                "global_grad_norm: the result must be a rank-0 Kokkos::View<double>");
  static_assert(std::is_same<typename NormView::non_const_value_type, double>::value,
                "global_grad_norm: the result must hold a double");
  require(grad.extent(0) > 0, "global_grad_norm: the gradient buffer is empty (0 elements); "
                              "expected at least 1");
  Kokkos::parallel_reduce(
      "zs::grad_norm",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, grad.extent(0)),
      SumOfSquaresSqrt<Exec>{grad}, norm);
}

}  // namespace zs::kernels
