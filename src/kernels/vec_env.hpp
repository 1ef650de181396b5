// Device pieces every vectorised environment shares: random draws from the counter-based RNG
// (kernels/counter_rng.hpp: 53-bit uniforms, Box–Muller normals) and the per-step episode bookkeeping.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/backend.hpp"
#include "kernels/counter_rng.hpp"

namespace zs::kernels {

// 53 random bits → a double in [0, 1), exactly representable. Environment dynamics run in
// double, so they take the top 53 bits rather than acting's 24-bit float.
KOKKOS_INLINE_FUNCTION double env_uniform(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Box–Muller from two uniforms: sqrt(−2 ln(1 − u1))·cos(2π u2). 1 − u1 lies in (0, 1], so the
// log is finite (a zero u1 gives 0, not −∞).
KOKKOS_INLINE_FUNCTION double env_normal(std::uint64_t bits1, std::uint64_t bits2) {
  const double u1 = env_uniform(bits1), u2 = env_uniform(bits2);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return ::sqrt(-2.0 * ::log(1.0 - u1)) * ::cos(kTwoPi * u2);
}

KOKKOS_INLINE_FUNCTION int env_clamp_action(std::int32_t a, int n) {
  return a < 0 ? 0 : (a >= n ? n - 1 : static_cast<int>(a));
}

KOKKOS_INLINE_FUNCTION float env_nan() {
  const std::uint32_t bits = 0x7fc00000u;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The views every environment writes besides its observation; one per env (index i).
template <class Mem>
struct EnvStats {
  Kokkos::View<float*, Mem> reward, terminated, truncated, episode_return;
  Kokkos::View<std::int32_t*, Mem> episode_length, episodes_done;
  Kokkos::View<float*, Mem> first_return, last_return;

  // Fresh episode after reset(): the last-step outputs are zero and the episode stats cleared.
  KOKKOS_INLINE_FUNCTION void clear(const std::int64_t i) const {
    reward(i) = 0.f;
    terminated(i) = 0.f;
    truncated(i) = 0.f;
    episode_return(i) = 0.f;
    episode_length(i) = 0;
    episodes_done(i) = 0;
    first_return(i) = env_nan();
    last_return(i) = env_nan();
  }

  // Records one step's reward and end flags; returns true when the episode ended (the caller
  // then draws a fresh start). A terminal step is never also a truncation.
  KOKKOS_INLINE_FUNCTION bool finish_step(const std::int64_t i, const float r, const bool term,
                                          const int max_steps) const {
    const float ret = episode_return(i) + r;
    const std::int32_t len = episode_length(i) + 1;
    const bool trunc = !term && len >= max_steps;
    reward(i) = r;
    terminated(i) = term ? 1.f : 0.f;
    truncated(i) = trunc ? 1.f : 0.f;
    if (term || trunc) {
      if (episodes_done(i) == 0) first_return(i) = ret;
      last_return(i) = ret;
      episodes_done(i) += 1;
      episode_return(i) = 0.f;
      episode_length(i) = 0;
      return true;
    }
    episode_return(i) = ret;
    episode_length(i) = len;
    return false;
  }
};

}  // namespace zs::kernels
