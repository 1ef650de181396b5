// Q from a C51 head: Q(s, a) = Σ_j p_j·z_j with z_j = v_min + j·Δz, and the greedy action over a
// branch. The one definition that acting, evaluation, the Q monitor and the loss's double-DQN a*
// all use, so an argmax is the same everywhere, near-ties included.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::kernels {

// Δz of `atoms` atoms on [v_min, v_max], in float as every kernel forms it.
KOKKOS_INLINE_FUNCTION float c51_delta(float v_min, float v_max, int atoms) {
  return (v_max - v_min) / static_cast<float>(atoms - 1);
}

// Atom j's term p_j·z_j from its log-probability, in double: Σ p·z over a support symmetric about
// 0 cancels, and Q near 0 would lose its digits in float.
KOKKOS_INLINE_FUNCTION double c51_q_term(float logp, int j, float v_min, float dz) {
  return ::exp(static_cast<double>(logp)) * (v_min + j * static_cast<double>(dz));
}

// Q of one action from its `atoms` contiguous log-probabilities: the terms summed in atom order,
// rounded once to float. Every argmax compares these floats.
KOKKOS_INLINE_FUNCTION float c51_q(const float* logp, int atoms, float v_min, float dz) {
  double s = 0.0;
  for (int j = 0; j < atoms; ++j) s += c51_q_term(logp[j], j, v_min, dz);
  return static_cast<float>(s);
}

// A key whose maximum over a branch's actions is its greedy pick: the largest Q, the lowest index
// among equal Qs (−0 equals +0), NaN never wins, and all-NaN picks action 0. A total order, so a
// serial loop and any reduction tree pick the same action.
KOKKOS_INLINE_FUNCTION std::uint64_t greedy_key(float q, int a) {
  std::uint32_t u = 0;  // NaN: below every number
  if (q == q) {
    const float v = q == 0.f ? 0.f : q;
    std::memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // float order → unsigned order
  }
  return (static_cast<std::uint64_t>(u) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(a));
}
KOKKOS_INLINE_FUNCTION int greedy_of(std::uint64_t key) {
  return static_cast<int>(0xFFFFFFFFu - static_cast<std::uint32_t>(key & 0xFFFFFFFFu));
}

// The greedy action among n, q_of(a) giving each one's Q (a float).
template <class QOf>
KOKKOS_INLINE_FUNCTION int greedy_action(const QOf& q_of, int n) {
  std::uint64_t best = 0;
  for (int a = 0; a < n; ++a) {
    const std::uint64_t k = greedy_key(q_of(a), a);
    if (k > best) best = k;
  }
  return greedy_of(best);
}

// q[n][a] = c51_q of logp[n][a][·]: a head's Q table, for acting, evaluation and the Q monitor.
template <class Exec>
struct QFromLogProbs {
  Kokkos::View<const float***, Kokkos::LayoutRight, typename Exec::memory_space> logp;
  Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space> q;
  float v_min, dz;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t actions = static_cast<std::int64_t>(logp.extent(1));
    const int n = static_cast<int>(i / actions), a = static_cast<int>(i % actions);
    q(n, a) = c51_q(&logp(n, a, 0), static_cast<int>(logp.extent(2)), v_min, dz);
  }
};

template <class Exec>
void q_from_log_probs(const Exec& exec,
                      const Kokkos::View<const float***, Kokkos::LayoutRight, typename Exec::memory_space>& logp,
                      float v_min, float v_max,
                      const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& q) {
  require(logp.extent(0) == q.extent(0) && logp.extent(1) == q.extent(1), "q_from_log_probs: log-probs are [",
          logp.extent(0), ", ", logp.extent(1), ", atoms], Q is [", q.extent(0), ", ", q.extent(1),
          "]; expected the same rows and actions");
  require(logp.extent(2) >= 2, "q_from_log_probs: ", logp.extent(2), " atoms; expected at least 2");
  Kokkos::parallel_for("zs::q_from_log_probs",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(q.extent(0) * q.extent(1))),
                       QFromLogProbs<Exec>{logp, q, v_min, c51_delta(v_min, v_max, static_cast<int>(logp.extent(2)))});
}

}  // namespace zs::kernels
