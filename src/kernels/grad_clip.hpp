// Gradient-norm clipping against a budgeted limit (limit = budget fraction × max_grad_norm): the
// clip coefficient, computed on the device from the device norm so nothing reads back, and the
// work split of the flat elementwise kernels (Adam, the budgeted sum, the target update). The
// kernels that apply the coefficient are adam.hpp (C51's scale, in adam_prepare) and
// budget_sum.hpp (each auxiliary's).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

namespace detail {

// Elements per work item of the flat elementwise kernels (clip, Adam, target update). A GPU
// thread takes one. A host thread takes a block, so the per-step scalars read from device
// views (skip, scale, lr, step) are loaded and turned into coefficients once per block and the
// inner loop can vectorise; per element they would be reloaded every iteration, since a float
// store may alias them.
template <class Exec>
KOKKOS_INLINE_FUNCTION constexpr std::int64_t flat_block() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible
             ? 2048
             : 1;
}

template <class Exec>
Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>> flat_policy(const Exec& exec,
                                                                       const std::size_t n) {
  const auto b = flat_block<Exec>();
  return Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
      exec, 0, (static_cast<std::int64_t>(n) + b - 1) / b);
}

// [begin, end) of work item `item` over n elements.
template <class Exec>
KOKKOS_INLINE_FUNCTION void flat_range(const std::int64_t item, const std::size_t n,
                                       std::int64_t& begin, std::int64_t& end) {
  constexpr std::int64_t b = flat_block<Exec>();
  begin = item * b;
  const std::int64_t last = begin + b, size = static_cast<std::int64_t>(n);
  end = last < size ? last : size;
}

}  // namespace detail

// Matches torch.nn.utils.clip_grad_norm_: a norm of exactly `limit` is scaled by slightly
// under 1, and a zero norm does not divide by zero.
constexpr double kClipNormEpsilon = 1e-6;

// min(1, limit / (norm + 1e-6)), or 0 when the norm is NaN/Inf: a poisoned gradient must never
// reach the parameters, even if a caller ignores the guard's skip flag.
KOKKOS_INLINE_FUNCTION double clip_coefficient(const double norm, const double limit) {
  if (!is_finite(norm)) return 0.0;
  const double c = limit / (norm + kClipNormEpsilon);
  return c < 1.0 ? c : 1.0;
}

namespace detail {

inline void check_limit(const char* who, const float limit) {
  require(std::isfinite(limit) && limit >= 0.f, who, ": limit = ", limit,
          " is invalid; expected a finite value >= 0 (budget fraction x max_grad_norm)");
}

}  // namespace detail

}  // namespace zs::kernels
