// A kernel in phases: phase p is tiles(p) independent tiles, and a tile of phase p may read what
// any tile of an earlier phase wrote. Two ways to run it, with the same results bit for bit:
// - launches: one launch per phase, a team per tile (every backend);
// - persistent: one launch whose teams, all resident at once, take the tiles of each phase in
//   turn (team r takes tiles r, r + teams, …) and meet at a grid barrier between phases, so the
//   phases cost a barrier instead of a launch each (CUDA: kCanPersist).
// The functor F gives phases(), tiles(p) (host and device) and tile(team, p, t, scratch), where
// scratch is the team's PhasedShape::scratch_bytes, the same block for every tile the team runs;
// a tile that uses it ends with a team barrier, so the next may overwrite it.
#pragma once
#include <cstddef>
#include <type_traits>

#include "backends/after_prior_grids.hpp"
#include "backends/backend.hpp"
#include "backends/grid_barrier.hpp"
#include "core/error.hpp"

namespace zs {

enum class PhasedMode { launches, persistent };

struct PhasedShape {
  int team_size = 1, vector_length = 1;
  std::size_t scratch_bytes = 0;  // team scratch (level 0) every tile may use
};

// Teams a persistent launch may have on this backend so that all are resident at once:
// teams_per_sm on every multiprocessor (the caller keeps each team small enough for that many
// to fit). 0 where launches cannot persist (the host).
int persistent_grid_teams(int teams_per_sm);

namespace phased_detail {

// F::kWaitsForPriorGrids, false when F has none: whether F's tile() calls wait_for_prior_grids()
// itself (AfterPriorGrids' WaitsItself).
template <class F, class = void>
struct WaitsItself : std::false_type {};
template <class F>
struct WaitsItself<F, std::void_t<decltype(F::kWaitsForPriorGrids)>> : std::bool_constant<F::kWaitsForPriorGrids> {};

// F::kMinTeamsPerSm, 0 when F has none: a launch of one phase of F is compiled so that this many
// teams of F::kTeamThreads threads fit on a multiprocessor at once (CUDA's launch bounds: the
// registers a thread may take), so that code added to a tile cannot quietly cost a phase its
// single wave; 0: no bounds.
template <class F, class = void>
struct MinTeamsPerSm : std::integral_constant<unsigned, 0> {};
template <class F>
struct MinTeamsPerSm<F, std::void_t<decltype(F::kMinTeamsPerSm)>> : std::integral_constant<unsigned, F::kMinTeamsPerSm> {};
template <class Exec, class F, bool Bounded = (MinTeamsPerSm<F>::value > 0)>
struct PhasePolicy {
  using type = Kokkos::TeamPolicy<Exec>;
};
template <class Exec, class F>
struct PhasePolicy<Exec, F, true> {
  using type = Kokkos::TeamPolicy<Exec, Kokkos::LaunchBounds<F::kTeamThreads, F::kMinTeamsPerSm>>;
};

template <class Exec, class F>
struct OnePhase {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  F f;
  int phase = 0;
  std::size_t scratch_bytes = 0;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    f.tile(team, phase, team.league_rank(), team.team_scratch(0).get_shmem(scratch_bytes));
  }
};

template <class Exec, class F>
struct EveryPhase {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  F f;
  GridBarrier<Exec> barrier;
  std::size_t scratch_bytes = 0;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int teams = team.league_size(), phases = f.phases();
    // Once per team: Kokkos hands out team scratch by bumping a pointer.
    void* const scratch = team.team_scratch(0).get_shmem(scratch_bytes);
    for (int p = 0; p < phases; ++p) {
      const int tiles = f.tiles(p);
      for (int t = team.league_rank(); t < tiles; t += teams) f.tile(team, p, t, scratch);
      if (p + 1 < phases) barrier.wait(team);
    }
  }
};

}  // namespace phased_detail

// Enqueues phase p of f alone: a launch of a team per tile (what the launches mode does for
// every phase; a caller may launch each phase with its own F, one compiled for that phase). The
// launch waits for prior grids, so in a graph with programmatic edges (TrainerOptions::
// programmatic_launch) each phase's teams are placed while the phase before it drains.
template <class Exec, class F>
void launch_phase(const Exec& exec, const char* name, const F& f, const PhasedShape& shape, int p) {
  if (f.tiles(p) == 0) return;
  typename phased_detail::PhasePolicy<Exec, F>::type policy(exec, f.tiles(p), shape.team_size, shape.vector_length);
  policy.set_scratch_size(0, Kokkos::PerTeam(shape.scratch_bytes));
  using One = phased_detail::OnePhase<Exec, F>;
  using Launch = AfterPriorGrids<One, phased_detail::WaitsItself<F>::value>;
  Kokkos::parallel_for(name, policy, Launch(One{f, p, shape.scratch_bytes}));
}

// Enqueues every phase of f on exec. persistent_teams: the league of a persistent launch (at
// most persistent_grid_teams(), and it must share `barrier` with no launch running beside it);
// ignored, like mode, where the backend cannot persist.
template <class Exec, class F>
void phased_launch(const Exec& exec, const char* name, const F& f, const PhasedShape& shape, PhasedMode mode,
                   int persistent_teams, const GridBarrierState& barrier) {
  require(shape.team_size >= 1 && shape.vector_length >= 1, "phased_launch: team ", shape.team_size, " × ",
          shape.vector_length, "; expected at least 1 × 1");
  if (kCanPersist && mode == PhasedMode::persistent) {
    require(persistent_teams >= 1, "phased_launch: ", persistent_teams, " persistent teams; expected at least 1");
    Kokkos::TeamPolicy<Exec> policy(exec, persistent_teams, shape.team_size, shape.vector_length);
    policy.set_scratch_size(0, Kokkos::PerTeam(shape.scratch_bytes));
    const GridBarrier<Exec> b{barrier.data(), static_cast<unsigned>(persistent_teams)};
    Kokkos::parallel_for(name, policy, phased_detail::EveryPhase<Exec, F>{f, b, shape.scratch_bytes});
    return;
  }
  for (int p = 0; p < f.phases(); ++p) launch_phase(exec, name, f, shape, p);
}

}  // namespace zs
