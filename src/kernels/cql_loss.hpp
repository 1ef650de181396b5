// The CQL regulariser on the C51 head, and its gradient with respect to the head's
// outputs: per sample and branch, logsumexp_a Q(s, a) − Q(s, a_taken), Q = Σ_j p_j·z_j.
#pragma once
#include <cmath>
#include <cstddef>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

// Branches with more actions than this are refused by the launcher: Q of a branch is kept in
// registers per team.
inline constexpr int kCqlMaxActions = 64;

template <class Exec>
struct CqlLoss {
  using MS = typename Exec::memory_space;
  using value_type = float;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp;         // [≥B, A, atoms]: online net on s
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions;         // [B, K]
  Kokkos::View<float**, Kokkos::LayoutRight, MS, Kokkos::MemoryUnmanaged> d_value;  // [B, atoms] out
  Kokkos::View<float*, MS, Kokkos::MemoryUnmanaged> d_branch_out;                   // flat [B·A·atoms] out
  BranchTable table;
  float v_min, delta, alpha;
  int batch;
  int widest;  // actions of the largest branch (checked against kCqlMaxActions)

  KOKKOS_INLINE_FUNCTION float z(int j) const { return v_min + static_cast<float>(j) * delta; }

  // One team per sample, threads over atoms; sums over atoms are team reductions (fixed order).
  // loss = α/(B·K)·Σ_i Σ_k (lse_k − Q_k(taken)); ∂/∂Q_k(a) = α/(B·K)·(softmax_a(Q_k) − [a = taken]);
  // ∂Q(a)/∂logit_j(a) = p_j·(z_j − Q(a)); the dueling combine then spreads ∂logit over the value
  // stream (Σ_a) and the branch outputs (∂logit(a) − mean_b ∂logit(b)).
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& loss_sum) const {
    const int i = team.league_rank(), atoms = static_cast<int>(logp.extent(2)), K = table.branches;
    const float coef = alpha / static_cast<float>(batch * K);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, atoms), [&](const int j) { d_value(i, j) = 0.f; });
    float total = 0.f;
    for (int k = 0; k < K; ++k) {
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      const int taken = actions(i, k);
      const bool valid = taken >= 0 && taken < n;
      float q[kCqlMaxActions];
      float mx = 0.f;
      for (int a = 0; a < n; ++a) {
        float qa = 0.f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, atoms),
            [&](const int j, float& acc) { acc += ::expf(logp(i, c0 + a, j)) * z(j); }, qa);
        team.team_barrier();  // the next reduction reuses the shared memory this one's result is read from
        q[a] = qa;
        if (a == 0 || qa > mx) mx = qa;
      }
      float s = 0.f;
      for (int a = 0; a < n; ++a) s += ::expf(q[a] - mx);
      const float lse = mx + ::logf(s);
      total += valid ? lse - q[taken] : NAN;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, atoms), [&](const int j) {
        float sum = 0.f;
        for (int a = 0; a < n; ++a) {
          const float dq = valid ? coef * (::expf(q[a] - lse) - (a == taken ? 1.f : 0.f)) : NAN;
          sum += dq * ::expf(logp(i, c0 + a, j)) * (z(j) - q[a]);
        }
        d_value(i, j) += sum;
        const float mean = sum / static_cast<float>(n);
        for (int a = 0; a < n; ++a) {
          const float dq = valid ? coef * (::expf(q[a] - lse) - (a == taken ? 1.f : 0.f)) : NAN;
          d_branch_out(table.index(batch, atoms, k, i, a, j)) = dq * ::expf(logp(i, c0 + a, j)) * (z(j) - q[a]) - mean;
        }
      });
    }
    Kokkos::single(Kokkos::PerTeam(team), [&]() { loss_sum += coef * total; });
  }
};

// Enqueues the CQL loss into `loss` (rank-0 device float) and its gradient with respect to the
// value and branch outputs of the first B rows (B = actions.extent(0)).
template <class Exec>
void cql_loss(const Exec& exec, const CqlLoss<Exec>& f, const Kokkos::View<float, typename Exec::memory_space>& loss) {
  const std::size_t B = f.actions.extent(0);
  require(B > 0, "cql_loss: empty batch (B = 0); expected at least 1 sample");
  require(f.batch == static_cast<int>(B), "cql_loss: batch = ", f.batch, "; expected ", B, " (the actions' rows)");
  require(f.logp.extent(0) >= B && static_cast<int>(f.logp.extent(1)) == f.table.actions,
          "cql_loss: log-probabilities are [", f.logp.extent(0), ", ", f.logp.extent(1), ", ...]; expected at least ",
          B, " rows and ", f.table.actions, " actions");
  require(static_cast<int>(f.actions.extent(1)) == f.table.branches, "cql_loss: actions have ", f.actions.extent(1),
          " columns; expected ", f.table.branches, " branches");
  require(f.d_value.extent(0) == B && f.d_value.extent(1) == f.logp.extent(2), "cql_loss: d_value is [",
          f.d_value.extent(0), ", ", f.d_value.extent(1), "]; expected [", B, ", ", f.logp.extent(2), "]");
  require(f.d_branch_out.extent(0) == B * f.logp.extent(1) * f.logp.extent(2), "cql_loss: d_branch_out holds ",
          f.d_branch_out.extent(0), " floats; expected B·A·atoms = ", B * f.logp.extent(1) * f.logp.extent(2));
  require(f.widest >= 1 && f.widest <= kCqlMaxActions, "cql_loss: the largest branch has ", f.widest,
          " actions; expected 1..", kCqlMaxActions);
  require(std::isfinite(f.alpha) && f.alpha > 0.f, "cql_loss: alpha = ", f.alpha, "; expected a positive number");
  Kokkos::parallel_reduce("zs::cql_loss", Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(B), kAtomTeam), f, loss);
}

}  // namespace zs::kernels
