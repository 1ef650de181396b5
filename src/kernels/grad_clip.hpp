// Gradient-norm clipping against a budgeted limit (limit = budget fraction × max_grad_norm):
// the clip coefficient, the in-place scale of a flat buffer, and the auxiliaries' clipped SAXPY.
// Scales are computed on the device from the device norm, so nothing here reads back. C51's own
// clip scale is written by adam_prepare (kernels/adam.hpp), saving the step a launch.
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

template <class Exec>
struct ScaleInPlace {
  Kokkos::View<float*, typename Exec::memory_space> grad;
  Kokkos::View<const float, typename Exec::memory_space> scale;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const float s = scale();
    // The common unclipped case costs one scalar load, not a read and write of the buffer.
    if (s == 1.f) return;
    std::int64_t begin, end;
    detail::flat_range<Exec>(item, grad.extent(0), begin, end);
    if (s == 0.f) {
      // 0 × NaN is NaN: a zero scale (poisoned norm) writes clean zeros instead.
      for (std::int64_t i = begin; i < end; ++i) grad(i) = 0.f;
    } else {
      for (std::int64_t i = begin; i < end; ++i) grad(i) *= s;
    }
  }
};

template <class Exec>
struct ScaledCopy {
  Kokkos::View<float*, typename Exec::memory_space> dst;
  Kokkos::View<const float*, typename Exec::memory_space> src;
  Kokkos::View<const float, typename Exec::memory_space> scale;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const float s = scale();
    std::int64_t begin, end;
    detail::flat_range<Exec>(item, dst.extent(0), begin, end);
    if (s == 0.f) {
      for (std::int64_t i = begin; i < end; ++i) dst(i) = 0.f;  // 0 × NaN would be NaN
    } else {
      for (std::int64_t i = begin; i < end; ++i) dst(i) = s * src(i);
    }
  }
};

template <class Exec>
struct ClippedSaxpy {
  Kokkos::View<float*, typename Exec::memory_space> dst;
  Kokkos::View<const float*, typename Exec::memory_space> aux;
  Kokkos::View<const double, typename Exec::memory_space> aux_norm;
  double limit;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const float s = static_cast<float>(clip_coefficient(aux_norm(), limit));
    if (s == 0.f) return;  // poisoned auxiliary (or a zero budget): add nothing at all
    std::int64_t begin, end;
    detail::flat_range<Exec>(item, dst.extent(0), begin, end);
    for (std::int64_t i = begin; i < end; ++i) dst(i) += s * aux(i);
  }
};

namespace detail {

inline void check_limit(const char* who, const float limit) {
  require(std::isfinite(limit) && limit >= 0.f, who, ": limit = ", limit,
          " is invalid; expected a finite value >= 0 (budget fraction x max_grad_norm)");
}

}  // namespace detail

// Enqueues grad *= scale, elementwise. A scale of 1 leaves the buffer untouched; a scale of 0
// zeroes it (NaN/Inf included).
template <class Exec>
void scale_in_place(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> grad,
                    Kokkos::View<const float, typename Exec::memory_space> scale) {
  require(grad.extent(0) > 0, "scale_in_place: the gradient buffer is empty (0 elements); "
                              "expected at least 1");
  Kokkos::parallel_for("zs::scale_in_place", detail::flat_policy(exec, grad.extent(0)),
                       ScaleInPlace<Exec>{grad, scale});
}

// Enqueues dst = scale × src, elementwise (a scale of 0 writes zeros, NaN/Inf in src included):
// the start of a budgeted sum that leaves src (the raw gradient) as it was.
template <class Exec>
void scaled_copy(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> dst,
                 Kokkos::View<const float*, typename Exec::memory_space> src,
                 Kokkos::View<const float, typename Exec::memory_space> scale) {
  require(dst.extent(0) == src.extent(0) && dst.extent(0) > 0, "scaled_copy: dst has ", dst.extent(0),
          " elements and src ", src.extent(0), "; expected the same length, at least 1");
  Kokkos::parallel_for("zs::scaled_copy", detail::flat_policy(exec, dst.extent(0)), ScaledCopy<Exec>{dst, src, scale});
}

// Enqueues dst += min(1, limit / (‖aux‖ + 1e-6)) × aux: an auxiliary's gradient added into
// (a subrange of) the flat buffer, clipped to its own budget. `aux_norm` is ‖aux‖ on the
// device; when it is NaN/Inf nothing is added.
template <class Exec>
void clipped_saxpy(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> dst,
                   Kokkos::View<const float*, typename Exec::memory_space> aux,
                   Kokkos::View<const double, typename Exec::memory_space> aux_norm,
                   const float limit) {
  require(dst.extent(0) == aux.extent(0), "clipped_saxpy: dst has ", dst.extent(0),
          " elements but aux has ", aux.extent(0), "; expected the same length");
  require(dst.extent(0) > 0, "clipped_saxpy: dst and aux are empty (0 elements); "
                             "expected at least 1");
  detail::check_limit("clipped_saxpy", limit);
  Kokkos::parallel_for("zs::clipped_saxpy", detail::flat_policy(exec, dst.extent(0)),
                       ClippedSaxpy<Exec>{dst, aux, aux_norm, static_cast<double>(limit)});
}

// Slots of the auxiliaries' record (doubles), posted beside the guard's when any auxiliary is on.
enum BudgetSlot : int {
  kBudgetC51Norm, kBudgetC51Scale,
  kBudgetIqnLoss, kBudgetIqnNorm, kBudgetIqnScale,
  kBudgetEnsembleLoss, kBudgetEnsembleNorm, kBudgetEnsembleScale, kBudgetEnsembleSpread,
  kBudgetCqlLoss, kBudgetCqlNorm, kBudgetCqlScale,
  kBudgetStep,
  kBudgetSlots
};

// One thread gathers each loss's raw gradient norm and the clip coefficient its budget gives it
// (the same min(1, limit/(norm + 1e-6)) the step applies), plus the ensemble spread and the step
// index (the guard's counter − 1: this runs after the guard's check). An auxiliary that is off
// (empty views) reads NaN.
template <class Exec>
struct BudgetRecord {
  using MS = typename Exec::memory_space;
  Kokkos::View<double*, MS> record;  // [kBudgetSlots]
  Kokkos::View<const double, MS> c51_norm, iqn_norm, ensemble_norm, cql_norm;
  Kokkos::View<const float, MS> iqn_loss, ensemble_loss, ensemble_spread, cql_loss;
  Kokkos::View<const std::int64_t, MS> step;
  double c51_limit, iqn_limit, ensemble_limit, cql_limit;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    const double nan = NAN;
    record(kBudgetC51Norm) = c51_norm();
    record(kBudgetC51Scale) = clip_coefficient(c51_norm(), c51_limit);
    const bool iqn = iqn_norm.data() != nullptr, ens = ensemble_norm.data() != nullptr, cql = cql_norm.data() != nullptr;
    record(kBudgetIqnLoss) = iqn ? static_cast<double>(iqn_loss()) : nan;
    record(kBudgetIqnNorm) = iqn ? iqn_norm() : nan;
    record(kBudgetIqnScale) = iqn ? clip_coefficient(iqn_norm(), iqn_limit) : nan;
    record(kBudgetEnsembleLoss) = ens ? static_cast<double>(ensemble_loss()) : nan;
    record(kBudgetEnsembleNorm) = ens ? ensemble_norm() : nan;
    record(kBudgetEnsembleScale) = ens ? clip_coefficient(ensemble_norm(), ensemble_limit) : nan;
    record(kBudgetEnsembleSpread) = ens ? static_cast<double>(ensemble_spread()) : nan;
    record(kBudgetCqlLoss) = cql ? static_cast<double>(cql_loss()) : nan;
    record(kBudgetCqlNorm) = cql ? cql_norm() : nan;
    record(kBudgetCqlScale) = cql ? clip_coefficient(cql_norm(), cql_limit) : nan;
    record(kBudgetStep) = static_cast<double>(step() - 1);
  }
};

template <class Exec>
void budget_record(const Exec& exec, const BudgetRecord<Exec>& f) {
  require(f.record.extent(0) == kBudgetSlots, "budget_record: record holds ", f.record.extent(0),
          " doubles; expected ", static_cast<int>(kBudgetSlots));
  Kokkos::parallel_for("zs::budget_record", Kokkos::RangePolicy<Exec>(exec, 0, 1), f);
}

}  // namespace zs::kernels
