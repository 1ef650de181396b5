// The C51 double-DQN loss one (sample, branch) at a time, for the fused step's kernel: a team per
// (sample, branch) puts the batch's B·K short chains side by side, where c51_loss.hpp's team per
// sample walks a sample's branches. The same loss (a* by c51_q's key, the target's distribution at
// a* projected by gathering, cross-entropy against the taken action, the same gradient through the
// dueling mean); each branch's share of ∂loss/∂value_out stays apart, and finish() adds the
// branches into the priorities and the batch's loss in a fixed order.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "kernels/branch_table.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/c51_loss.hpp"
#include "kernels/c51_q.hpp"
#include "kernels/math.hpp"
#include "kernels/tile_clocks.hpp"

namespace zs::kernels {

template <class Exec>
struct C51BranchLoss {
  using MS = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp_online;  // [2B, A, atoms]: rows s, then s′
  Kokkos::View<const float***, Kokkos::LayoutRight, MS> logp_target;  // [B, A, atoms] on s′
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions;         // [B, K]
  Kokkos::View<const float*, MS> rewards, dones, weights;             // [B]
  Kokkos::View<float***, Kokkos::LayoutRight, MS> projected;          // [B, K, atoms] out
  Kokkos::View<int**, Kokkos::LayoutRight, MS> best;                  // [B, K] out: a*
  Kokkos::View<float**, Kokkos::LayoutRight, MS> ce;                  // [B, K] out: CE / K, NaN for a bad action
  Kokkos::View<float*, MS> priorities;                                // [B] out (finish)
  Kokkos::View<float, MS> loss;                                       // out (finish)
  float* d_value_parts = nullptr;  // [K, B, atoms] out: branch k's ∂loss/∂value_out (rows padded)
  float* d_branch_out = nullptr;   // flat [B·A·atoms] out, BranchTable layout for B rows (rows padded)
  BranchTable table;
  Support sup{};
  // Both gradients' rows are rounded up to a multiple of `pad` floats (1: BranchTable's dense
  // layout): the fused step pads them to 4 so that its products stage them 16 bytes at a time.
  int pad = 1;
  // Each target atom gathers only from the sources near it (gather_mass; the same bits), not
  // from every source (TrainerOptions::narrow_gather).
  bool narrow_gather = false;
  // The dueling head's inputs and outputs for head_branch(): the output layers' results (their
  // biases already added) of the online net on s and s′ (2B rows: s, then s′) and of the target
  // net on s′ (B rows), and where their log-probabilities go (logp_online's and logp_target's
  // storage, written here).
  const float* online_value = nullptr;   // [2B, atoms]
  const float* online_branch = nullptr;  // flat, BranchTable layout for 2B rows
  const float* target_value = nullptr;   // [B, atoms]
  const float* target_branch = nullptr;  // flat, BranchTable layout for B rows
  float* online_logp = nullptr;          // [2B, A, atoms]
  float* target_logp = nullptr;          // [B, A, atoms]

  KOKKOS_INLINE_FUNCTION int padded(int floats) const { return (floats + pad - 1) / pad * pad; }
  // Where (sample i, atom j) of branch k's share of ∂loss/∂value_out lives, for B samples.
  KOKKOS_INLINE_FUNCTION std::size_t value_at(int B, int k, int i, int j) const {
    return (static_cast<std::size_t>(k) * B + i) * padded(sup.atoms) + j;
  }
  // First float of branch k's [B, padded(n_k·atoms)] block of d_branch_out, and its row stride.
  KOKKOS_INLINE_FUNCTION std::size_t branch_block(int B, int k) const {
    std::size_t at = 0;
    for (int b = 0; b < k; ++b) at += static_cast<std::size_t>(B) * padded(table.size(b) * sup.atoms);
    return at;
  }
  KOKKOS_INLINE_FUNCTION int branch_ld(int k) const { return padded(table.size(k) * sup.atoms); }
  // Floats d_value_parts and d_branch_out hold for B samples.
  std::size_t value_floats(int B) const { return static_cast<std::size_t>(table.branches) * B * padded(sup.atoms); }
  std::size_t branch_floats(int B) const { return branch_block(B, table.branches); }

  // Team scratch for a team of `team_size` team threads: each thread's Q terms (double), each
  // one's a* key, the source positions, probabilities and projected mass, and two partial sums
  // per thread.
  // (Device code counts it too: head_branch finds its own part of the scratch after the loss's.)
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes(int team_size, int atoms) {
    return sizeof(double) * team_size * atoms + sizeof(std::uint64_t) * team_size +
           sizeof(float) * (3 * atoms + 2 * team_size);
  }
  // head_branch()'s: the loss's, then the three rows' logits of the widest branch, their value
  // streams and their branch means.
  KOKKOS_INLINE_FUNCTION static std::size_t head_scratch_bytes(int team_size, int atoms, int widest_branch) {
    return scratch_bytes(team_size, atoms) + sizeof(float) * 3 * (widest_branch + 2) * atoms;
  }
  // What a phase of branch() tiles (with_head false) or of head_branch() tiles needs.
  static std::size_t phase_scratch_bytes(bool with_head, int team_size, int atoms, int widest_branch) {
    return with_head ? head_scratch_bytes(team_size, atoms, widest_branch) : scratch_bytes(team_size, atoms);
  }

  // Sample i, branch k, with the dueling head of that branch's three rows (online on s and s′,
  // target on s′) formed first in scratch: branch k's log-probabilities depend only on the value
  // stream and branch k's outputs, so the B·K teams of the loss form every row's head between
  // them and the loss reads it from scratch, in one phase instead of two. The head is
  // DuelingTiles' arithmetic in the same order, and every log-probability is still stored for
  // the auxiliaries and the Q statistics.
  // clocks: when given (the timeline), the cycles once the head is formed (clocks[0]), once a* is
  // found (clocks[1]) and once the projection is done (clocks[2]).
  KOKKOS_INLINE_FUNCTION void head_branch(const Member& team, int i, int k, void* scratch,
                                          std::uint64_t* clocks = nullptr) const {
    const int B = static_cast<int>(rewards.extent(0)), Z = sup.atoms, A = table.actions;
    const int c0 = table.cum(k), n = table.size(k), w = n * Z;
    float* const lp = reinterpret_cast<float*>(static_cast<char*>(scratch) + scratch_bytes(team.team_size(), Z));
    float* const value = lp + static_cast<std::size_t>(3) * w;
    float* const mean = value + 3 * Z;
    // Row r of the three: its net's rows, its row there, its outputs and its log-probabilities.
    auto rows_of = [&](int r) { return r < 2 ? 2 * B : B; };
    auto row_of = [&](int r) { return r == 1 ? B + i : i; };
    auto value_of = [&](int r) { return r < 2 ? online_value : target_value; };
    auto branch_of = [&](int r) { return r < 2 ? online_branch : target_branch; };
    auto logp_of = [&](int r) { return r < 2 ? online_logp : target_logp; };
    for (int r = 0; r < 3; ++r) {
      const float* const src = branch_of(r) + table.index(rows_of(r), Z, k, row_of(r), 0, 0);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, w), [&](const int f) { lp[r * w + f] = src[f]; });
      const float* const v = value_of(r) + static_cast<std::size_t>(row_of(r)) * Z;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Z), [&](const int j) { value[r * Z + j] = v[j]; });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, 3 * Z), [&](const int f) {
      const int r = f / Z, j = f % Z;
      float m = 0.f;
      for (int b = 0; b < n; ++b) m += lp[r * w + b * Z + j];
      mean[f] = m / static_cast<float>(n);
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 3 * n), [&](const int f) {
      const int r = f / n;
      float* const l = lp + static_cast<std::size_t>(f) * Z;
      const float* const v = value + r * Z;
      const float* const m = mean + r * Z;
      log_softmax_lanes(team, Z, [&](const int j) { return v[j] + l[j] - m[j]; }, l, l);
    });
    team.team_barrier();
    stamp_cycles(team, clocks, 0);
    for (int r = 0; r < 3; ++r) {
      float* const dst = logp_of(r) + (static_cast<std::size_t>(row_of(r)) * A + c0) * Z;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, w), [&](const int f) { dst[f] = lp[r * w + f]; });
    }
    branch_on(team, i, k, lp, lp + w, lp + 2 * w, scratch, clocks);
  }

  // Sample i, branch k, by the whole team. Results are written in a fixed order: the same
  // inputs give the same bits.
  KOKKOS_INLINE_FUNCTION void branch(const Member& team, int i, int k, void* scratch) const {
    const int B = static_cast<int>(rewards.extent(0)), c0 = table.cum(k);
    branch_on(team, i, k, &logp_online(i, c0, 0), &logp_online(B + i, c0, 0), &logp_target(i, c0, 0), scratch);
  }

  // branch() on branch k's log-probabilities wherever they are: its n_k actions × atoms of the
  // online net on s (`now`) and on s′ (`next`) and of the target net on s′ (`target`).
  // clocks: as head_branch's (clocks[1] and clocks[2] are stamped here).
  KOKKOS_INLINE_FUNCTION void branch_on(const Member& team, int i, int k, const float* now, const float* next,
                                        const float* target, void* scratch, std::uint64_t* clocks = nullptr) const {
    const int B = static_cast<int>(rewards.extent(0)), Z = sup.atoms, K = table.branches, T = team.team_size();
    const int n = table.size(k);
    double* const terms = static_cast<double*>(scratch);
    std::uint64_t* const keys = reinterpret_cast<std::uint64_t*>(terms + T * Z);
    float* const pos = reinterpret_cast<float*>(keys + T);
    float* const prob = pos + Z;
    float* const m = prob + Z;
    float* const part = m + Z;  // [2][T]: each thread's share of the cross-entropy, then of the mass
    const float dz = sup.delta();
    const bool finite_inputs = is_finite(rewards(i)) && is_finite(dones(i)) && is_finite(weights(i));
    const int taken = actions(i, k);
    const bool valid = taken >= 0 && taken < n;  // a bad action poisons the loss
    const int at = valid ? taken : 0;

    // 1. a*: each team thread takes every T-th action; its lanes form the atoms' Q terms and one
    // lane adds them in atom order (c51_q's sum, so a* is acting's greedy action).
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](const int w) {
      double* const tw = terms + static_cast<std::size_t>(w) * Z;
      std::uint64_t key = 0;
      for (int a = w; a < n; a += T) {
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, Z), [&](const int j) {
          tw[j] = c51_q_term(next[a * Z + j], j, sup.v_min, dz);
        });
        std::uint64_t ka = 0;
        Kokkos::single(
            Kokkos::PerThread(team),
            [&](std::uint64_t& out) {
              double s = 0.0;
              for (int j = 0; j < Z; ++j) s += tw[j];
              out = greedy_key(static_cast<float>(s), a);
            },
            ka);
        if (ka > key) key = ka;
      }
      Kokkos::single(Kokkos::PerThread(team), [&]() { keys[w] = key; });
    });
    team.team_barrier();
    std::uint64_t best_key = 0;
    for (int w = 0; w < T; ++w) best_key = keys[w] > best_key ? keys[w] : best_key;
    const int a_star = greedy_of(best_key);
    stamp_cycles(team, clocks, 1);

    // 2. Each source atom's position and probability under the target net at a*.
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Z), [&](const int j) {
      pos[j] = sup.position(rewards(i), dones(i), j);
      prob[j] = ::expf(target[a_star * Z + j]);
    });
    team.team_barrier();
    // 3. Categorical projection by gathering: target atom j takes p_l·(1 − |b_l − j|) from every
    // source atom within one atom of it (no atomics; gather_mass).
    const bool ascending = narrow_gather && sup.ascending(dones(i));
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Z), [&](const int j) {
      const float mj = finite_inputs ? gather_mass(pos, prob, Z, j, ascending) : 0.f;
      m[j] = mj;
      projected(i, k, j) = mj;
    });
    team.team_barrier();
    stamp_cycles(team, clocks, 2);
    // Cross-entropy against the taken action and the projected mass: each team thread a
    // contiguous share of the atoms, then the shares in thread order.
    const int per = (Z + T - 1) / T;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](const int w) {
      const int j0 = w * per < Z ? w * per : Z, j1 = j0 + per < Z ? j0 + per : Z;
      float c = 0.f, s = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, j1 - j0),
          [&](const int t, float& acc) { acc -= m[j0 + t] * now[at * Z + j0 + t]; }, c);
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, j1 - j0), [&](const int t, float& acc) { acc += m[j0 + t]; }, s);
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        part[w] = c;
        part[T + w] = s;
      });
    });
    team.team_barrier();
    float cross = 0.f, msum = 0.f;
    for (int w = 0; w < T; ++w) {
      cross += part[w];
      msum += part[T + w];
    }
    // 4. d(−Σ m log softmax)/d logit_j = softmax_j·Σm − m_j for the taken action; the dueling
    // mean spreads it over the branch's actions, and the value stream gets it whole.
    const float coef = weights(i) / static_cast<float>(B * K);
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Z), [&](const int j) {
      const float dq = valid ? coef * (::expf(now[taken * Z + j]) * msum - m[j]) : NAN;
      d_value_parts[value_at(B, k, i, j)] = dq;
      float* const d_out = d_branch_out + branch_block(B, k) + static_cast<std::size_t>(i) * branch_ld(k) + j;
      for (int a = 0; a < n; ++a) d_out[a * Z] = dq * ((a == taken ? 1.f : 0.f) - 1.f / static_cast<float>(n));
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      ce(i, k) = valid ? cross / static_cast<float>(K) : NAN;
      best(i, k) = a_star;
    });
    team.team_barrier();
  }

  // Every sample's priority (its loss over the branches, NaN for a non-finite reward, done or
  // weight) and the batch's weighted mean loss, by one team; scratch as for branch().
  KOKKOS_INLINE_FUNCTION void finish(const Member& team, void* scratch) const {
    const int B = static_cast<int>(rewards.extent(0)), K = table.branches, T = team.team_size();
    float* const part = static_cast<float*>(scratch);
    const int per = (B + T - 1) / T;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](const int w) {
      const int i0 = w * per < B ? w * per : B, i1 = i0 + per < B ? i0 + per : B;
      float s = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, i1 - i0),
          [&](const int t, float& acc) {
            const int i = i0 + t;
            const bool finite_inputs = is_finite(rewards(i)) && is_finite(dones(i)) && is_finite(weights(i));
            float L = finite_inputs ? 0.f : NAN;
            for (int k = 0; k < K; ++k) L += ce(i, k);
            priorities(i) = L;
            acc += weights(i) * L / static_cast<float>(B);
          },
          s);
      Kokkos::single(Kokkos::PerThread(team), [&]() { part[w] = s; });
    });
    team.team_barrier();
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      float total = 0.f;
      for (int w = 0; w < T; ++w) total += part[w];
      loss() = total;
    });
    team.team_barrier();
  }
};

}  // namespace zs::kernels
