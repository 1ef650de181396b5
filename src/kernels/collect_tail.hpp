// What an iteration of the training loop does after the network's forward, as one launch of one
// team: the schedules, the dueling head's log-softmax, Q, ε-greedy, the step of every
// environment and the replay insert, each stage the kernel the separate launches run (so the
// same arithmetic, the same bits), a team barrier between stages. The loop's collect is then two
// launches (the row-block forward, nn/row_block_forward.hpp, and this), where the separate
// kernels are fourteen: with 8 environments each launch does a few hundred threads' work, so the
// launches, not the work, were the iteration's cost (docs/performance.md).
//
// Stage order (each optional one skipped when its count is 0):
//   schedules (ε, β, α of this iteration) → the dueling head, tile by tile → Q → ε-greedy →
//   the acting RNG's counter → acted_obs ← obs → the environments' step → their RNG's counter →
//   the replay insert's data → its entries and sum-tree paths.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/acting.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/c51_q.hpp"
#include "kernels/counter_rng.hpp"
#include "kernels/loop_schedules.hpp"
#include "kernels/replay_kernels.hpp"

namespace zs::kernels {

// An acting-only tail (evaluation's forward and greedy pick, no environment in the launch).
template <class Exec>
struct NoEnvStep {
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t) const {}
};

// The tail's team scratch, enough for any device without an opt-in, and how many items of
// `bytes` each fit it at once (at least 1, at most `items`): the dueling head's rows a tile, Q's
// (row, action) pairs a chunk.
inline constexpr std::size_t kCollectTailScratch = 32 * 1024;
inline int collect_tail_chunk(std::size_t bytes, std::int64_t items) {
  const std::int64_t fit = static_cast<std::int64_t>(kCollectTailScratch / bytes);
  return static_cast<int>(fit < 1 ? 1 : (fit < items ? fit : items));
}

// A tagged environment kernel (MarketKernel's StepTag) as the tail's plain functor of an index.
template <class F, class Tag>
struct WithTag {
  F f;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { f(Tag{}, i); }
};

// Everything of the tail but the environments' step, whose functor type the environment knows.
template <class Exec>
struct CollectStages {
  using Mem = typename Exec::memory_space;
  int has_schedules = 0;
  AdvanceSchedules<Exec> schedules;
  // The dueling head in tiles of `tile_rows` rows of team scratch (DuelingTiles::run).
  DuelingTiles<Exec, DuelingOne> dueling;
  int dueling_tiles = 0;
  QFromLogProbs<Exec> q;
  std::int64_t q_count = 0;  // rows × actions
  int q_chunk = 1;           // (row, action) pairs whose atoms' terms fit the scratch at once
  EpsilonGreedyQ<Exec> greedy;
  std::int64_t greedy_count = 0;  // rows × branches
  AdvanceCounter<Exec> act_counter;
  CopyFlat<Exec, float> copy_obs;
  std::int64_t copy_count = 0;  // 0: no copy
  ReplayInsertData<Exec> insert;
  std::int64_t insert_count = 0;  // envs × obs_dim; 0: no insert

  // The dueling head's tile, then (the same bytes again) Q's terms; each within kCollectTailScratch.
  KOKKOS_INLINE_FUNCTION std::size_t scratch_bytes() const {
    const std::size_t head =
        sizeof(float) * static_cast<std::size_t>(dueling.tile_rows) * dueling_row_floats(dueling.table, dueling.atoms);
    const std::size_t terms = sizeof(double) * static_cast<std::size_t>(q_chunk) * dueling.atoms;
    return head > terms ? head : terms;
  }
};

template <class Exec, class EnvStep>
struct CollectTail {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Mem = typename Exec::memory_space;
  static constexpr bool kHost = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  // CUDA: 8 warps, the dueling head's log-softmax on a warp's lanes; host: one thread, whose
  // barriers are free.
  static constexpr int kTeamSize = kHost ? 1 : 8;
  static constexpr int kVectorLength = kHost ? 1 : 32;

  CollectStages<Exec> s;
  EnvStep env;
  std::int64_t env_count = 0;  // environments; 0: no step
  AdvanceCounter<Exec> env_counter;

  template <class F>
  KOKKOS_INLINE_FUNCTION static void over(const Member& team, std::int64_t n, const F& f) {
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, n), [&](const std::int64_t i) { f(i); });
    team.team_barrier();
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION static void once(const Member& team, const F& f) {
    Kokkos::single(Kokkos::PerTeam(team), [&]() { f(0); });
    team.team_barrier();
  }

  // Q of every (row, action) as c51_q forms it, bit for bit: each atom's term on its own lane
  // into scratch (the exponentials in double are most of the work: as QFromLogProbs' one thread
  // a pair they took 13.9 µs of an 8-environment collect on an H100), then each pair's sum in atom
  // order by one thread.
  KOKKOS_INLINE_FUNCTION void q_values(const Member& team, double* const terms) const {
    const QFromLogProbs<Exec>& f = s.q;
    const int atoms = static_cast<int>(f.logp.extent(2));
    const std::int64_t actions = static_cast<std::int64_t>(f.logp.extent(1));
    for (std::int64_t p0 = 0; p0 < s.q_count; p0 += s.q_chunk) {
      const std::int64_t n = s.q_count - p0 < s.q_chunk ? s.q_count - p0 : s.q_chunk;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, n * atoms), [&](const std::int64_t e) {
        const std::int64_t p = p0 + e / atoms;
        const int j = static_cast<int>(e % atoms);
        terms[e] = c51_q_term(f.logp(p / actions, p % actions, j), j, f.v_min, f.dz);
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, n), [&](const std::int64_t i) {
        double sum = 0.0;
        for (int j = 0; j < atoms; ++j) sum += terms[i * atoms + j];
        const std::int64_t p = p0 + i;
        f.q(p / actions, p % actions) = static_cast<float>(sum);
      });
      team.team_barrier();
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    if (s.has_schedules) once(team, s.schedules);
    void* const scratch = team.team_scratch(0).get_shmem(s.scratch_bytes());
    for (int t = 0; t < s.dueling_tiles; ++t) {
      s.dueling.run(team, t, static_cast<float*>(scratch));
      team.team_barrier();  // the next tile reuses the scratch
    }
    q_values(team, static_cast<double*>(scratch));
    over(team, s.greedy_count, s.greedy);
    if (s.greedy_count > 0) once(team, s.act_counter);
    if (s.copy_count > 0) over(team, s.copy_count, s.copy_obs);
    if (env_count > 0) {
      over(team, env_count, env);
      once(team, env_counter);
    }
    if (s.insert_count > 0) {
      over(team, s.insert_count, s.insert);
      ReplayInsertTree<Exec>{s.insert.st}(team);
    }
  }
};

// Enqueues the tail as one launch of one team. No allocation, no fence: a graph records it.
template <class Exec, class EnvStep>
void launch_collect_tail(const Exec& exec, const CollectStages<Exec>& stages, const EnvStep& env,
                         std::int64_t env_count, const Kokkos::View<std::uint64_t, typename Exec::memory_space>& env_counter) {
  using Tail = CollectTail<Exec, EnvStep>;
  require(stages.dueling_tiles >= 1 && stages.q_count >= 1 && stages.greedy_count >= 1,
          "launch_collect_tail: ", stages.dueling_tiles, " dueling tiles, ", stages.q_count, " Q values, ",
          stages.greedy_count, " picks; expected at least 1 of each (the tail acts)");
  require(env_count >= 0 && (env_count == 0 || env_counter.data() != nullptr), "launch_collect_tail: ", env_count,
          " environments", env_count > 0 ? " without an RNG counter" : "", "; expected >= 0, with a counter when > 0");
  const Tail tail{stages, env, env_count, AdvanceCounter<Exec>{env_counter}};
  Kokkos::parallel_for("zs::collect_tail",
                       Kokkos::TeamPolicy<Exec>(exec, 1, Tail::kTeamSize, Tail::kVectorLength)
                           .set_scratch_size(0, Kokkos::PerTeam(stages.scratch_bytes())),
                       tail);
}

}  // namespace zs::kernels
