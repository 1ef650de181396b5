// The start of a training-loop iteration whose collect runs beside the step, as one launch: the
// schedules, the batch's draw (and its states' gather where the batch is small) on team 0, the
// copy of the parameters the actor reads on the other teams. Each stage is the functor its own
// launch runs (so the same arithmetic, the same bits); only where it runs changes.
//
// Why one launch: with 8 cart-pole environments each of these kernels does a few hundred threads'
// work, and the four launches (schedules, copy, draw, gather) stood between the iteration's start
// and the step's first kernel, each with its launch gap (docs/performance.md).
#pragma once
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/loop_schedules.hpp"
#include "kernels/replay_kernels.hpp"
#include "kernels/sum_tree.hpp"

namespace zs::kernels {

template <class Exec>
struct LoopHead {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  AdvanceSchedules<Exec> schedules;
  ReplaySample<Exec> sample;
  bool gather_here = false;  // false: the gather is a launch of its own after this one
  CopyFlat<Exec, float> copy;
  std::int64_t copy_chunk = 1;  // values each team after team 0 copies

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    if (team.league_rank() > 0) {
      const std::int64_t count = static_cast<std::int64_t>(copy.src.extent(0));
      const std::int64_t first = (team.league_rank() - 1) * copy_chunk;
      const std::int64_t n = count - first < copy_chunk ? count - first : copy_chunk;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const std::int64_t i) { copy(first + i); });
      return;
    }
    // The draw reads β from device memory, as in its own launch: the barrier makes the value the
    // schedules just wrote visible to the whole team.
    Kokkos::single(Kokkos::PerTeam(team), [&]() { schedules(0); });
    team.team_barrier();
    sample.draw(team);
    if (!gather_here) return;
    team.team_barrier();  // the gather reads the indices the draw wrote
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, sample.gather_count()),
                         [&](const std::int64_t i) { sample.gather(i); });
  }
};

// Enqueues the head: one launch, then the gather's own launch when the batch has more than
// `gather_here_max` state values (B × state size; one team gathering a large batch would take
// longer than a launch). No allocation, no fence: a graph records it.
template <class Exec>
void launch_loop_head(const Exec& exec, const AdvanceSchedules<Exec>& schedules, const ReplaySample<Exec>& sample,
                      const CopyFlat<Exec, float>& copy, std::int64_t gather_here_max) {
  require(schedules.counters.extent(0) >= 1 && schedules.envs >= 1, "launch_loop_head: ",
          schedules.counters.extent(0), " counters and ", schedules.envs, " envs; expected at least 1 of each");
  require(copy.src.extent(0) == copy.dst.extent(0), "launch_loop_head: the copy's source has ", copy.src.extent(0),
          " values, its destination ", copy.dst.extent(0), "; expected the same");
  require(gather_here_max >= 0, "launch_loop_head: gather_here_max = ", gather_here_max, "; expected >= 0");
  LoopHead<Exec> head{schedules, sample, sample.gather_count() <= gather_here_max, copy, 1};
  // Team 0's size is the tree kernels' (sum_tree_team); on a GPU the copy's teams take eight
  // values a thread, on a host (one thread a team) blocks of 8192.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int team_size = sum_tree_team(exec, head).team_size();
  head.copy_chunk = host ? 8192 : std::int64_t{8} * team_size;
  const std::int64_t copy_teams = (static_cast<std::int64_t>(copy.src.extent(0)) + head.copy_chunk - 1) / head.copy_chunk;
  Kokkos::parallel_for("zs::loop_head", Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(1 + copy_teams), team_size),
                       head);
  if (!head.gather_here) replay_sample_gather(exec, sample);
}

}  // namespace zs::kernels
