// The ensemble heads' loss and uncertainty: E extra C51 head sets on the shared trunk,
// each trained by cross-entropy against the main loss's projected double-DQN targets, and the
// spread of Q(s, a_taken) over all heads (main + E) as an uncertainty statistic.
#pragma once
#include <cmath>
#include <cstddef>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

template <class Exec>
struct EnsembleLoss {
  using MS = typename Exec::memory_space;
  using value_type = float;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float****, Kokkos::LayoutRight, MS> logp;        // [E, B, A, atoms] members on s
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> projected;    // [B, K, atoms] the C51 targets m
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions;         // [B, K]
  Kokkos::View<const float*, MS> weights;                             // [B]
  Kokkos::View<float***, Kokkos::LayoutRight, MS> d_value;            // [E, B, atoms] out
  Kokkos::View<float**, Kokkos::LayoutRight, MS> d_branch_out;        // [E, B·A·atoms] out (BranchTable per member)
  BranchTable table;

  // One team per (member e, sample i). Its threads take the branches, each branch's cross-entropy
  // and Σ m reductions over atoms across the thread's vector lanes (no team barrier between
  // them); then a lane per (branch, atom) for the logits' gradient, and a lane per atom for the
  // value stream's (branches summed in order). L_ie = (1/K)·Σ_k CE(m_ik, p_e(s_i, a_ik));
  // loss = (1/E)·Σ_e (1/B)·Σ_i w_i·L_ie; gradients as in C51 (softmax·Σm − m, through the dueling mean).
  // Team scratch: each branch's cross-entropy and Σ m, and each (branch, atom)'s ∂loss/∂logit.
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_floats(const BranchTable& t, int atoms) {
    return 2 * static_cast<std::size_t>(t.branches) + static_cast<std::size_t>(t.branches) * atoms;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& loss_sum) const {
    const int E = static_cast<int>(logp.extent(0)), B = static_cast<int>(logp.extent(1));
    const int atoms = static_cast<int>(logp.extent(3)), K = table.branches;
    const int e = team.league_rank() / B, i = team.league_rank() % B;
    const float w = weights(i);
    const float coef = w / static_cast<float>(B * K * E);
    float* const ce = static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * scratch_floats(table, atoms)));
    float* const msum = ce + K;
    float* const dq = msum + K;  // [K][atoms]
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](const int k) {
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      const int taken = actions(i, k);
      const int t = taken >= 0 && taken < n ? taken : 0;
      float c = 0.f, m = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms),
          [&](const int j, float& acc) { acc -= projected(i, k, j) * logp(e, i, c0 + t, j); }, c);
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms), [&](const int j, float& acc) { acc += projected(i, k, j); }, m);
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        ce[k] = c;
        msum[k] = m;
      });
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, K * atoms), [&](const int kj) {
      const int k = kj / atoms, j = kj % atoms;
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      const int taken = actions(i, k);
      const bool valid = taken >= 0 && taken < n;
      const int t = valid ? taken : 0;
      const float d = valid ? coef * (::expf(logp(e, i, c0 + t, j)) * msum[k] - projected(i, k, j)) : NAN;
      dq[kj] = d;
      for (int a = 0; a < n; ++a)
        d_branch_out(e, table.index(B, atoms, k, i, a, j)) = d * ((a == t ? 1.f : 0.f) - 1.f / static_cast<float>(n));
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, atoms), [&](const int j) {
      float sum = 0.f;
      for (int k = 0; k < K; ++k) sum += dq[k * atoms + j];
      d_value(e, i, j) = sum;
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      float L = is_finite(w) ? 0.f : NAN;
      for (int k = 0; k < K; ++k) {
        const int n = table.cum(k + 1) - table.cum(k), taken = actions(i, k);
        L += taken >= 0 && taken < n ? ce[k] / static_cast<float>(K) : NAN;
      }
      loss_sum += w * L / static_cast<float>(B * E);
    });
  }
};

template <class Exec>
void ensemble_loss(const Exec& exec, const EnsembleLoss<Exec>& f,
                   const Kokkos::View<float, typename Exec::memory_space>& loss) {
  const std::size_t E = f.logp.extent(0), B = f.logp.extent(1), A = f.logp.extent(2), J = f.logp.extent(3);
  require(E > 0 && B > 0, "ensemble_loss: ", E, " members and ", B, " samples; expected at least 1 of each");
  require(static_cast<int>(A) == f.table.actions, "ensemble_loss: ", A, " actions in the heads; expected ",
          f.table.actions);
  require(f.projected.extent(0) == B && static_cast<int>(f.projected.extent(1)) == f.table.branches &&
              f.projected.extent(2) == J,
          "ensemble_loss: projected targets are [", f.projected.extent(0), ", ", f.projected.extent(1), ", ",
          f.projected.extent(2), "]; expected [", B, ", ", f.table.branches, ", ", J, "]");
  require(f.actions.extent(0) == B && static_cast<int>(f.actions.extent(1)) == f.table.branches &&
              f.weights.extent(0) == B,
          "ensemble_loss: actions [", f.actions.extent(0), ", ", f.actions.extent(1), "], weights [",
          f.weights.extent(0), "]; expected [", B, ", ", f.table.branches, "] and [", B, "]");
  require(f.d_value.extent(0) == E && f.d_value.extent(1) == B && f.d_value.extent(2) == J &&
              f.d_branch_out.extent(0) == E && f.d_branch_out.extent(1) == B * A * J,
          "ensemble_loss: gradient buffers are [", f.d_value.extent(0), ", ", f.d_value.extent(1), ", ",
          f.d_value.extent(2), "] and [", f.d_branch_out.extent(0), ", ", f.d_branch_out.extent(1), "]; expected [", E,
          ", ", B, ", ", J, "] and [", E, ", ", B * A * J, "]");
  // CUDA: 4 threads of 32 lanes; the host: one thread a team.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const std::size_t bytes = sizeof(float) * EnsembleLoss<Exec>::scratch_floats(f.table, static_cast<int>(J));
  const auto policy = Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(E * B), host ? 1 : 4, host ? 1 : 32)
                          .set_scratch_size(0, Kokkos::PerTeam(bytes));
  require(bytes <= static_cast<std::size_t>(policy.scratch_size_max(0)), "ensemble_loss: ", f.table.branches,
          " branches and ", J, " atoms need ", bytes, " bytes of team scratch; at most ", policy.scratch_size_max(0),
          " fit");
  Kokkos::parallel_reduce("zs::ensemble_loss", policy, f, loss);
}

template <class Exec>
struct EnsembleSpread {
  using MS = typename Exec::memory_space;
  using value_type = float;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> main_logp;    // [≥B, A, atoms] the C51 head on s
  Kokkos::View<const float****, Kokkos::LayoutRight, MS> logp;        // [E, B, A, atoms]
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions;         // [B, K]
  Kokkos::View<float*, MS> spread;                                    // [B] out
  BranchTable table;
  float v_min, delta;

  // spread_i = (1/K)·Σ_k std over the E + 1 heads of Q(s_i, a_ik) (population std, Q = Σ_j p_j·z_j).
  // One team per sample; a team thread (a warp on CUDA) per (branch, head) pair sums its Q over
  // the atoms on its vector lanes, so the (E + 1)·K·atoms exps run side by side rather than in
  // one thread. The Q values meet in team scratch; the Welford pass over the heads and the sum
  // over branches then run in a fixed order, so the same inputs always give the same bits.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& sum) const {
    const int E = static_cast<int>(logp.extent(0)), B = static_cast<int>(logp.extent(1));
    const int atoms = static_cast<int>(logp.extent(3)), K = table.branches, H = E + 1;
    const int i = team.league_rank();
    double* const q_of = static_cast<double*>(team.team_scratch(0).get_shmem(sizeof(double) * K * H));
    float* const std_of = static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * K));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K * H), [&](const int kh) {
      const int k = kh / H, h = kh % H;  // head 0 is the main C51 head, h ≥ 1 member h − 1
      const int n = table.cum(k + 1) - table.cum(k), taken = actions(i, k);
      const bool valid = taken >= 0 && taken < n;
      const int g = table.cum(k) + (valid ? taken : 0);
      double q = 0.0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms),
          [&](const int j, double& acc) {
            acc += ::exp(static_cast<double>(h == 0 ? main_logp(i, g, j) : logp(h - 1, i, g, j))) *
                   (v_min + static_cast<double>(j) * delta);
          },
          q);
      Kokkos::single(Kokkos::PerThread(team), [&]() { q_of[kh] = valid ? q : NAN; });
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](const int k) {
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        // Welford in double: the heads' Q values nearly agree, and E[q²] − E[q]² in float would
        // cancel away most of their spread.
        double mean = 0.0, m2 = 0.0;
        for (int h = 0; h < H; ++h) {
          const double q = q_of[k * H + h], d = q - mean;
          mean += d / static_cast<double>(h + 1);
          m2 += d * (q - mean);
        }
        std_of[k] = static_cast<float>(::sqrt(m2 / static_cast<double>(H)));
      });
    });
    team.team_barrier();
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      float total = 0.f;
      for (int k = 0; k < K; ++k) total += std_of[k];  // NaN for a sample with an invalid action
      spread(i) = total / static_cast<float>(K);
      sum += spread(i) / static_cast<float>(B);
    });
  }
};

// Enqueues the per-sample spread and its batch mean (into `mean`).
template <class Exec>
void ensemble_spread(const Exec& exec, const EnsembleSpread<Exec>& f,
                     const Kokkos::View<float, typename Exec::memory_space>& mean) {
  const std::size_t B = f.logp.extent(1);
  require(B > 0 && f.spread.extent(0) == B && f.actions.extent(0) == B && f.main_logp.extent(0) >= B &&
              f.main_logp.extent(1) == f.logp.extent(2) && f.main_logp.extent(2) == f.logp.extent(3),
          "ensemble_spread: ", B, " samples, spread [", f.spread.extent(0), "], actions [", f.actions.extent(0),
          "], main head [", f.main_logp.extent(0), ", ", f.main_logp.extent(1), ", ", f.main_logp.extent(2),
          "]; expected B >= 1 everywhere and the members' [A, atoms] = [", f.logp.extent(2), ", ", f.logp.extent(3), "]");
  require(static_cast<int>(f.actions.extent(1)) == f.table.branches && f.table.branches >= 1,
          "ensemble_spread: actions [", f.actions.extent(0), ", ", f.actions.extent(1), "]; expected [", B, ", ",
          f.table.branches, "] (one per branch)");
  // Device: a warp per (branch, head) pair, up to 16 a team (the reference config's 3 branches
  // × 3 heads take 9; more pairs take turns). Host: one thread.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int K = f.table.branches, pairs = K * (static_cast<int>(f.logp.extent(0)) + 1);
  Kokkos::TeamPolicy<Exec> policy(exec, static_cast<int>(B), host ? 1 : (pairs < 16 ? pairs : 16), host ? 1 : 32);
  // Two scratch blocks (Q per pair, std per branch); Kokkos aligns each.
  policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(double) * pairs + sizeof(float) * K + 64));
  Kokkos::parallel_reduce("zs::ensemble_spread", policy, f, mean);
}

}  // namespace zs::kernels
