// The handshake of a one-launch, deterministic reduction across teams (the threadfence-reduction
// pattern): each team writes its partial result, then counts itself done; the team that counts
// last sees every other team's partial and adds them in a fixed order. Used by the column sums
// (dense_batch.hpp) and the gradient norms (grad_norm.hpp).
#pragma once

#include "backends/backend.hpp"

namespace zs::kernels {

// Call with the whole team, after it has written its partial. True, in every thread of the
// team, for the team that is the `teams`-th to arrive at `counter`; that team must reset
// `counter` to 0 when it is done, so the next launch (a graph replay) starts from zero.
template <class Member>
KOKKOS_INLINE_FUNCTION bool finished_last(const Member& team, int* counter, int teams) {
  // Publish this team's partial before counting it as done.
  Kokkos::memory_fence();
  team.team_barrier();
  int last = 0;
  Kokkos::single(
      Kokkos::PerTeam(team), [&](int& l) { l = Kokkos::atomic_fetch_add(counter, 1) == teams - 1; }, last);
  if (last) Kokkos::memory_fence();  // then read the others' partials
  return last != 0;
}

}  // namespace zs::kernels
