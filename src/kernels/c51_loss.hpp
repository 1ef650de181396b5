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

#include "backends/after_prior_grids.hpp"
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
  // Position of atom j's shifted support point r + γⁿ(1 − done)·z_j on the support, in atoms.
  // A support the config should have refused (a span or spacing that is not finite and
  // positive in float) gives NaN: it reads as atom 0, so no input can steer an index.
  KOKKOS_INLINE_FUNCTION float position(float reward, float done, int j) const {
    float tz = reward + gamma_n * (1.f - done) * z(j);
    tz = tz < v_min ? v_min : (tz > v_max ? v_max : tz);
    const float b = (tz - v_min) / delta();
    return b != b ? 0.f : b;
  }
  // Whether position(reward, done, ·) is nondecreasing in the atom: its shift γⁿ(1 − done) is
  // not negative (every float step of position() is monotone then; NaN gives false).
  KOKKOS_INLINE_FUNCTION bool ascending(float done) const { return gamma_n * (1.f - done) >= 0.f; }
};

// Target atom j's projected mass from source atoms at positions pos[0, Z) with probabilities
// prob: Σ_l prob_l·(1 − |pos_l − j|) over the sources within one atom of j, in source order.
// With `ascending` positions (Support::ascending) a binary search skips the sources two or
// more atoms below j and the walk stops at the first two or more above: the same terms in the
// same order, so the same bits, for a few loads instead of Z (a terminal sample, all sources on
// one point, still walks them all).
KOKKOS_INLINE_FUNCTION float gather_mass(const float* pos, const float* prob, int Z, int j, bool ascending) {
  const float fj = static_cast<float>(j);
  int l = 0;
  if (ascending) {
    int hi = Z;  // the first source with pos > j − 2
    while (l < hi) {
      const int mid = (l + hi) / 2;
      if (pos[mid] > fj - 2.f)
        hi = mid;
      else
        l = mid + 1;
    }
  }
  float m = 0.f;
  for (; l < Z; ++l) {
    if (ascending && pos[l] >= fj + 2.f) break;
    const float w = 1.f - ::fabsf(pos[l] - fj);
    if (w > 0.f) m += prob[l] * w;
  }
  return m;
}

// Device warps per branch in the loss (1 or 2), and the most warps a launch may have with two: a
// sample's chain is what a small batch waits for, so two warps halve it while the GPU has room,
// and only add barriers and idle lanes once its warp slots are full (BM_C51Loss, H200, branches
// {5, 3, 3}: 16.9 → 14.1 µs at B = 256, 1,536 warps; 85.5 → 106.3 µs at 4096, 24,576 warps).
// Also the most actions whose a* terms a warp forms at once, and the team's scratch budget.
inline constexpr int kC51WarpsPerBranch = 2;
inline constexpr long kC51SplitWarps = 4096;
inline constexpr int kC51QGroup = 4;
inline constexpr std::size_t kC51ScratchBytes = 46 * 1024;
inline constexpr int kC51BoundedThreads = 128;

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

  KOKKOS_INLINE_FUNCTION float position(int i, int j) const { return sup.position(rewards(i), dones(i), j); }

  int q_group = 1;  // device: actions whose Q terms a warp holds in scratch at once (c51_loss sets it)
  // Device: each target atom gathers only from the sources near it (gather_mass; the same bits)
  // instead of from every source (TrainerOptions::narrow_gather).
  bool narrow_gather = false;
  // Team threads (device warps) per branch, each with a share of its actions and atoms; 0 lets
  // c51_loss choose (tests set it to hold every split to one reference).
  int parts = 0;
  // Device: a launch bound asking the compiler for this many teams of up to kC51BoundedThreads
  // threads resident per SM (0: none; 10 or 12): more warps in flight for fewer registers each
  // (Nsight, H100, B = 4096: 64 registers held the loss to 47 % occupancy, latency-bound). The
  // same code, so the same bits; wider teams launch unbounded.
  int min_blocks = 0;

  // The greedy key (c51_q.hpp) of actions [first, last) of one branch on a device warp: the same
  // Q as acting (c51_q: double terms summed serially in atom order) without one lane doing every
  // action's exps alone: the lanes form the terms of q_group actions into the warp's scratch, then
  // one lane per action sums its row in order. An empty range gives 0, below every key.
  KOKKOS_INLINE_FUNCTION std::uint64_t device_best_key(const Member& team, double* terms, int i, int c0, int first,
                                                       int last) const {
    const int B = static_cast<int>(rewards.extent(0)), atoms = sup.atoms;
    const float dz = sup.delta();
    std::uint64_t key = 0;
    for (int a0 = first; a0 < last; a0 += q_group) {
      const int g = last - a0 < q_group ? last - a0 : q_group;
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
    return key;
  }

  // [begin, end) of n things that part h of `parts` takes: contiguous shares, the first ones larger.
  KOKKOS_INLINE_FUNCTION void share(int n, int h, int& begin, int& end) const {
    const int per = (n + parts - 1) / parts;
    begin = h * per < n ? h * per : n;
    end = begin + per < n ? begin + per : n;
  }

  // One team per sample; `parts` team threads per branch (device warps; on the host one thread
  // does all), each with a share of the branch's actions for a* and of its atoms for the rest, the
  // lanes over atoms, so every sum over atoms is a warp shuffle and branches run side by side.
  // Results meet in team scratch between phases (team barriers) and are added in a fixed order,
  // so the same inputs always give the same bits (graph replay equals direct launch). Nsight, H200,
  // B = 256: with one warp per branch the loss was a single warp's serial chain (~3,000
  // instructions at 9.6 cycles each, 1.45 warps a scheduler); two warps halve that chain.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& loss_sum) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MS>::accessible;
    const int i = team.league_rank();
    const int B = static_cast<int>(rewards.extent(0)), atoms = sup.atoms, K = table.branches, P = parts;
    const float coef = weights(i) / static_cast<float>(B * K);
    // A non-finite reward would reach the projection as a NaN position: poison the loss
    // instead, so the guard skips the step.
    const bool finite_inputs = is_finite(rewards(i)) && is_finite(dones(i)) && is_finite(weights(i));
    auto& scratch = team.team_scratch(0);
    float* const ce_of = static_cast<float*>(scratch.get_shmem(sizeof(float) * K));
    float* const dq_of = static_cast<float*>(scratch.get_shmem(sizeof(float) * K * atoms));
    float* const part_ce = static_cast<float*>(scratch.get_shmem(sizeof(float) * K * P));
    float* const part_m = static_cast<float*>(scratch.get_shmem(sizeof(float) * K * P));
    std::uint64_t* const keys =
        static_cast<std::uint64_t*>(scratch.get_shmem_aligned(sizeof(std::uint64_t) * K * P, alignof(std::uint64_t)));
    float* const source_of = host ? nullptr : static_cast<float*>(scratch.get_shmem(sizeof(float) * K * 2 * atoms));
    double* const terms_of =
        host ? nullptr
             : static_cast<double*>(
                   scratch.get_shmem_aligned(sizeof(double) * team.team_size() * q_group * atoms, alignof(double)));
    auto a_star_of = [&](const int k) {
      std::uint64_t key = 0;
      for (int h = 0; h < P; ++h) key = keys[k * P + h] > key ? keys[k * P + h] : key;
      return greedy_of(key);
    };
    // 1. Each part's best key among its share of the branch's actions.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K * P), [&](const int u) {
      const int k = u / P, c0 = table.cum(k), n = table.cum(k + 1) - c0;
      int first = 0, last = 0;
      share(n, u % P, first, last);
      std::uint64_t key = 0;
      if (host) {
        for (int a = first; a < last; ++a) {
          const std::uint64_t k_a = greedy_key(c51_q(&logp_online(B + i, c0 + a, 0), atoms, sup.v_min, sup.delta()), a);
          key = k_a > key ? k_a : key;
        }
      } else {
        key = device_best_key(team, terms_of + team.team_rank() * q_group * atoms, i, c0, first, last);
      }
      Kokkos::single(Kokkos::PerThread(team), [&]() { keys[u] = key; });
    });
    team.team_barrier();
    // 2. Device: each source atom's position and probability under the target net at a*, once, in
    // scratch for every lane to read (Nsight: recomputing them per (source, target) pair made the
    // loss 4× its memory time); each part forms its share of the atoms.
    if (!host) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K * P), [&](const int u) {
        const int k = u / P, c0 = table.cum(k), a_star = a_star_of(k);
        float* const pos = source_of + k * 2 * atoms;
        float* const prob = pos + atoms;
        int j0 = 0, j1 = 0;
        share(atoms, u % P, j0, j1);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, j1 - j0), [&](const int t) {
          pos[j0 + t] = position(i, j0 + t);
          prob[j0 + t] = ::expf(logp_target(i, c0 + a_star, j0 + t));
        });
      });
      team.team_barrier();
    }
    // 3. The projection of each part's share of target atoms, and its share of the cross-entropy
    // and of the projected mass.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K * P), [&](const int u) {
      const int k = u / P, c0 = table.cum(k), n = table.cum(k + 1) - c0, a_star = a_star_of(k);
      int j0 = 0, j1 = 0;
      share(atoms, u % P, j0, j1);
      // Categorical projection: p(⌈b⌉ − b) to ⌊b⌋ and p(b − ⌊b⌋) to ⌈b⌉, all of p when b is a
      // support point. The host's first part scatters, in atom order (its one thread then runs
      // the other parts, which read what it wrote). Device lanes gather instead — target atom j takes p_l·(1 − |b_l − j|) from every source atom
      // within one atom of it — the same split without atomics; each lane then reads back only
      // the atoms it wrote.
      if (host && u % P == 0) {
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
      } else if (!host) {
        const float* const pos = source_of + k * 2 * atoms;
        const float* const prob = pos + atoms;
        const bool ascending = narrow_gather && sup.ascending(dones(i));
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, j1 - j0), [&](const int t) {
          projected(i, k, j0 + t) = finite_inputs ? gather_mass(pos, prob, atoms, j0 + t, ascending) : 0.f;
        });
      }
      const int taken = actions(i, k);
      const bool valid = taken >= 0 && taken < n;  // a bad action poisons the loss too
      float ce = 0.f, msum = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, j1 - j0),
          [&](const int t, float& acc) { acc -= projected(i, k, j0 + t) * logp_online(i, c0 + (valid ? taken : 0), j0 + t); },
          ce);
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, j1 - j0), [&](const int t, float& acc) { acc += projected(i, k, j0 + t); }, msum);
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        part_ce[u] = ce;
        part_m[u] = msum;
      });
    });
    team.team_barrier();
    // 4. d(−Σ m log softmax)/d logit_j = softmax_j·Σm − m_j, only the taken action has a loss;
    // the dueling mean spreads it over the branch's actions and the value stream.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, K * P), [&](const int u) {
      const int k = u / P, c0 = table.cum(k), n = table.cum(k + 1) - c0;
      const int taken = actions(i, k);
      const bool valid = taken >= 0 && taken < n;
      float msum = 0.f;
      for (int h = 0; h < P; ++h) msum += part_m[k * P + h];
      int j0 = 0, j1 = 0;
      share(atoms, u % P, j0, j1);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, j1 - j0), [&](const int t) {
        const int j = j0 + t;
        const float dq = valid ? coef * (::expf(logp_online(i, c0 + taken, j)) * msum - projected(i, k, j)) : NAN;
        dq_of[k * atoms + j] = dq;
        float* const d_out = d_branch_out.data() + table.index(B, atoms, k, i, 0, j);
        for (int a = 0; a < n; ++a) d_out[a * atoms] = dq * ((a == taken ? 1.f : 0.f) - 1.f / static_cast<float>(n));
      });
      if (u % P == 0)
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          float ce = 0.f;
          for (int h = 0; h < P; ++h) ce += part_ce[k * P + h];
          ce_of[k] = valid ? ce / static_cast<float>(K) : NAN;
          best(i, k) = a_star_of(k);
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
  // Device: kC51WarpsPerBranch warps per branch while the team stays within 32 warps, its
  // scratch within kC51ScratchBytes and the launch within kC51SplitWarps warps, else one (up to
  // 32 branches a team; more take turns). Host:
  // one thread. Scratch blocks: CE per branch, value-gradient rows per branch, each part's CE,
  // mass and a* key and, on a device, each branch's source positions and probabilities and each
  // warp's a* terms: up to kC51QGroup actions' rows per warp, while the team's rows stay within
  // 16 KiB. Kokkos aligns each block (the 256 bytes).
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int K = f.table.branches, atoms = f.sup.atoms, widest = std::max(1, f.table.widest());
  C51Loss<Exec> g = f;
  int warps = 1;
  std::size_t bytes = 0;
  for (const int parts : {kC51WarpsPerBranch, 1}) {
    g.parts = f.parts > 0 ? f.parts : (host ? 1 : parts);
    warps = host ? 1 : std::min(32, K * g.parts);
    g.q_group = host ? 1 : std::max(1, std::min({kC51QGroup, widest, 16384 / (warps * 8 * atoms)}));
    const std::size_t sources = host ? 0 : sizeof(float) * 2 * K * atoms;
    const std::size_t terms = host ? 0 : sizeof(double) * static_cast<std::size_t>(warps * g.q_group * atoms);
    const std::size_t shares = static_cast<std::size_t>(K * g.parts) * (2 * sizeof(float) + sizeof(std::uint64_t));
    bytes = sizeof(float) * (K + K * atoms) + sources + terms + shares + 256;
    const bool fits = K * g.parts <= 32 && bytes <= kC51ScratchBytes &&
                      static_cast<long>(B) * K * g.parts <= kC51SplitWarps;
    if (f.parts > 0 || g.parts == 1 || fits) break;
  }
  require(f.min_blocks == 0 || f.min_blocks == 10 || f.min_blocks == 12, "c51_loss: min_blocks = ", f.min_blocks,
          "; expected 0 (no launch bound), 10 or 12");
  auto launch = [&](auto policy) {
    policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
    Kokkos::parallel_reduce("zs::c51_loss", policy, AfterPriorGrids<C51Loss<Exec>>(g), loss);
  };
  const int B_teams = static_cast<int>(B), lanes = host ? 1 : 32;
  if constexpr (!host) {
    if (f.min_blocks > 0 && warps * 32 <= kC51BoundedThreads) {
      if (f.min_blocks == 10)
        launch(Kokkos::TeamPolicy<Exec, Kokkos::LaunchBounds<kC51BoundedThreads, 10>>(exec, B_teams, warps, lanes));
      else
        launch(Kokkos::TeamPolicy<Exec, Kokkos::LaunchBounds<kC51BoundedThreads, 12>>(exec, B_teams, warps, lanes));
      return;
    }
  }
  launch(Kokkos::TeamPolicy<Exec>(exec, B_teams, warps, lanes));
}

}  // namespace zs::kernels
