// The gradient norms inside the fused step (FusedOptions::norm_in_backward): each tile that writes
// a piece of a gradient also stores its Σ v² (ProductJob::squares), and the tile of the last
// backward phase that finishes last adds every gradient's in one team reduction, takes the roots and runs
// what reads the first norm next (the guard's verdict, then Adam's t and clip scale): no launch of
// its own over the gradients. Norm 0 is C51's; with riders, norm t is the t-th rider's
// (LossTerm::ride_fused). Slot order is fixed, so each norm is the same bits every run; it
// differs from grad_norms' only in the order of its double sums.
#pragma once
#include <cmath>

#include "backends/backend.hpp"
#include "backends/then.hpp"
#include "kernels/adam.hpp"
#include "kernels/double_sums.hpp"
#include "kernels/guard_check.hpp"
#include "kernels/last_team.hpp"
#include "kernels/term_limits.hpp"

namespace zs::kernels {

template <class Exec>
struct FusedNorm {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Tail = Then<GuardCheck<Exec>, AdamPrepare<Exec>>;
  const double* squares = nullptr;  // [slots]: each counted tile's Σ v², norm by norm
  int norms = 0;                     // norm t adds slots [first[t], first[t + 1])
  int first[kMaxTerms + 1] = {};
  int phase = -1;  // the phase whose last tile adds them (no counted tile comes later); −1: none
  int* arrived = nullptr;  // tiles of that phase done; the last one resets it for the next launch
  double* out[kMaxTerms] = {};  // ‖gradient t‖₂
  int has_tail = 0;
  Tail tail;

  // Slots a work item of the sum loads before its first add: independent loads in flight together.
  static constexpr int kLoadsAtOnce = 4;

  // Called by every tile of `phase` (`tiles` of them), the whole team, after its work.
  KOKKOS_INLINE_FUNCTION void after_tile(const Member& team, int tiles) const {
    if (!finished_last(team, arrived, tiles)) return;
    // Stored by other teams of this launch as well as by earlier phases: past L1.
    const volatile double* const s = squares;
    const DoubleSums<kMaxTerms> total = sum_all(team, s);
    // The same thread stores every norm and runs the tail, which reads them.
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      for (int t = 0; t < norms; ++t) *out[t] = ::sqrt(total.s[t]);
      if (has_tail) tail(0);
      *arrived = 0;
    });
  }

  // Every slot of every norm in one team reduction: item w loads slots w, w + items, … (coalesced
  // across the team), then adds each into its norm's sum. The order depends only on the slots and
  // the team's shape, so every run gives the same bits. One reduction, not one a norm: Kokkos
  // 3.4's CUDA team reduction ends without a barrier, so a second one right after it could
  // overwrite its shared slots while a slow warp still reads them (compute-sanitizer's racecheck
  // found that in the norm-by-norm loop this replaced).
  KOKKOS_INLINE_FUNCTION DoubleSums<kMaxTerms> sum_all(const Member& team, const volatile double* s) const {
    const int slots = first[norms];
    const int items = (slots + kLoadsAtOnce - 1) / kLoadsAtOnce;
    DoubleSums<kMaxTerms> total{};
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(team, items),
        [&](const int w, DoubleSums<kMaxTerms>& acc) {
          double v[kLoadsAtOnce];
          for (int j = 0; j < kLoadsAtOnce; ++j) {
            const int i = w + j * items;
            v[j] = i < slots ? s[i] : 0.0;
          }
          // Fixed indices into acc (a dynamic one would put it in local memory on a device).
          for (int j = 0; j < kLoadsAtOnce; ++j) {
            const int i = w + j * items;
            for (int t = 0; t < kMaxTerms; ++t)
              if (t < norms && i >= first[t] && i < first[t + 1]) acc.s[t] += v[j];
          }
        },
        Kokkos::Sum<DoubleSums<kMaxTerms>>(total));
    return total;
  }
};

}  // namespace zs::kernels
