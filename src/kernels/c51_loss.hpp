// The C51 double-DQN loss of one batch, and its gradient with respect to the head's outputs.
// Per sample and branch: a* = argmax_a Σ_j softmax(q_online(s′))·z (lowest index on ties);
// project r + γⁿ(1 − done)·z, weighted by the target net's distribution at a*, onto the support;
// cross-entropy against the online log-probabilities of the taken action.
#pragma once
#include <cmath>

#include "backends/backend.hpp"
#include "error.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

struct Support {
  float v_min, v_max, gamma_n;  // gamma_n = γ^n_step: rewards are already n-step returns
  int atoms;
  KOKKOS_INLINE_FUNCTION float delta() const { return (v_max - v_min) / static_cast<float>(atoms - 1); }
  KOKKOS_INLINE_FUNCTION float z(int j) const { return v_min + static_cast<float>(j) * delta(); }
};

template <class Exec>
struct C51Loss {
  using MS = typename Exec::memory_space;
  using value_type = float;
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp_online;  // [2B, A, atoms]: rows s, then s′
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp_target;  // [B, A, atoms] on s′
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions;         // [B, K]
  Kokkos::View<const float*, MS> rewards, dones, weights;             // [B]
  Kokkos::View<float*, MS> priorities;                                // [B] out
  Kokkos::View<float***, Kokkos::LayoutRight, MS> projected;          // [B, K, atoms] out
  Kokkos::View<int**, Kokkos::LayoutRight, MS> best;                  // [B, K] out: a*
  Kokkos::View<float**, Kokkos::LayoutRight, MS, Kokkos::MemoryUnmanaged> d_value;  // [B, atoms] out
  Kokkos::View<float*, MS, Kokkos::MemoryUnmanaged> d_branch_out;                   // flat [B·A·atoms] out
  BranchTable<Exec> table;
  Support sup;

  KOKKOS_INLINE_FUNCTION void operator()(const int i, float& loss_sum) const {
    const int B = static_cast<int>(rewards.extent(0)), atoms = sup.atoms, K = table.branches;
    const float dz = sup.delta();
    const float bootstrap = sup.gamma_n * (1.f - dones(i));
    const float coef = weights(i) / static_cast<float>(B * K);
    for (int j = 0; j < atoms; ++j) d_value(i, j) = 0.f;
    // A non-finite reward would reach the projection as a NaN position (and an undefined
    // float→int cast): poison the loss instead, so the guard skips the step.
    const bool finite_inputs = is_finite(rewards(i)) && is_finite(dones(i)) && is_finite(weights(i));
    float L = finite_inputs ? 0.f : NAN;
    for (int k = 0; k < K; ++k) {
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      int a_star = 0;
      float q_best = 0.f;
      for (int a = 0; a < n; ++a) {
        float q = 0.f;
        for (int j = 0; j < atoms; ++j) q += ::expf(logp_online(B + i, c0 + a, j)) * sup.z(j);
        if (a == 0 || q > q_best) {
          q_best = q;
          a_star = a;
        }
      }
      best(i, k) = a_star;
      for (int j = 0; j < atoms; ++j) projected(i, k, j) = 0.f;
      for (int j = 0; j < atoms; ++j) {
        const float p = ::expf(logp_target(i, c0 + a_star, j));
        float tz = rewards(i) + bootstrap * sup.z(j);
        tz = tz < sup.v_min ? sup.v_min : (tz > sup.v_max ? sup.v_max : tz);
        const float b = finite_inputs ? (tz - sup.v_min) / dz : 0.f;
        int lo = static_cast<int>(::floorf(b)), hi = static_cast<int>(::ceilf(b));
        lo = lo < 0 ? 0 : (lo > atoms - 1 ? atoms - 1 : lo);
        hi = hi < 0 ? 0 : (hi > atoms - 1 ? atoms - 1 : hi);
        if (lo == hi) {
          projected(i, k, lo) += p;  // b on a support point: all of the mass goes there
        } else {
          projected(i, k, lo) += p * (static_cast<float>(hi) - b);
          projected(i, k, hi) += p * (b - static_cast<float>(lo));
        }
      }
      const int taken = actions(i, k);
      if (taken < 0 || taken >= n) {  // a bad action poisons the loss: the guard skips the step
        L = NAN;
        continue;
      }
      float ce = 0.f, msum = 0.f;
      for (int j = 0; j < atoms; ++j) {
        ce -= projected(i, k, j) * logp_online(i, c0 + taken, j);
        msum += projected(i, k, j);
      }
      L += ce / static_cast<float>(K);
      // d(−Σ m log softmax)/d logit_j = softmax_j·Σm − m_j, only the taken action has a loss;
      // the dueling mean spreads it over the branch's actions and the value stream.
      for (int j = 0; j < atoms; ++j) {
        const float dq = coef * (::expf(logp_online(i, c0 + taken, j)) * msum - projected(i, k, j));
        d_value(i, j) += dq;
        for (int a = 0; a < n; ++a)
          d_branch_out(table.index(B, atoms, k, i, a, j)) =
              dq * ((a == taken ? 1.f : 0.f) - 1.f / static_cast<float>(n));
      }
    }
    priorities(i) = L;
    loss_sum += weights(i) * L / static_cast<float>(B);
  }
};

// Enqueues the loss into `loss` (rank-0 device float) with priorities, a*, the projected target
// distributions and the gradients d_value / d_branch_out of the weighted mean loss.
template <class Exec>
void c51_loss(const Exec& exec, const C51Loss<Exec>& f, const Kokkos::View<float, typename Exec::memory_space>& loss) {
  const std::size_t B = f.rewards.extent(0);
  require(B > 0, "c51_loss: empty batch (B = 0); expected at least 1 sample");
  require(f.logp_online.extent(0) == 2 * B, "c51_loss: online log-probabilities have ", f.logp_online.extent(0),
          " rows; expected 2·B = ", 2 * B, " (s then s′)");
  require(f.logp_target.extent(0) == B, "c51_loss: target log-probabilities have ", f.logp_target.extent(0),
          " rows; expected B = ", B);
  require(f.actions.extent(0) == B && static_cast<int>(f.actions.extent(1)) == f.table.branches,
          "c51_loss: actions are [", f.actions.extent(0), ", ", f.actions.extent(1), "]; expected [", B, ", ",
          f.table.branches, "]");
  require(f.dones.extent(0) == B && f.weights.extent(0) == B && f.priorities.extent(0) == B,
          "c51_loss: dones/weights/priorities hold ", f.dones.extent(0), "/", f.weights.extent(0), "/",
          f.priorities.extent(0), " entries; expected B = ", B);
  require(static_cast<int>(f.logp_online.extent(2)) == f.sup.atoms, "c51_loss: ", f.logp_online.extent(2),
          " atoms in the head; expected ", f.sup.atoms);
  Kokkos::parallel_reduce("zs::c51_loss", Kokkos::RangePolicy<Exec>(exec, 0, B), f, loss);
}

}  // namespace zs::kernels
