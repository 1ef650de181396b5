// Exposure → factored action routing on the device (the seed's batch_route_exposure_to_factored):
// order type from spread vs the median spread, urgency from volatility vs the median volatility.
//
//   r_s = spread / median_spread   order type            r_v = vol / median_vol   urgency
//   r_s <= 1.0                     0 market (crossing a  r_v <  0.75              0 low
//                                    tight spread is cheap)
//   1.0 < r_s <= 2.0               1 limit               0.75 <= r_v < 1.5        1 normal
//   r_s > 2.0                      2 passive/post-only   r_v >= 1.5               2 high
//
//   factored = exposure·9 + order_type·3 + urgency  (0..44)
//
// Undefined ratios count as 1.0 (neutral: order type 0, urgency 1): a median that is <= 0 or
// not finite, or a sample's spread (resp. volatility) that is NaN or ±Inf. Each ratio is
// judged on its own, so a bad volatility does not change the order type. Negative finite
// values are not special-cased (their ratio is below every threshold). An exposure outside
// 0..4 yields −1, an invalid marker the consumer must not map to an action.
//
// The boundaries are decided exactly: `s <= 2·m` etc. in double, where 2·m, 0.75·m and 1.5·m
// of a float m are exact, instead of a rounded division.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

inline constexpr int kExposureActions = 5;
inline constexpr int kOrderTypes = 3;
inline constexpr int kUrgencies = 3;
inline constexpr int kFactoredActions = kExposureActions * kOrderTypes * kUrgencies;  // 45
inline constexpr std::int32_t kInvalidFactoredAction = -1;

KOKKOS_INLINE_FUNCTION bool routing_ratio_defined(float value, float median) {
  return is_finite(value) && is_finite(median) && median > 0.f;
}

KOKKOS_INLINE_FUNCTION int route_order_type(float spread, float median_spread) {
  if (!routing_ratio_defined(spread, median_spread)) return 0;
  const double s = spread, m = median_spread;
  if (s <= m) return 0;
  if (s <= 2.0 * m) return 1;
  return 2;
}

KOKKOS_INLINE_FUNCTION int route_urgency(float volatility, float median_volatility) {
  if (!routing_ratio_defined(volatility, median_volatility)) return 1;
  const double v = volatility, m = median_volatility;
  if (v < 0.75 * m) return 0;
  if (v < 1.5 * m) return 1;
  return 2;
}

KOKKOS_INLINE_FUNCTION std::int32_t route_factored(std::int32_t exposure, int order_type,
                                                   int urgency) {
  if (exposure < 0 || exposure >= kExposureActions) return kInvalidFactoredAction;
  return exposure * (kOrderTypes * kUrgencies) + order_type * kUrgencies + urgency;
}

template <class Exec>
struct RouteExposureToFactored {
  using Mem = typename Exec::memory_space;
  Kokkos::View<const std::int32_t*, Kokkos::LayoutStride, Mem> exposure;
  Kokkos::View<const float*, Mem> spread, volatility;
  Kokkos::View<const float, Mem> median_spread, median_volatility;
  Kokkos::View<std::int32_t*, Mem> factored;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    factored(i) = route_factored(exposure(i), route_order_type(spread(i), median_spread()),
                                 route_urgency(volatility(i), median_volatility()));
  }
};

// Enqueues routing of B exposure actions (0..4; strided views welcome, e.g. the exposure
// column of epsilon_greedy's actions) into factored [B] on `exec`. The medians are read from
// device memory on every call: they move over time. Throws zs::Error on mismatched sizes.
template <class Exec>
void route_exposure_to_factored(
    const Exec& exec,
    Kokkos::View<const std::int32_t*, Kokkos::LayoutStride, typename Exec::memory_space> exposure,
    Kokkos::View<const float*, typename Exec::memory_space> spread,
    Kokkos::View<const float*, typename Exec::memory_space> volatility,
    Kokkos::View<const float, typename Exec::memory_space> median_spread,
    Kokkos::View<const float, typename Exec::memory_space> median_volatility,
    Kokkos::View<std::int32_t*, typename Exec::memory_space> factored) {
  const std::size_t n = exposure.extent(0);
  require(n >= 1, "route_exposure_to_factored: batch B = 0; expected at least 1 sample");
  require(spread.extent(0) == n, "route_exposure_to_factored: spread has ", spread.extent(0),
          " entries; expected ", n, " (one per exposure action)");
  require(volatility.extent(0) == n, "route_exposure_to_factored: volatility has ",
          volatility.extent(0), " entries; expected ", n, " (one per exposure action)");
  require(factored.extent(0) == n, "route_exposure_to_factored: factored has ", factored.extent(0),
          " entries; expected ", n, " (one per exposure action)");
  Kokkos::parallel_for("zs::route_exposure_to_factored",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(n)),
                       RouteExposureToFactored<Exec>{exposure, spread, volatility, median_spread,
                                                     median_volatility, factored});
}

}  // namespace zs::kernels
