// The replay buffer's kernels: insert one step of N envs (data, then entry completion and the
// sum-tree paths), sample a batch (tree descent, n-step return, IS weights, then the state
// gather) and update priorities. Semantics are in docs/replay.md; zs::Replay owns the views.
//
// Entry j = row·N + env; row r holds global step row_step(r). An entry is sampleable iff its
// sum-tree leaf is > 0 (priorities are ≥ priority_eps^α > 0, so a live entry never reads 0).
// Per-step state (step counter, sample counter, max priority, sampleable count, seed, β) is
// read from device memory so a recorded graph replays correctly.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/counter_rng.hpp"
#include "kernels/math.hpp"
#include "kernels/sum_tree.hpp"

namespace zs::kernels {

// Step flags stored per entry.
enum ReplayFlag : std::uint8_t { kReplayTerminated = 1, kReplayTruncated = 2 };
// The RNG stream id of replay sampling (acting uses others with the same counter-based RNG).
enum : std::uint64_t { kReplayRngStream = 0x52455041ull };

template <class Exec>
struct ReplayStore {
  using Mem = typename Exec::memory_space;
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> obs, next_obs;   // [C, S]
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Mem> actions;  // [C, K]
  Kokkos::View<float*, Mem> reward;                                // [C]
  Kokkos::View<std::uint8_t*, Mem> flags;                          // [C] ReplayFlag bits
  Kokkos::View<std::int64_t*, Mem> row_step;                       // [T] global step in each row
  Kokkos::View<double*, Mem> tree;                                 // [tree_shape.size()]
  Kokkos::View<std::int64_t, Mem> steps;                           // inserts so far
  Kokkos::View<std::int64_t, Mem> count;                           // sampleable entries
  Kokkos::View<double, Mem> max_priority;                          // running max, ≥ 1
  Kokkos::View<std::uint64_t, Mem> sample_calls, seed;
  int n_envs = 1, rows = 1, n_step = 1, obs_dim = 1, branches = 1;
  SumTreeShape tree_shape;
  bool prioritized = true;
};

// One thread per (env, state column): writes row steps() mod T. Column 0 also writes the env's
// action, reward and flags (a flag is set when its input is ≥ 0.5; NaN counts as not set).
template <class Exec>
struct ReplayInsertData {
  using Mem = typename Exec::memory_space;
  ReplayStore<Exec> st;
  Kokkos::View<const float**, Kokkos::LayoutRight, Mem> obs, next_obs;
  Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, Mem> actions;
  Kokkos::View<const float*, Mem> reward, terminated, truncated;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const int e = static_cast<int>(i / st.obs_dim), c = static_cast<int>(i % st.obs_dim);
    const std::int64_t t = st.steps();
    const std::int64_t r = t % st.rows;
    const std::int64_t j = r * st.n_envs + e;
    st.obs(j, c) = obs(e, c);
    st.next_obs(j, c) = next_obs(e, c);
    if (c != 0) return;
    st.reward(j) = reward(e);
    st.flags(j) = static_cast<std::uint8_t>((terminated(e) >= 0.5f ? kReplayTerminated : 0) |
                                            (truncated(e) >= 0.5f ? kReplayTruncated : 0));
    for (int k = 0; k < st.branches; ++k) st.actions(j, k) = actions(e, k);
    if (e == 0) st.row_step(r) = t;
  }
};

// One team: per env, retire the overwritten entry and complete the entries whose n-step window
// closes at this step; then refresh the tree paths of the n most recent rows, count, and step.
template <class Exec>
struct ReplayInsertTree {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ReplayStore<Exec> st;

  KOKKOS_INLINE_FUNCTION std::int64_t entry(const std::int64_t step, const int e) const {
    return (step % st.rows) * st.n_envs + e;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t t = st.steps();
    const double fresh = st.prioritized ? st.max_priority() : 1.0;
    const int n = st.n_step;
    std::int64_t delta = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, st.n_envs),
        [&](const int e, std::int64_t& d) {
          const std::int64_t j0 = entry(t, e);
          if (st.tree(st.tree_shape.leaf(j0)) > 0) d -= 1;
          st.tree(st.tree_shape.leaf(j0)) = 0;
          const std::uint8_t f = st.flags(j0);
          // Entry t−k's window is steps t−k .. t (m = k + 1): it closes now when step t ended the
          // episode or m = n; a window cut by a truncation before n steps is dropped.
          for (int k = 0; k < n && t - k >= 0; ++k) {
            const std::int64_t j = entry(t - k, e);
            if (k >= 1 && st.flags(j) != 0) break;  // step t−k ended an earlier episode
            const int m = k + 1;
            if (f == 0 && m != n) continue;
            if ((f & kReplayTerminated) || m == n) {
              st.tree(st.tree_shape.leaf(j)) = fresh;
              d += 1;
            }
          }
        },
        Kokkos::Sum<std::int64_t>(delta));
    team.team_barrier();
    const std::int64_t recent = t + 1 < n ? t + 1 : n;
    const int dirty = static_cast<int>(recent * st.n_envs);
    sum_tree_refresh<false>(team, st.tree, st.tree_shape, dirty, [&](const int d) {
      return entry(t - d / st.n_envs, d % st.n_envs);
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      st.steps() = t + 1;
      st.count() += delta;
    });
  }
};

// What sample() remembers for update_priorities() and for the state gather.
template <class Exec>
struct ReplaySampled {
  using Mem = typename Exec::memory_space;
  Kokkos::View<std::int64_t*, Mem> idx;       // [B] entry, −1 when nothing was sampleable
  Kokkos::View<std::int64_t*, Mem> stamp;     // [B] the entry's global step (detects overwrites)
  Kokkos::View<std::int64_t*, Mem> next_idx;  // [B] entry whose next_obs is s′
  Kokkos::View<double*, Mem> log_w;           // [B] scratch: −β·log(M·P(i))
};

// One team: stratified draws u_i = (i + U_i)·total/B through the tree, the n-step return, done,
// actions and IS weights (log space, so no β overflows; divided by the batch max). Then the call
// counter steps. An empty tree gives idx −1, zero rewards/dones/actions and weights 0.
template <class Exec>
struct ReplaySampleDraw {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ReplayStore<Exec> st;
  ReplaySampled<Exec> out;
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Mem> actions;
  Kokkos::View<float*, Mem> rewards, dones, weights;
  Kokkos::View<const float, Mem> beta;
  double gamma = 0.99;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int B = static_cast<int>(out.idx.extent(0));
    const double total = st.tree(1);
    const bool empty = !(total > 0);
    const double M = static_cast<double>(st.count());
    const double b = beta();
    const std::uint64_t call = st.sample_calls();
    const std::uint64_t seed = st.seed();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, B), [&](const int i) {
      if (empty) {
        out.idx(i) = out.stamp(i) = out.next_idx(i) = -1;
        rewards(i) = dones(i) = 0.f;
        for (int k = 0; k < st.branches; ++k) actions(i, k) = 0;
        out.log_w(i) = 0;
        return;
      }
      const std::uint64_t bits = counter_rng_bits(seed, kReplayRngStream, call, static_cast<std::uint64_t>(i), 0);
      const double U = static_cast<double>(bits >> 11) * 0x1.0p-53;
      const std::int64_t j = sum_tree_find(st.tree, st.tree_shape, (i + U) / B * total);
      const std::int64_t row = j / st.n_envs;
      const std::int64_t e = j % st.n_envs;
      double R = 0, g = 1;
      int m = st.n_step;
      for (int k = 0; k < st.n_step; ++k) {
        const std::int64_t jk = ((row + k) % st.rows) * st.n_envs + e;
        R += g * st.reward(jk);
        g *= gamma;
        if (st.flags(jk) != 0) {
          m = k + 1;
          break;
        }
      }
      const std::int64_t last = ((row + m - 1) % st.rows) * st.n_envs + e;
      rewards(i) = static_cast<float>(R);
      dones(i) = (st.flags(last) & kReplayTerminated) ? 1.f : 0.f;
      for (int k = 0; k < st.branches; ++k) actions(i, k) = st.actions(j, k);
      out.idx(i) = j;
      out.stamp(i) = st.row_step(row);
      out.next_idx(i) = last;
      out.log_w(i) = st.prioritized ? -b * ::log(M * (st.tree(st.tree_shape.leaf(j)) / total)) : 0.0;
    });
    team.team_barrier();
    double top = 0;  // the Max reducer starts each thread at −DBL_MAX
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, B),
        [&](const int i, double& mx) {
          if (out.log_w(i) > mx) mx = out.log_w(i);
        },
        Kokkos::Max<double>(top));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, B), [&](const int i) {
      weights(i) = empty ? 0.f : st.prioritized ? static_cast<float>(::exp(out.log_w(i) - top)) : 1.f;
    });
    team.team_barrier();
    Kokkos::single(Kokkos::PerTeam(team), [&]() { st.sample_calls() = call + 1; });
  }
};

// One thread per (sample, state column): s into rows [0, B), s′ into rows [B, 2B).
template <class Exec>
struct ReplaySampleGather {
  using Mem = typename Exec::memory_space;
  ReplayStore<Exec> st;
  ReplaySampled<Exec> out;
  Kokkos::View<float*, Mem> states;  // [2B·S]
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t B = static_cast<std::int64_t>(out.idx.extent(0));
    const std::int64_t b = i / st.obs_dim, c = i % st.obs_dim;
    const std::int64_t j = out.idx(b);
    states(b * st.obs_dim + c) = j < 0 ? 0.f : st.obs(j, c);
    states((B + b) * st.obs_dim + c) = j < 0 ? 0.f : st.next_obs(out.next_idx(b), c);
  }
};

// One team: leaf ← (|p| + eps)^α for the last sample's entries. Skipped: non-finite p, entries no
// longer sampleable or overwritten since the sample; among duplicates the last finite one in the
// batch wins (duplicates are adjacent: sample() writes its indices in non-decreasing order).
// Then the paths, and the running max priority.
template <class Exec>
struct ReplayUpdatePriorities {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ReplayStore<Exec> st;
  ReplaySampled<Exec> in;
  Kokkos::View<const float*, Mem> priorities;
  double alpha = 0.6, eps = 1e-6;
  // When set, α is read here on the device at every update (a schedule); a value outside
  // [0, 10] (or NaN) falls back to `alpha`.
  Kokkos::View<const float, Mem> alpha_now;

  KOKKOS_INLINE_FUNCTION double exponent() const {
    if (alpha_now.data() == nullptr) return alpha;
    const double a = alpha_now();
    return a >= 0.0 && a <= 10.0 ? a : alpha;
  }

  KOKKOS_INLINE_FUNCTION bool wins(const int i) const {
    const int B = static_cast<int>(in.idx.extent(0));
    const std::int64_t j = in.idx(i);
    if (j < 0 || !is_finite(priorities(i))) return false;
    // sample()'s indices are non-decreasing (stratified u_i through a monotone descent), so the
    // duplicates of j follow i directly: O(run length), not O(B).
    for (int l = i + 1; l < B && in.idx(l) == j; ++l)
      if (is_finite(priorities(l))) return false;
    // Only the winner reads the leaf from here on: no read races a write of the same leaf.
    return st.row_step(j / st.n_envs) == in.stamp(i) && st.tree(st.tree_shape.leaf(j)) > 0;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int B = static_cast<int>(in.idx.extent(0));
    const double a = exponent();
    double top = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, B),
        [&](const int i, double& mx) {
          if (!wins(i)) return;
          // Clamped so a live leaf is never 0 (0 means "not sampleable") and 2^28 leaves cannot
          // overflow the total, whatever α ≤ 10 does to a tiny eps or a huge |p|.
          const double raw = ::pow(::fabs(static_cast<double>(priorities(i))) + eps, a);
          const double v = ::fmin(::fmax(raw, 1e-300), 1e290);
          st.tree(st.tree_shape.leaf(in.idx(i))) = v;
          if (v > mx) mx = v;
        },
        Kokkos::Max<double>(top));
    team.team_barrier();
    sum_tree_refresh(team, st.tree, st.tree_shape, B, [&](const int d) { return in.idx(d); });
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      if (top > st.max_priority()) st.max_priority() = top;
    });
  }
};

template <class Exec>
void replay_insert(const Exec& exec, const ReplayInsertData<Exec>& data) {
  Kokkos::parallel_for("zs::replay_insert_data",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, std::int64_t(data.st.n_envs) * data.st.obs_dim),
                       data);
  const ReplayInsertTree<Exec> tree{data.st};
  Kokkos::parallel_for("zs::replay_insert_tree", sum_tree_team(exec, tree), tree);
}

// A batch's draw and the gather of its states (Replay::sample_stage).
template <class Exec>
struct ReplaySample {
  ReplaySampleDraw<Exec> draw;
  ReplaySampleGather<Exec> gather;
  // The gather's threads: B × state size.
  KOKKOS_INLINE_FUNCTION std::int64_t gather_count() const {
    return static_cast<std::int64_t>(draw.out.idx.extent(0)) * draw.st.obs_dim;
  }
};

template <class Exec>
void replay_sample_gather(const Exec& exec, const ReplaySample<Exec>& s) {
  Kokkos::parallel_for("zs::replay_sample_gather",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, s.gather_count()), s.gather);
}

template <class Exec>
void replay_sample(const Exec& exec, const ReplaySample<Exec>& s) {
  Kokkos::parallel_for("zs::replay_sample_draw", sum_tree_team(exec, s.draw), s.draw);
  replay_sample_gather(exec, s);
}

template <class Exec>
void replay_update_priorities(const Exec& exec, const ReplayUpdatePriorities<Exec>& f) {
  Kokkos::parallel_for("zs::replay_update_priorities", sum_tree_team(exec, f), f);
}

}  // namespace zs::kernels
