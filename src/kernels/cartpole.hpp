// N cart-poles (Barto, Sutton & Anderson 1983; Gym CartPole-v1 constants) stepped in one
// launch, in double, with auto-reset and draws from the counter-based RNG.
//
//   temp   = (F + m_p·l·θ̇²·sin θ) / (m_c + m_p)          F = ±10 (action 1 right, 0 left)
//   θ̈      = (g·sin θ − cos θ·temp) / (l·(4/3 − m_p·cos²θ / (m_c + m_p)))
//   ẍ      = temp − m_p·l·θ̈·cos θ / (m_c + m_p)
//   Euler:  x += τ·ẋ; ẋ += τ·ẍ; θ += τ·θ̇; θ̇ += τ·θ̈      (semi-implicit: velocities first)
//   terminal: |x| > 2.4 or |θ| > 12·2π/360; reward 1 every step; truncated at max_steps.
// A fresh episode starts at 4 × U(−0.05, 0.05) drawn with counter_rng_bits(seed,
// kCartPoleRngStream, call, env, k) for k = 0..3 (x, ẋ, θ, θ̇). Actions other than 0/1 are
// clamped (< 0 → 0 left, > 1 → 1 right).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/vec_env.hpp"

namespace zs::kernels {

inline constexpr std::uint64_t kCartPoleRngStream = 0x63617274706F6C65ull;  // "cartpole"

enum CartPoleSlot { kCartX = 0, kCartXDot = 1, kCartTheta = 2, kCartThetaDot = 3, kCartDim = 4 };

// Fixed for a run: passed by value.
struct CartPoleParams {
  double gravity = 9.8;
  double mass_cart = 1.0;
  double mass_pole = 0.1;
  double half_length = 0.5;
  double force_mag = 10.0;
  double tau = 0.02;
  double x_threshold = 2.4;
  double theta_threshold = 12.0 * 2.0 * 3.141592653589793238462643383279502884 / 360.0;
  double reset_bound = 0.05;
  int max_episode_steps = 500;
  bool semi_implicit = false;
};

// Component k (0..3) of the fresh start drawn on RNG call `call` for env `env`: U(−b, b).
KOKKOS_INLINE_FUNCTION double cartpole_reset_draw(std::uint64_t seed, std::uint64_t call,
                                                  std::uint64_t env, int k, double bound) {
  return bound * (2.0 * env_uniform(counter_rng_bits(seed, kCartPoleRngStream, call, env,
                                                     static_cast<std::uint64_t>(k))) -
                  1.0);
}

template <class Exec>
struct CartPoleReset {
  using Mem = typename Exec::memory_space;
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> state;
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> obs, next_obs;
  EnvStats<Mem> stats;
  Kokkos::View<const std::uint64_t, Mem> counter;
  CartPoleParams p;
  std::uint64_t seed;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::uint64_t call = counter();
    for (int k = 0; k < kCartDim; ++k) {
      state(i, k) = cartpole_reset_draw(seed, call, static_cast<std::uint64_t>(i), k, p.reset_bound);
      obs(i, k) = next_obs(i, k) = static_cast<float>(state(i, k));
    }
    stats.clear(i);
  }
};

template <class Exec>
struct CartPoleStep {
  using Mem = typename Exec::memory_space;
  Kokkos::View<double**, Kokkos::LayoutRight, Mem> state;
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> obs, next_obs;
  Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, Mem> actions;
  EnvStats<Mem> stats;
  Kokkos::View<const std::uint64_t, Mem> counter;
  CartPoleParams p;
  std::uint64_t seed;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    double x = state(i, kCartX), x_dot = state(i, kCartXDot);
    double theta = state(i, kCartTheta), theta_dot = state(i, kCartThetaDot);
    const double force = env_clamp_action(actions(i, 0), 2) == 1 ? p.force_mag : -p.force_mag;
    const double total_mass = p.mass_cart + p.mass_pole;
    const double polemass_length = p.mass_pole * p.half_length;
    const double c = ::cos(theta), s = ::sin(theta);
    const double temp = (force + polemass_length * theta_dot * theta_dot * s) / total_mass;
    const double theta_acc = (p.gravity * s - c * temp) /
                             (p.half_length * (4.0 / 3.0 - p.mass_pole * c * c / total_mass));
    const double x_acc = temp - polemass_length * theta_acc * c / total_mass;
    if (p.semi_implicit) {
      x_dot = x_dot + p.tau * x_acc;
      x = x + p.tau * x_dot;
      theta_dot = theta_dot + p.tau * theta_acc;
      theta = theta + p.tau * theta_dot;
    } else {
      x = x + p.tau * x_dot;
      x_dot = x_dot + p.tau * x_acc;
      theta = theta + p.tau * theta_dot;
      theta_dot = theta_dot + p.tau * theta_acc;
    }
    // NaN compares false: a NaN state never counts as terminal here, but it cannot arise from a
    // finite start (the denominator stays ≥ l·(4/3 − m_p/(m_c + m_p)) > 0).
    const bool term = x < -p.x_threshold || x > p.x_threshold || theta < -p.theta_threshold ||
                      theta > p.theta_threshold;
    next_obs(i, kCartX) = static_cast<float>(x);
    next_obs(i, kCartXDot) = static_cast<float>(x_dot);
    next_obs(i, kCartTheta) = static_cast<float>(theta);
    next_obs(i, kCartThetaDot) = static_cast<float>(theta_dot);
    if (stats.finish_step(i, 1.f, term, p.max_episode_steps)) {
      const std::uint64_t call = counter();
      x = cartpole_reset_draw(seed, call, static_cast<std::uint64_t>(i), kCartX, p.reset_bound);
      x_dot = cartpole_reset_draw(seed, call, static_cast<std::uint64_t>(i), kCartXDot, p.reset_bound);
      theta = cartpole_reset_draw(seed, call, static_cast<std::uint64_t>(i), kCartTheta, p.reset_bound);
      theta_dot =
          cartpole_reset_draw(seed, call, static_cast<std::uint64_t>(i), kCartThetaDot, p.reset_bound);
    }
    state(i, kCartX) = x;
    state(i, kCartXDot) = x_dot;
    state(i, kCartTheta) = theta;
    state(i, kCartThetaDot) = theta_dot;
    obs(i, kCartX) = static_cast<float>(x);
    obs(i, kCartXDot) = static_cast<float>(x_dot);
    obs(i, kCartTheta) = static_cast<float>(theta);
    obs(i, kCartThetaDot) = static_cast<float>(theta_dot);
  }
};

template <class Exec>
void cartpole_reset(const Exec& exec,
                    const Kokkos::View<double**, Kokkos::LayoutRight, typename Exec::memory_space>& state,
                    const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& obs,
                    const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& next_obs,
                    const EnvStats<typename Exec::memory_space>& stats,
                    const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter,
                    const CartPoleParams& p, std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(state.extent(0));
  Kokkos::parallel_for("zs::cartpole_reset",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
                       CartPoleReset<Exec>{state, obs, next_obs, stats, counter, p, seed});
  advance_counter(exec, counter);
}

// Enqueues one step of every cart-pole (actions [N, 1]) then the RNG counter's increment.
// Throws zs::Error when actions is not [N, 1].
template <class Exec>
void cartpole_step(const Exec& exec,
                   const Kokkos::View<double**, Kokkos::LayoutRight, typename Exec::memory_space>& state,
                   const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& obs,
                   const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& next_obs,
                   const Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, typename Exec::memory_space>& actions,
                   const EnvStats<typename Exec::memory_space>& stats,
                   const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter,
                   const CartPoleParams& p, std::uint64_t seed) {
  const std::size_t n = state.extent(0);
  require(actions.extent(0) == n && actions.extent(1) == 1, "cartpole step: actions is [",
          actions.extent(0), ", ", actions.extent(1), "]; expected [", n, ", 1] (N x branches)");
  Kokkos::parallel_for("zs::cartpole_step",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(n)),
                       CartPoleStep<Exec>{state, obs, next_obs, actions, stats, counter, p, seed});
  advance_counter(exec, counter);
}

}  // namespace zs::kernels
