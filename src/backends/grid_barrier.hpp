// A barrier across every team of one launch, for a persistent launch (phased_launch.hpp) whose
// teams are all resident at once: no team passes it until every team has reached it, and what a
// team stored before it is visible to every team after it. Only a backend that can keep a
// whole league resident has one (kCanPersist); elsewhere phases are separate launches.
#pragma once
#include "backends/backend.hpp"

namespace zs {

// The barrier's device state: an arrival count and a generation, both 0 when made. The last
// team to arrive resets the count and advances the generation, so one state serves every
// barrier of a launch and every later launch (a graph replay) without being reset.
class GridBarrierState {
 public:
  GridBarrierState() : words_("zs::grid_barrier", 2) {}
  unsigned* data() const { return words_.data(); }

 private:
  Kokkos::View<unsigned*, MemSpace> words_;
};

// The host's: never waited on (kCanPersist is false there), so a call is a bug.
template <class Exec>
struct GridBarrier {
  unsigned* state = nullptr;
  unsigned teams = 0;
  template <class Member>
  KOKKOS_INLINE_FUNCTION void wait(const Member&) const {
    Kokkos::abort("GridBarrier: this backend runs each phase as its own launch");
  }
};

}  // namespace zs

#if defined(KOKKOS_ENABLE_CUDA)
#include "backends/cuda/spin_grid_barrier.hpp"
#endif
