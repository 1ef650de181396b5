// The C51 double-DQN loss of one batch, and its gradient with respect to the head's outputs.
// Per sample and branch: a* = the greedy action of Q(s′, ·) from the online net (kernels/c51_q.hpp,
// the same Q and tie rule acting uses);
// project r + γⁿ(1 − done)·z, weighted by the target net's distribution at a*, onto the support;
// cross-entropy against the online log-probabilities of the taken action.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/c51_q.hpp"
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
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp_online;  // [2B, A, atoms]: rows s, then s′
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp_target;  // [B, A, atoms] on s′
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions;         // [B, K]
  Kokkos::View<const float*, MS> rewards, dones, weights;             // [B]
  Kokkos::View<float*, MS> priorities;                                // [B] out
  Kokkos::View<float***, Kokkos::LayoutRight, MS> projected;          // [B, K, atoms] out
  Kokkos::View<int**, Kokkos::LayoutRight, MS> best;                  // [B, K] out: a*
  Kokkos::View<float**, Kokkos::LayoutRight, MS, Kokkos::MemoryUnmanaged> d_value;  // [B, atoms] out
  Kokkos::View<float*, MS, Kokkos::MemoryUnmanaged> d_branch_out;                   // flat [B·A·atoms] out
  BranchTable table;
  Support sup;

  // Position of atom j's shifted support point r + γⁿ(1 − done)·z_j on the support, in atoms.
  // A support the config should have refused (a span or spacing that is not finite and
  // positive in float) gives NaN: it reads as atom 0, so no input can steer an index.
  KOKKOS_INLINE_FUNCTION float position(int i, int j) const {
    float tz = rewards(i) + sup.gamma_n * (1.f - dones(i)) * sup.z(j);
    tz = tz < sup.v_min ? sup.v_min : (tz > sup.v_max ? sup.v_max : tz);
    const float b = (tz - sup.v_min) / sup.delta();
    return b != b ? 0.f : b;
  }

  int q_group = 1;  // device: actions whose Q terms a warp holds in scratch at once (c51_loss sets it)

  // a* of one branch on a device warp, the same Q as acting (c51_q: double terms summed serially
  // in atom order) without one lane doing every action's exps alone: the lanes form the terms of
  // q_group actions into the warp's scratch, then one lane per action sums its row in order.
  KOKKOS_INLINE_FUNCTION int device_a_star(const Member& team, double* terms, int i, int c0, int n) const {
    const int B = static_cast<int>(rewards.extent(0)), atoms = sup.atoms;
    const float dz = sup.delta();
    std::uint64_t key = 0;
    for (int a0 = 0; a0 < n; a0 += q_group) {
      const int g = n - a0 < q_group ? n - a0 : q_group;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, g * atoms), [&](const int t) {
        const int a = t / atoms, j = t % atoms;
        terms[t] = c51_q_term(logp_online(B + i, c0 + a0 + a, j), j, sup.v_min, dz);
      });
      std::uint64_t chunk = 0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, g),
          [&](const int a, std::uint64_t& best_key) {
            double s = 0.0;
            for (int j = 0; j < atoms; ++j) s += terms[a * atoms + j];
            const std::uint64_t k_a = greedy_key(static_cast<float>(s), a0 + a);
            if (k_a > best_key) best_key = k_a;
          },
          Kokkos::Max<std::uint64_t>(chunk));
      // The next chunk overwrites the rows just read: the reduction's shuffles order the lanes,
      // but only a warp barrier says so to racecheck (Kokkos' vector single ends with one).
      Kokkos::single(Kokkos::PerThread(team), [] {});
      if (chunk > key) key = chunk;
    }
    return greedy_of(key);
  }

  // One team per sample; a team thread per branch (a warp on CUDA), its vector lanes over atoms,
  // so every sum over atoms is a warp shuffle and the branches run side by side. Per-branch
  // results meet in team scratch and are added in branch order after one barrier: a fixed
  // order, so the same inputs always give the same bits (graph replay equals direct launch).
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& loss_sum) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MS>::accessible;
    const int i = team.league_rank();
    const int B = static_cast<int>(rewards.extent(0)), atoms = sup.atoms, K = table.branches;
    const float coef = weights(i) / static_cast<float>(B * K);
    // A non-finite reward would reach the projection as a NaN position: poison the loss
    // instead, so the guard skips the step.
    const bool finite_inputs = is_finite(rewards(i)) && is_finite(dones(i)) && is_finite(weights(i));
    float* const ce_of = static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * K));
    float* const dq_of = static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * K * atoms));
    float* const source_of =
        host ? nullptr : static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * K * 2 * atoms));
    double* const terms_of =
        host ? nullptr
             : static_cast<double*>(team.team_scratch(0).get_shmem_aligned(
                   sizeof(double) * team.team_size() * q_group * atoms, alignof(double)));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K), [&](const int k) {
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      const int a_star = host ? greedy_action([&](const int a) { return c51_q(&logp_online(B + i, c0 + a, 0), atoms, sup.v_min, sup.delta()); }, n)
                              : device_a_star(team, terms_of + team.team_rank() * q_group * atoms, i, c0, n);
      // Categorical projection: p(⌈b⌉ − b) to ⌊b⌋ and p(b − ⌊b⌋) to ⌈b⌉, all of p when b is a
      // support point. The host scatters, in atom order. Lanes gather instead — target atom j
      // takes p_l·(1 − |b_l − j|) from every source atom within one atom of it — the same split
      // without atomics; each lane then reads back only the atoms it wrote.
      if (host) {
        for (int j = 0; j < atoms; ++j) projected(i, k, j) = 0.f;
        if (finite_inputs)
          for (int l = 0; l < atoms; ++l) {
            const float p = ::expf(logp_target(i, c0 + a_star, l));
            // Rounding can put v_max a hair past the last atom, and only a refused support gets
            // further: clamp in float, before the casts, so both ends are on the support (a float
            // past INT_MAX would not cast to an int at all). Inside the support this changes
            // nothing: past the last atom lo == hi takes all of p either way.
            const float top = static_cast<float>(atoms - 1), raw = position(i, l);
            const float b = raw < 0.f ? 0.f : (raw > top ? top : raw);
            int lo = static_cast<int>(::floorf(b)), hi = static_cast<int>(::ceilf(b));
            lo = lo < 0 ? 0 : (lo > atoms - 1 ? atoms - 1 : lo);
            hi = hi < 0 ? 0 : (hi > atoms - 1 ? atoms - 1 : hi);
            if (lo == hi) {
              projected(i, k, lo) += p;
            } else {
              projected(i, k, lo) += p * (static_cast<float>(hi) - b);
              projected(i, k, hi) += p * (b - static_cast<float>(lo));
            }
          }
      } else {
        // Each source atom's position and probability once, in scratch, for every lane to read
        // (Nsight: recomputing them per (source, target) pair made the loss 4× its memory time).
        float* const pos = source_of + k * 2 * atoms;
        float* const prob = pos + atoms;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int l) {
          pos[l] = position(i, l);
          prob[l] = ::expf(logp_target(i, c0 + a_star, l));
        });
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) {
          float m = 0.f;
          if (finite_inputs)
            for (int l = 0; l < atoms; ++l) {
              const float w = 1.f - ::fabsf(pos[l] - static_cast<float>(j));
              if (w > 0.f) m += prob[l] * w;
            }
          projected(i, k, j) = m;
        });
      }
      const int taken = actions(i, k);
      const bool valid = taken >= 0 && taken < n;  // a bad action poisons the loss too
      float ce = 0.f, msum = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms),
          [&](const int j, float& acc) { acc -= projected(i, k, j) * logp_online(i, c0 + (valid ? taken : 0), j); }, ce);
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms), [&](const int j, float& acc) { acc += projected(i, k, j); }, msum);
      // d(−Σ m log softmax)/d logit_j = softmax_j·Σm − m_j, only the taken action has a loss;
      // the dueling mean spreads it over the branch's actions and the value stream.
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) {
        const float dq = valid ? coef * (::expf(logp_online(i, c0 + taken, j)) * msum - projected(i, k, j)) : NAN;
        dq_of[k * atoms + j] = dq;
        float* const d_out = d_branch_out.data() + table.index(B, atoms, k, i, 0, j);
        for (int a = 0; a < n; ++a) d_out[a * atoms] = dq * ((a == taken ? 1.f : 0.f) - 1.f / static_cast<float>(n));
      });
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        ce_of[k] = valid ? ce / static_cast<float>(K) : NAN;
        best(i, k) = a_star;
      });
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, atoms), [&](const int j) {
      float d = 0.f;
      for (int k = 0; k < K; ++k) d += dq_of[k * atoms + j];
      d_value(i, j) = d;
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      float L = finite_inputs ? 0.f : NAN;
      for (int k = 0; k < K; ++k) L += ce_of[k];
      priorities(i) = L;
      loss_sum += weights(i) * L / static_cast<float>(B);
    });
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
  // Device: a warp per branch (up to 32 branches a team; more take turns). Host: one thread.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int K = f.table.branches;
  Kokkos::TeamPolicy<Exec> policy(exec, static_cast<int>(B), host ? 1 : (K < 32 ? K : 32), host ? 1 : 32);
  // Scratch blocks: CE per branch, value-gradient rows per branch and, on a device, each branch's
  // source positions and probabilities; Kokkos aligns each block.
  const int sources = host ? 0 : 2 * K * f.sup.atoms;
  // a*'s Q terms: up to 4 actions' rows per warp, while the team's rows stay within 16 KiB.
  const int warps = host ? 0 : (K < 32 ? K : 32);
  const int widest = std::max(1, f.table.widest());
  C51Loss<Exec> g = f;
  g.q_group = host ? 1 : std::max(1, std::min({4, widest, 16384 / (warps * 8 * f.sup.atoms)}));
  const std::size_t terms = sizeof(double) * static_cast<std::size_t>(warps * g.q_group * f.sup.atoms);
  policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(float) * (K + K * f.sup.atoms + sources) + terms + 256));
  Kokkos::parallel_reduce("zs::c51_loss", policy, g, loss);
}

}  // namespace zs::kernels
