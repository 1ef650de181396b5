// N synthetic markets (3-regime Markov price process, spread, volatility features) stepped in
// one launch with factored orders (exposure × order type × urgency) and auto-reset.
// The exact dynamics, observation and reward are in docs/environments.md ("market"); the
// random draws of one step or reset are the public functions below, so a test can recompute
// a step on the host from the same numbers.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/routing.hpp"
#include "kernels/vec_env.hpp"

namespace zs::kernels {

inline constexpr std::uint64_t kMarketRngStream = 0x6D61726B6574ull;  // "market"
inline constexpr int kMarketRegimes = 3;
inline constexpr int kMarketHistory = 4;  // recent returns in the observation

// State per env, in double: regime (0..2 as a double), position, the last 4 returns (newest
// first), EWMA variance of returns, current spread.
enum MarketSlot {
  kMktRegime = 0,
  kMktPosition = 1,
  kMktReturn0 = 2,
  kMktVariance = kMktReturn0 + kMarketHistory,
  kMktSpread = kMktVariance + 1,
  kMktStateDim = kMktSpread + 1
};
// Observation: returns/median_vol ×4, sqrt(variance)/median_vol, spread/median_spread, position,
// time left (T − t)/T.
enum MarketObs {
  kObsReturn0 = 0,
  kObsVol = kMarketHistory,
  kObsSpread = kObsVol + 1,
  kObsPosition = kObsSpread + 1,
  kObsTimeLeft = kObsPosition + 1,
  kMarketObsDim = kObsTimeLeft + 1
};

// Fixed for a run: passed by value. Defaults are documented in docs/environments.md.
struct MarketParams {
  int episode_length = 256;
  double drift[kMarketRegimes] = {4e-4, 0.0, -6e-4};
  double vol[kMarketRegimes] = {0.002, 0.005, 0.012};
  double spread[kMarketRegimes] = {2e-4, 5e-4, 1.5e-3};
  double spread_noise = 0.25;
  double stay_prob = 0.98;
  double vol_ewma = 0.94;
  double impact[kUrgencies] = {1e-4, 2e-4, 4e-4};  // market order, per unit, by urgency
  double limit_fill[kUrgencies] = {0.3, 0.5, 0.7};
  double limit_cost[kUrgencies] = {0.0, 0.25, 0.5};  // fraction of the half-spread
  double passive_fill[kUrgencies] = {0.1, 0.2, 0.3};
  double reward_scale = 10.0;
  double median_spread = 5e-4;
  double median_vol = 0.005;
  bool routed = false;
};

// Target exposure of exposure action a (0..4).
KOKKOS_INLINE_FUNCTION double market_exposure_level(int a) { return 0.5 * a - 1.0; }

struct MarketStepDraws {
  double fill;          // U[0,1): a limit/passive order fills when fill < its probability
  double ret_normal;    // N(0,1): the step's return shock
  double stay;          // U[0,1): the regime stays when stay < stay_prob
  double pick;          // U[0,1): otherwise the next regime is (z + 1 + (pick >= 0.5)) mod 3
  double spread_normal; // N(0,1): log-normal noise of the next spread
};

struct MarketResetDraws {
  double regime;                    // U[0,1): z = floor(3·regime)
  double ret_normal[kMarketHistory];  // N(0,1): the pre-episode return history
  double spread_normal;             // N(0,1)
};

KOKKOS_INLINE_FUNCTION std::uint64_t market_bits(std::uint64_t seed, std::uint64_t call,
                                                 std::uint64_t env, std::uint64_t k) {
  return counter_rng_bits(seed, kMarketRngStream, call, env, k);
}

// The draws of RNG call `call` for env `env`, step part (slots 0..6).
KOKKOS_INLINE_FUNCTION MarketStepDraws market_step_draws(std::uint64_t seed, std::uint64_t call,
                                                         std::uint64_t env) {
  MarketStepDraws d;
  d.fill = env_uniform(market_bits(seed, call, env, 0));
  d.ret_normal = env_normal(market_bits(seed, call, env, 1), market_bits(seed, call, env, 2));
  d.stay = env_uniform(market_bits(seed, call, env, 3));
  d.pick = env_uniform(market_bits(seed, call, env, 4));
  d.spread_normal = env_normal(market_bits(seed, call, env, 5), market_bits(seed, call, env, 6));
  return d;
}

// The draws of a fresh episode (slots 16..26): used by reset() and by an auto-reset in step(),
// where they come from the same call as that step's draws.
KOKKOS_INLINE_FUNCTION MarketResetDraws market_reset_draws(std::uint64_t seed, std::uint64_t call,
                                                           std::uint64_t env) {
  MarketResetDraws d;
  d.regime = env_uniform(market_bits(seed, call, env, 16));
  for (int k = 0; k < kMarketHistory; ++k)
    d.ret_normal[k] = env_normal(market_bits(seed, call, env, 17 + 2 * k),
                                 market_bits(seed, call, env, 18 + 2 * k));
  d.spread_normal = env_normal(market_bits(seed, call, env, 25), market_bits(seed, call, env, 26));
  return d;
}

// A state slot holding the regime may come from a checkpoint: anything but 0..2 reads as 1.
KOKKOS_INLINE_FUNCTION int market_regime(double z) {
  return (z >= 0.0 && z < static_cast<double>(kMarketRegimes)) ? static_cast<int>(z) : 1;
}

template <class Mem>
struct MarketViews {
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> state;
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> obs, next_obs;
  Kokkos::View<std::int32_t*, Mem> factored;
  EnvStats<Mem> stats;
  Kokkos::View<const std::uint64_t, Mem> counter;
};

template <class Exec>
struct MarketKernel {
  using Mem = typename Exec::memory_space;
  MarketViews<Mem> v;
  Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, Mem> actions;  // empty for reset
  MarketParams p;
  std::uint64_t seed;

  KOKKOS_INLINE_FUNCTION void start(const std::int64_t i, const MarketResetDraws& d) const {
    int z = static_cast<int>(d.regime * kMarketRegimes);
    z = z >= kMarketRegimes ? kMarketRegimes - 1 : z;
    v.state(i, kMktRegime) = z;
    v.state(i, kMktPosition) = 0.0;
    for (int k = 0; k < kMarketHistory; ++k)
      v.state(i, kMktReturn0 + k) = p.drift[z] + p.vol[z] * d.ret_normal[k];
    v.state(i, kMktVariance) = p.vol[z] * p.vol[z];
    v.state(i, kMktSpread) = p.spread[z] * ::exp(p.spread_noise * d.spread_normal);
  }

  KOKKOS_INLINE_FUNCTION void observe(const std::int64_t i,
                                      const Kokkos::View<float**, Kokkos::LayoutRight, Mem>& o,
                                      const int t) const {
    for (int k = 0; k < kMarketHistory; ++k)
      o(i, kObsReturn0 + k) = static_cast<float>(v.state(i, kMktReturn0 + k) / p.median_vol);
    o(i, kObsVol) = static_cast<float>(::sqrt(v.state(i, kMktVariance)) / p.median_vol);
    o(i, kObsSpread) = static_cast<float>(v.state(i, kMktSpread) / p.median_spread);
    o(i, kObsPosition) = static_cast<float>(v.state(i, kMktPosition));
    o(i, kObsTimeLeft) =
        static_cast<float>(static_cast<double>(p.episode_length - t) / p.episode_length);
  }

  struct ResetTag {};
  struct StepTag {};

  KOKKOS_INLINE_FUNCTION void operator()(ResetTag, const std::int64_t i) const {
    start(i, market_reset_draws(seed, v.counter(), static_cast<std::uint64_t>(i)));
    v.stats.clear(i);
    v.factored(i) = kInvalidFactoredAction;
    observe(i, v.obs, 0);
    observe(i, v.next_obs, 0);
  }

  KOKKOS_INLINE_FUNCTION void operator()(StepTag, const std::int64_t i) const {
    const std::uint64_t call = v.counter();
    const MarketStepDraws d = market_step_draws(seed, call, static_cast<std::uint64_t>(i));
    const int z = market_regime(v.state(i, kMktRegime));
    const double spread = v.state(i, kMktSpread);
    double variance = v.state(i, kMktVariance);
    double position = v.state(i, kMktPosition);

    const int exposure = env_clamp_action(actions(i, 0), kExposureActions);
    int order = env_clamp_action(actions(i, 1), kOrderTypes);
    int urgency = env_clamp_action(actions(i, 2), kUrgencies);
    if (p.routed) {
      order = route_order_type(static_cast<float>(spread), static_cast<float>(p.median_spread));
      urgency = route_urgency(static_cast<float>(::sqrt(variance)), static_cast<float>(p.median_vol));
    }
    v.factored(i) = route_factored(exposure, order, urgency);

    // Execution at the current spread, before the price moves.
    const double target = market_exposure_level(exposure);
    const double delta = ::fabs(target - position);
    const double half_spread = 0.5 * spread;
    double cost = 0.0;
    if (delta > 0.0) {
      bool filled = true;
      if (order == 0) {
        cost = delta * (half_spread + p.impact[urgency]);
      } else if (order == 1) {
        filled = d.fill < p.limit_fill[urgency];
        cost = filled ? delta * p.limit_cost[urgency] * half_spread : 0.0;
      } else {
        filled = d.fill < p.passive_fill[urgency];
      }
      if (filled) position = target;
    }

    // The price moves under the current regime; the position earns it.
    const double ret = p.drift[z] + p.vol[z] * d.ret_normal;
    const float reward = static_cast<float>(p.reward_scale * (position * ret - cost));
    variance = p.vol_ewma * variance + (1.0 - p.vol_ewma) * ret * ret;
    const int next_z = d.stay < p.stay_prob ? z : (z + 1 + (d.pick < 0.5 ? 0 : 1)) % kMarketRegimes;

    v.state(i, kMktRegime) = next_z;
    v.state(i, kMktPosition) = position;
    for (int k = kMarketHistory - 1; k > 0; --k)
      v.state(i, kMktReturn0 + k) = v.state(i, kMktReturn0 + k - 1);
    v.state(i, kMktReturn0) = ret;
    v.state(i, kMktVariance) = variance;
    v.state(i, kMktSpread) = p.spread[next_z] * ::exp(p.spread_noise * d.spread_normal);

    const int t = v.stats.episode_length(i) + 1;
    observe(i, v.next_obs, t);
    if (v.stats.finish_step(i, reward, false, p.episode_length)) {
      start(i, market_reset_draws(seed, call, static_cast<std::uint64_t>(i)));
      observe(i, v.obs, 0);
    } else {
      observe(i, v.obs, t);
    }
  }
};

template <class Exec>
void market_reset(const Exec& exec, const MarketViews<typename Exec::memory_space>& v,
                  const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter,
                  const MarketParams& p, std::uint64_t seed) {
  using K = MarketKernel<Exec>;
  Kokkos::parallel_for(
      "zs::market_reset",
      Kokkos::RangePolicy<Exec, typename K::ResetTag, Kokkos::IndexType<std::int64_t>>(
          exec, 0, static_cast<std::int64_t>(v.state.extent(0))),
      K{v, {}, p, seed});
  advance_counter(exec, counter);
}

// Enqueues one step of every market (actions [N, 3]: exposure, order type, urgency) then the
// RNG counter's increment. Throws zs::Error when actions is not [N, 3].
template <class Exec>
void market_step(const Exec& exec, const MarketViews<typename Exec::memory_space>& v,
                 const Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, typename Exec::memory_space>& actions,
                 const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter,
                 const MarketParams& p, std::uint64_t seed) {
  using K = MarketKernel<Exec>;
  const std::size_t n = v.state.extent(0);
  require(actions.extent(0) == n && actions.extent(1) == 3, "market step: actions is [",
          actions.extent(0), ", ", actions.extent(1), "]; expected [", n,
          ", 3] (N x branches: exposure, order type, urgency)");
  Kokkos::parallel_for(
      "zs::market_step",
      Kokkos::RangePolicy<Exec, typename K::StepTag, Kokkos::IndexType<std::int64_t>>(
          exec, 0, static_cast<std::int64_t>(n)),
      K{v, actions, p, seed});
  advance_counter(exec, counter);
}

}  // namespace zs::kernels
