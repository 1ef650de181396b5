// GridBarrier on CUDA: one thread per block arrives on a device counter and spins on the
// generation word, the pattern of cooperative groups' grid sync. It needs every block of the
// launch resident at once, which persistent_grid_teams() sizes the league for.
#pragma once

namespace zs {

template <>
struct GridBarrier<Kokkos::Cuda> {
  unsigned* state = nullptr;  // [0] arrivals, [1] generation
  unsigned teams = 0;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void wait(const Member& team) const {
    // Every thread of the block is done with this phase's loads and stores.
    team.team_barrier();
#ifdef __CUDA_ARCH__
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
      volatile unsigned* const generation = state + 1;
      // The generation cannot advance before this block arrives, so it is read first.
      const unsigned seen = *generation;
      __threadfence();  // release the block's stores (its other threads' too: the barrier above)
      if (atomicAdd(state, 1u) == teams - 1) {
        atomicExch(state, 0u);
        __threadfence();
        atomicAdd(state + 1, 1u);
      } else {
        while (*generation == seen) __nanosleep(32);
      }
      __threadfence();  // acquire: every block's stores before its arrival
    }
#endif
    team.team_barrier();
  }
};

}  // namespace zs
