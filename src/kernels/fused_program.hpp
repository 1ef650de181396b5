// The fused step as data: phases of tiles, each tile one of a few kinds (a tile of a matrix
// product, a tile of rows of the dueling head, one (sample, branch) of the C51 loss with or
// without its rows' dueling head, or the loss's totals), run by phased_launch
// (backends/phased_launch.hpp) as one persistent launch or a launch per phase. nn/fused_step.hpp builds the tables once; nothing is decided per step.
#pragma once
#include <cstdint>

#include "backends/backend.hpp"
#include "kernels/c51_branch_loss.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/fused_norm.hpp"
#include "kernels/tile_clocks.hpp"
#include "kernels/tile_product.hpp"

namespace zs::kernels {

// c51_head_branch: one (sample, branch) of the loss with its three rows' dueling head before it
// (C51BranchLoss::head_branch), in place of a dueling phase and a c51_branch phase.
enum class FusedTileKind : int { product = 0, dueling = 1, c51_branch = 2, c51_finish = 3, c51_head_branch = 4 };

// A run of consecutive tiles of one phase: tiles [tile0, tile0 + tiles) are `kind`'s, `job` the
// product's entry in the job table.
struct FusedItem {
  int kind = 0, job = 0, tile0 = 0, tiles = 0;
};

inline constexpr int kFusedMaxPhases = 24;

// What the timeline (FusedOptions::timeline) keeps of each tile: the global timer (ns) at its
// start and end, its multiprocessor's cycle counter at its start, once it has waited for the
// grids before its launch, and at its end, and that multiprocessor's index; and the cycles at
// the ends of the first three parts of its work, where its kind has them: a product once its
// first chunk has landed in scratch, once its chunk loop is done and once its epilogue has stored
// (TileProduct::run's clocks); the loss with its head once the head is formed, once a* is found
// and once the projection is done (C51BranchLoss::head_branch's).
enum class TileClock : int { begin_ns = 0, begin_cycles, waited_cycles, end_cycles, end_ns, sm, part1, part2, part3 };
inline constexpr int kTileClocks = 9;
// Items of all phases together: they ride in the kernel's parameters (FusedProgram::item_tile0).
inline constexpr int kFusedMaxItems = 128;

// A kind's bit in a mask of kinds (FusedProgram::phase_kinds, tile_of).
KOKKOS_INLINE_FUNCTION constexpr int kind_bit(FusedTileKind k) { return 1 << static_cast<int>(k); }
inline constexpr int kAllKinds = 31;

template <class Exec>
struct FusedProgram {
  using MS = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const ProductJob*, MS> jobs;
  Kokkos::View<const ProductSegment*, MS> segments;
  int n_phases = 0;
  // The products' TileProduct shape and stages (FusedOptions::tile_rows, tile_cols, tile_stages).
  int tile_rows = 64, tile_cols = 32, tile_stages = 3;
  // A product tile reads its job and segments before it waits for the grids its launch follows,
  // and only then its operands (FusedOptions::tables_before_wait); else every tile waits first.
  // The tables are written when the kernel is built, never by a step.
  int tables_before_wait = 0;
  // When the grids after a phase's launch may be scheduled (FusedOptions::dependents_early): 0 once
  // every block has exited; 1 once every block has finished its tile (before it exits); 2 once
  // every product tile is past its chunk loop (before its epilogue; other tiles: 1).
  int dependents_early = 0;
  int phase_item[kFusedMaxPhases + 1] = {};  // phase p's items: [phase_item[p], phase_item[p + 1])
  int phase_tiles[kFusedMaxPhases] = {};
  int phase_kinds[kFusedMaxPhases] = {};  // the kinds of tile phase p holds (kind_bit()s)
  // The items (FusedItem) as the kernel's parameters: a tile finds its own by a scan of constant
  // memory at its start instead of a chain of dependent global loads, one per item before it.
  int item_tile0[kFusedMaxItems] = {};
  int item_code[kFusedMaxItems] = {};  // kind | job << 3
  int item_seg0[kFusedMaxItems] = {};  // a product's first segment: its load need not wait for the job's
  DuelingTiles<Exec, DuelingTable<MS>> dueling;
  C51BranchLoss<Exec> c51;
  FusedNorm<Exec> norm;  // the gradient norm in the last backward phase (FusedOptions::norm_in_backward)
  // FusedOptions::timeline: kTileClocks clocks a tile (TileClock) at timeline + kTileClocks · (the
  // tiles of the phases before p + t), stored by each tile's first thread; null: none.
  std::uint64_t* timeline = nullptr;

  KOKKOS_INLINE_FUNCTION int phases() const { return n_phases; }
  KOKKOS_INLINE_FUNCTION int tiles(int p) const { return phase_tiles[p]; }

  static KOKKOS_INLINE_FUNCTION constexpr int item_code_of(int kind, int job) { return kind | job << 3; }

  // The item that holds tile t of phase p.
  KOKKOS_INLINE_FUNCTION int item_of(int p, int t) const {
    int it = phase_item[p];
    while (it + 1 < phase_item[p + 1] && item_tile0[it + 1] <= t) ++it;
    return it;
  }

  KOKKOS_INLINE_FUNCTION void tile(const Member& team, int p, int t, void* scratch) const {
    if (tile_rows == 64)
      tile_of<kAllKinds, 64, 32>(team, p, t, scratch);
    else if (tile_cols == 32)
      tile_stages == 4 ? tile_of<kAllKinds, 32, 32, 4>(team, p, t, scratch)
                       : tile_of<kAllKinds, 32, 32>(team, p, t, scratch);
    else
      tile_stages == 4 ? tile_of<kAllKinds, 32, 16, 4>(team, p, t, scratch)
                       : tile_of<kAllKinds, 32, 16>(team, p, t, scratch);
  }

  // tile() compiled for the tile kinds in `Kinds` only (a mask of kind_bit()s; the phase holds no
  // other) and products of Rows × Cols tiles in Stages stages (tile_rows, tile_cols, tile_stages): a
  // kernel of only the dueling head or only the loss then takes the registers that its own code
  // needs, not the most any kind needs, and fits more teams on a multiprocessor.
  template <int Kinds, int Rows, int Cols, int Stages = 3>
  KOKKOS_INLINE_FUNCTION void tile_of(const Member& team, int p, int t, void* scratch) const {
    if (timeline) stamp(team, p, t, TileClock::begin_ns, global_ns());
    if (timeline) stamp(team, p, t, TileClock::begin_cycles, sm_cycles());
    const int it = item_of(p, t);
    const int code = item_code[it], local = t - item_tile0[it];
    const bool early = tables_before_wait != 0 && static_cast<FusedTileKind>(code & 7) == FusedTileKind::product;
    if (!early) wait_for_prior_grids();
    if (timeline) stamp(team, p, t, TileClock::waited_cycles, sm_cycles());
    switch (static_cast<FusedTileKind>(code & 7)) {
      case FusedTileKind::product:
        if constexpr ((Kinds & kind_bit(FusedTileKind::product)) != 0) {
          const ProductJob job = jobs(code >> 3);
          // The splits of one output tile are neighbours: they run at about the same time, so the
          // last one finds the others' partials still in L2.
          const int per_row = job.tiles_n * job.splits, rest = local % per_row;
          TileProduct<Exec, Rows, Cols, Stages>::run(
              team, static_cast<float*>(scratch), job, segments.data() + item_seg0[it], local / per_row,
              rest / job.splits, rest % job.splits, early, dependents_early == 2, parts_of(p, t));
        }
        break;
      case FusedTileKind::dueling:
        if constexpr ((Kinds & kind_bit(FusedTileKind::dueling)) != 0)
          dueling.run(team, local, static_cast<float*>(scratch));
        break;
      case FusedTileKind::c51_branch:
        if constexpr ((Kinds & kind_bit(FusedTileKind::c51_branch)) != 0)
          c51.branch(team, local / c51.table.branches, local % c51.table.branches, scratch);
        break;
      case FusedTileKind::c51_finish:
        if constexpr ((Kinds & kind_bit(FusedTileKind::c51_finish)) != 0) c51.finish(team, scratch);
        break;
      case FusedTileKind::c51_head_branch:
        if constexpr ((Kinds & kind_bit(FusedTileKind::c51_head_branch)) != 0)
          c51.head_branch(team, local / c51.table.branches, local % c51.table.branches, scratch, parts_of(p, t));
        break;
    }
    // The next tile this team runs may overwrite the scratch this one read.
    team.team_barrier();
    // The norm's phase is one of products (the gradient's last tiles).
    if constexpr ((Kinds & kind_bit(FusedTileKind::product)) != 0)
      if (p == norm.phase) norm.after_tile(team, phase_tiles[p]);
    if (dependents_early != 0) allow_dependent_grids();
    if (timeline) {
      stamp(team, p, t, TileClock::end_cycles, sm_cycles());
      stamp(team, p, t, TileClock::end_ns, global_ns());
      stamp(team, p, t, TileClock::sm, static_cast<std::uint64_t>(sm_index()));
    }
  }

 private:
  // Clock `c` of tile t of phase p (store_clock). Its place is found again at each stamp, so that
  // no pointer into the timeline stays in a register across the tile either.
  KOKKOS_INLINE_FUNCTION void stamp(const Member& team, int p, int t, TileClock c, std::uint64_t v) const {
    store_clock(team, timeline + kTileClocks * tile_index(p, t) + static_cast<int>(c), v);
  }
  // Where tile t of phase p stamps the ends of its parts (TileClock::part1 on), or null.
  KOKKOS_INLINE_FUNCTION std::uint64_t* parts_of(int p, int t) const {
    return timeline ? timeline + kTileClocks * tile_index(p, t) + static_cast<int>(TileClock::part1) : nullptr;
  }
  // Tile t of phase p among every phase's tiles.
  KOKKOS_INLINE_FUNCTION int tile_index(int p, int t) const {
    for (int q = 0; q < p; ++q) t += phase_tiles[q];
    return t;
  }
};

}  // namespace zs::kernels
