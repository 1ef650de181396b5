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

  KOKKOS_INLINE_FUNCTION float z(int j) const { return v_min + static_cast<float>(j) * delta; }

  // One team per sample. Its threads take the actions, each Q(a) a reduction over atoms across
  // the thread's vector lanes (a warp's shuffles on CUDA, no barrier); then every branch's
  // logsumexp and ∂loss/∂Q from the team's Q's in scratch; then a lane per (branch, atom) for the
  // logits' gradient, and a lane per atom for the value stream's (branches summed in order). The
  // sums that reach a result are in a fixed order: the same bits every run.
  // loss = α/(B·K)·Σ_i Σ_k (lse_k − Q_k(taken)); ∂/∂Q_k(a) = α/(B·K)·(softmax_a(Q_k) − [a = taken]);
  // ∂Q(a)/∂logit_j(a) = p_j·(z_j − Q(a)); the dueling combine then spreads ∂logit over the value
  // stream (Σ_a) and the branch outputs (∂logit(a) − mean_b ∂logit(b)).
  // Team scratch: Q and ∂loss/∂Q of every action, each branch's loss, and each (branch, atom)'s Σ_a.
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_floats(const BranchTable& t, int atoms) {
    return 2 * static_cast<std::size_t>(t.actions) + t.branches + static_cast<std::size_t>(t.branches) * atoms;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& loss_sum) const {
    const int i = team.league_rank(), atoms = static_cast<int>(logp.extent(2)), K = table.branches;
    const int A = table.actions;
    const float coef = alpha / static_cast<float>(batch * K);
    float* const q = static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * scratch_floats(table, atoms)));
    float* const dq = q + A;
    float* const branch_loss = dq + A;
    float* const spread = branch_loss + K;  // [K][atoms]: Σ_a of the branch's logit gradients
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, A), [&](const int a) {
      float qa = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms), [&](const int j, float& acc) { acc += ::expf(logp(i, a, j)) * z(j); },
          qa);
      Kokkos::single(Kokkos::PerThread(team), [&]() { q[a] = qa; });
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, A), [&](const int a) {
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        int k = 0;
        while (table.cum(k + 1) <= a) ++k;
        const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
        const int taken = actions(i, k);
        const bool valid = taken >= 0 && taken < n;
        float mx = q[c0];
        for (int b = 1; b < n; ++b) mx = q[c0 + b] > mx ? q[c0 + b] : mx;
        float s = 0.f;
        for (int b = 0; b < n; ++b) s += ::expf(q[c0 + b] - mx);
        const float lse = mx + ::logf(s);
        dq[a] = valid ? coef * (::expf(q[a] - lse) - (a - c0 == taken ? 1.f : 0.f)) : NAN;
        if (a == c0) branch_loss[k] = valid ? lse - q[c0 + taken] : NAN;
      });
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, K * atoms), [&](const int kj) {
      const int k = kj / atoms, j = kj % atoms;
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      float sum = 0.f;
      for (int a = 0; a < n; ++a) sum += dq[c0 + a] * ::expf(logp(i, c0 + a, j)) * (z(j) - q[c0 + a]);
      spread[kj] = sum;
      const float mean = sum / static_cast<float>(n);
      for (int a = 0; a < n; ++a)
        d_branch_out(table.index(batch, atoms, k, i, a, j)) =
            dq[c0 + a] * ::expf(logp(i, c0 + a, j)) * (z(j) - q[c0 + a]) - mean;
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, atoms), [&](const int j) {
      float sum = 0.f;
      for (int k = 0; k < K; ++k) sum += spread[k * atoms + j];
      d_value(i, j) = sum;
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      float total = 0.f;
      for (int k = 0; k < K; ++k) total += branch_loss[k];
      loss_sum += coef * total;
    });
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
  require(std::isfinite(f.alpha) && f.alpha > 0.f, "cql_loss: alpha = ", f.alpha, "; expected a positive number");
  // CUDA: 4 threads of 32 lanes (a warp per action at a time); the host: one thread a team.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const std::size_t bytes = sizeof(float) * CqlLoss<Exec>::scratch_floats(f.table, static_cast<int>(f.logp.extent(2)));
  const auto policy = Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(B), host ? 1 : 4, host ? 1 : 32)
                          .set_scratch_size(0, Kokkos::PerTeam(bytes));
  require(bytes <= static_cast<std::size_t>(policy.scratch_size_max(0)), "cql_loss: ", f.table.branches,
          " branches of ", f.table.actions, " actions in all and ", f.logp.extent(2), " atoms need ", bytes,
          " bytes of team scratch; at most ", policy.scratch_size_max(0), " fit");
  Kokkos::parallel_reduce("zs::cql_loss", policy, f, loss);
}

}  // namespace zs::kernels
