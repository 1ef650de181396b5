// The gradient norm inside the fused step (FusedOptions::norm_in_backward): each tile that writes
// a piece of the gradient also stores its Σ v² (ProductJob::squares), and the tile of the last
// backward phase that finishes last adds them in slot order, takes the root and runs what reads
// the norm next (the guard's verdict, then Adam's t and clip scale): no launch of its own over the
// gradient. Slot order is fixed, so the norm is the same bits every run; it differs from
// grad_norms' only in the order of its double sums.
#pragma once
#include <cmath>

#include "backends/backend.hpp"
#include "backends/then.hpp"
#include "kernels/adam.hpp"
#include "kernels/guard_check.hpp"
#include "kernels/last_team.hpp"

namespace zs::kernels {

template <class Exec>
struct FusedNorm {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Tail = Then<GuardCheck<Exec>, AdamPrepare<Exec>>;
  const double* squares = nullptr;  // [slots]: each counted tile's Σ v²
  int slots = 0;
  int phase = -1;  // the phase whose last tile adds them (no counted tile comes later); −1: none
  int* arrived = nullptr;  // tiles of that phase done; the last one resets it for the next launch
  double* out = nullptr;   // ‖gradient‖₂
  int has_tail = 0;
  Tail tail;

  // Called by every tile of `phase` (`tiles` of them), the whole team, after its work.
  KOKKOS_INLINE_FUNCTION void after_tile(const Member& team, int tiles) const {
    if (!finished_last(team, arrived, tiles)) return;
    // Stored by other teams of this launch as well as by earlier phases: past L1.
    const volatile double* const s = squares;
    double total = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(team, slots), [&](const int i, double& acc) { acc += s[i]; }, total);
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      *out = ::sqrt(total);
      if (has_tail) tail(0);
      *arrived = 0;
    });
  }
};

}  // namespace zs::kernels
