// Global L2 norm of the flat gradient buffer, for the guard and for clipping.
// Accumulates in double: a ~200 K-term sum of squares in float loses digits that the
// grad-collapse threshold (lr × multiplier) can care about, and double costs nothing here.
#pragma once
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

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

// The norms of several gradient buffers of one length (C51's and each auxiliary's, all laid out
// as the whole parameter buffer) in one launch instead of one each: out[b] = ‖g[b]‖₂.
inline constexpr int kMaxNorms = 4;

template <class Exec>
struct SumsOfSquaresSqrt {
  using MS = typename Exec::memory_space;
  using value_type = double[];
  unsigned value_count = 0;
  Kokkos::View<const float*, MS> g[kMaxNorms];
  Kokkos::View<double, MS> out[kMaxNorms];

  KOKKOS_INLINE_FUNCTION void init(double* acc) const {
    for (unsigned b = 0; b < value_count; ++b) acc[b] = 0.0;
  }
  KOKKOS_INLINE_FUNCTION void join(volatile double* dst, const volatile double* src) const {
    for (unsigned b = 0; b < value_count; ++b) dst[b] += src[b];
  }
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i, double* acc) const {
    for (unsigned b = 0; b < value_count; ++b) {
      const double x = g[b](i);
      acc[b] += x * x;
    }
  }
  // Runs once, on the device, on the reduced sums: each norm lands in its own scalar.
  KOKKOS_INLINE_FUNCTION void final(double* acc) const {
    for (unsigned b = 0; b < value_count; ++b) {
      acc[b] = ::sqrt(acc[b]);
      out[b]() = acc[b];
    }
  }
};

// Enqueues out[b] = ‖grads[b]‖₂ for every b; `sums` ([≥ count] device doubles) is the
// reduction's own result. No fence.
template <class Exec>
void grad_norms(const Exec& exec, const std::vector<Kokkos::View<const float*, typename Exec::memory_space>>& grads,
                const std::vector<Kokkos::View<double, typename Exec::memory_space>>& out,
                const Kokkos::View<double*, typename Exec::memory_space>& sums) {
  require(!grads.empty() && grads.size() <= static_cast<std::size_t>(kMaxNorms) && out.size() == grads.size() &&
              sums.extent(0) >= grads.size(),
          "grad_norms: ", grads.size(), " buffers, ", out.size(), " results and ", sums.extent(0),
          " sums; expected 1 to ", kMaxNorms, " buffers with a result and a sum each");
  SumsOfSquaresSqrt<Exec> f;
  f.value_count = static_cast<unsigned>(grads.size());
  for (std::size_t b = 0; b < grads.size(); ++b) {
    require(grads[b].extent(0) == grads[0].extent(0) && grads[b].extent(0) > 0, "grad_norms: buffer ", b, " holds ",
            grads[b].extent(0), " floats; expected ", grads[0].extent(0), " like buffer 0, at least 1");
    f.g[b] = grads[b];
    f.out[b] = out[b];
  }
  Kokkos::parallel_reduce("zs::grad_norms",
                          Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, grads[0].extent(0)), f,
                          Kokkos::subview(sums, std::make_pair(std::size_t{0}, grads.size())));
}

}  // namespace zs::kernels
