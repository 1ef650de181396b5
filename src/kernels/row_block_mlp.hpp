// A stack of dense layers (y = x·Wᵀ + b, ReLU between them) for several passes in one launch,
// a team per block of Rows rows carrying them through every layer: the row-block design of
// docs/performance.md ("the per-layer design's floor"). The block's activations stay in team
// scratch (two buffers, a layer's input and output); the weights come straight from L2 into
// registers, each warp loading only its own columns, Depth k-steps ahead of the tensor cores,
// so that about 64 KiB a multiprocessor is on its way at once (Little's law at L2's latency).
// A warp's loads run on across its column groups and across layers (the next layer's first
// weights land while this one's epilogue runs); only the activations wait for a barrier.
// The products are WarpTile's k-steps of 16 (TF32 tensor cores on CUDA, FP32 loops on the host).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "backends/device_info.hpp"
#include "backends/host_copy.hpp"
#include "backends/warp_tile.hpp"
#include "core/error.hpp"
#include "kernels/fused_mlp.hpp"
#include "kernels/tile_clocks.hpp"

namespace zs::kernels {

namespace row_block_detail {

// One layer of one pass, as the kernel reads it: vec says W's rows can be loaded 16 bytes at a
// time (W 16-byte aligned, its width a multiple of 4).
struct Layer {
  const float* w = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  int vec = 0;
};

}  // namespace row_block_detail

// Rows: 16 or 32 rows a team (one or two WarpTiles down a column). Warps: warps a team, each
// owning groups of Group (16 or 32) output columns in turn. Depth: k-steps of weights a warp
// keeps in flight.
template <class Exec, int Rows = 32, int Warps = 8, int Depth = 4, int Group = 32>
struct RowBlockMlp {
  static_assert(Rows == 16 || Rows == 32, "16 or 32 rows a team");
  using Tile = WarpTile<Exec>;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Mem = typename Exec::memory_space;
  static constexpr bool kHost = Tile::kVectorLength == 1;
  static constexpr int kTm = Rows / Tile::kM;
  static_assert(Group == 16 || Group == 32, "column groups of 16 or 32");
  static constexpr int kGroup = Group;  // output columns a warp owns at once
  static constexpr int kTn = kGroup / Tile::kN;
  static constexpr int kStep = Tile::kK16;
  // Widths are padded to whole rounds of Depth steps (and so of column groups): a group's loop
  // then indexes its register stages with constants.
  static constexpr int kPad = kStep * Depth;
  static_assert(kPad % kGroup == 0, "a padded width is whole column groups");
  // CUDA: a warp a team thread; host: one thread plays every warp in turn.
  static constexpr int kTeamSize = kHost ? 1 : Warps;
  static constexpr int kSlots = kHost ? Warps : 1;
  static constexpr int kThreads = kTeamSize * Tile::kVectorLength;
  // A scratch row: the widest padded width, plus 16 floats on CUDA so that a quarter warp's
  // 16-byte loads of rows g and g + 1 fall in different banks.
  static constexpr int kRowPad = kHost ? 0 : 16;

  KOKKOS_INLINE_FUNCTION static constexpr int padded(int w) { return (w + kPad - 1) / kPad * kPad; }

  Kokkos::View<const fused_detail::PassEntry*, Mem> passes;
  Kokkos::View<const row_block_detail::Layer*, Mem> layers;  // [pass][layer]
  Kokkos::View<const int*, Mem> widths;                      // [n_layers + 1]
  int n_layers = 0, ld = 0, last_relu = 0;
  // When given, the block's cycles at its start, once its input is staged and once each layer is
  // done: clocks[block·(n_layers + 2) + i] (a benchmark's timeline).
  std::uint64_t* clocks = nullptr;

  static std::size_t scratch_bytes(int ld) { return sizeof(float) * 2 * Rows * static_cast<std::size_t>(ld); }

  // Where a warp's weight loads are: layer l, column group cg, k-step s of the pass.
  struct Cursor {
    int l = 0, cg = 0, s = 0;
    int in = 0, out = 0, steps = 0, groups = 0, vec = 0;
    const float* w = nullptr;
  };

  KOKKOS_INLINE_FUNCTION void settle(Cursor& c, int warp, int layer0) const {
    for (;;) {
      if (c.l >= n_layers) {
        c.w = nullptr;  // the warp's work is all loaded
        return;
      }
      c.in = widths(c.l);
      c.out = widths(c.l + 1);
      c.steps = padded(c.in) / kStep;
      c.groups = padded(c.out) / kGroup;
      if (c.cg < c.groups) break;
      ++c.l;
      c.cg = warp;
    }
    const row_block_detail::Layer& layer = layers(layer0 + c.l);
    c.w = layer.w;
    c.vec = layer.vec;
  }
  KOKKOS_INLINE_FUNCTION void advance(Cursor& c, int warp, int layer0) const {
    if (++c.s < c.steps) return;
    c.s = 0;
    c.cg += Warps;
    if (c.cg < c.groups) return;
    ++c.l;
    c.cg = warp;
    settle(c, warp, layer0);
  }
  // The k-step at the cursor, into f (nothing once the warp's work is all loaded).
  KOKKOS_INLINE_FUNCTION static void load(const Cursor& c, typename Tile::B16 (&f)[kTn]) {
    if (c.w == nullptr) return;
    const int k0 = c.s * kStep;
    ZS_UNROLL
    for (int j = 0; j < kTn; ++j) {
      const int n0 = c.cg * kGroup + j * Tile::kN;
      const bool any = n0 < c.out && k0 < c.in;
      Tile::load_b16(f[j], any ? c.w + static_cast<std::int64_t>(n0) * c.in + k0 : c.w, c.in, c.out - n0, c.in - k0,
                     c.vec != 0);
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int block = team.league_rank(), n_passes = static_cast<int>(passes.extent(0));
    int p = 0;
    while (p + 1 < n_passes && passes(p + 1).tile0 <= block) ++p;
    const fused_detail::PassEntry pass = passes(p);
    const int r0 = (block - pass.tile0) * Rows;
    const int live = pass.rows - r0 < Rows ? pass.rows - r0 : Rows;
    float* const buf[2] = {static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * Rows * ld)),
                           static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * Rows * ld))};
    const int warp0 = kHost ? 0 : team.team_rank();
    std::uint64_t* const stamps = clocks != nullptr ? clocks + block * (n_layers + 2) : nullptr;
    stamp_cycles(team, stamps, 0);

    // Every warp starts its weight loads before the input is staged: they need nothing from it.
    Cursor cur[kSlots];
    typename Tile::B16 stage[kSlots][Depth][kTn];
    ZS_UNROLL
    for (int slot = 0; slot < kSlots; ++slot) {
      const int warp = warp0 + slot;
      cur[slot].cg = warp;
      settle(cur[slot], warp, pass.layer0);
      ZS_UNROLL
      for (int d = 0; d < Depth; ++d) {
        load(cur[slot], stage[slot][d]);
        advance(cur[slot], warp, pass.layer0);
      }
    }

    {
      const int in = widths(0), in_pad = padded(in);
      float* const x = buf[0];
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Rows * in_pad), [&](const int i) {
        const int r = i / in_pad, c = i % in_pad;
        // Zeros past the input's edges: the weights are zero there too, but 0 · garbage may be NaN.
        x[r * ld + c] =
            Tile::to_operand(r < live && c < in ? pass.input[static_cast<std::int64_t>(r0 + r) * in + c] : 0.f);
      });
    }
    team.team_barrier();
    stamp_cycles(team, stamps, 1);

    for (int l = 0; l < n_layers; ++l) {
      const float* const x = buf[l & 1];
      float* const y = buf[(l + 1) & 1];
      const int in = widths(l), out = widths(l + 1);
      const int steps = padded(in) / kStep, groups = padded(out) / kGroup;
      const row_block_detail::Layer layer = layers(pass.layer0 + l);
      const bool relu = l + 1 < n_layers || last_relu != 0;
      ZS_UNROLL
      for (int slot = 0; slot < kSlots; ++slot) {
        const int warp = warp0 + slot;
        for (int cg = warp; cg < groups; cg += Warps) {
          Tile acc[kTm][kTn];
          ZS_UNROLL
          for (int i = 0; i < kTm; ++i)
            ZS_UNROLL
            for (int j = 0; j < kTn; ++j) acc[i][j].zero();
          for (int s0 = 0; s0 < steps; s0 += Depth) {
            ZS_UNROLL
            for (int d = 0; d < Depth; ++d) {
              const int k0 = (s0 + d) * kStep;
              typename Tile::A16 a[kTm];
              ZS_UNROLL
              for (int i = 0; i < kTm; ++i) Tile::load_a16(a[i], x + i * Tile::kM * ld + k0, ld);
              ZS_UNROLL
              for (int j = 0; j < kTn; ++j) Tile::round_b16(stage[slot][d][j]);
              ZS_UNROLL
              for (int i = 0; i < kTm; ++i)
                ZS_UNROLL
                for (int j = 0; j < kTn; ++j) acc[i][j].mma16(a[i], stage[slot][d][j]);
              load(cur[slot], stage[slot][d]);
              advance(cur[slot], warp, pass.layer0);
            }
          }
          epilogue(acc, layer, cg, out, relu, y, r0, live);
        }
      }
      team.team_barrier();
      stamp_cycles(team, stamps, 2 + l);
    }
  }

  // acc + bias, the ReLU (NaN stays NaN for the guard), into the next layer's scratch (as its A
  // operand) and, for the rows and columns that exist, to the layer's output. Columns past the
  // layer's width come out 0 (zero weights, no bias), as the next layer's padding must be.
  KOKKOS_INLINE_FUNCTION void epilogue(const Tile (&acc)[kTm][kTn], const row_block_detail::Layer& layer, int cg,
                                       int out, bool relu, float* y, int r0, int live) const {
    // Every bias first: a load after a store the compiler cannot tell apart waits for it. A
    // column's bias is kept by accumulator element (the same columns in every row tile), so that
    // on CUDA each index is a constant.
    constexpr int kAcc = static_cast<int>(sizeof(Tile::c) / sizeof(float));
    float bias[kTn][kAcc];
    ZS_UNROLL
    for (int j = 0; j < kTn; ++j) {
      int e = 0;
      acc[0][j].for_each([&](int, int n, float) {
        const int col = cg * kGroup + j * Tile::kN + n;
        bias[j][e++] = col < out ? layer.b[col] : 0.f;
      });
    }
    ZS_UNROLL
    for (int i = 0; i < kTm; ++i)
      ZS_UNROLL
      for (int j = 0; j < kTn; ++j) {
        int e = 0;
        acc[i][j].for_each([&](int m, int n, float v) {
          const int row = i * Tile::kM + m, col = cg * kGroup + j * Tile::kN + n;
          v += bias[j][e++];
          if (relu && v < 0.f) v = 0.f;
          y[row * ld + col] = Tile::to_operand(v);
          if (layer.out != nullptr && row < live && col < out)
            layer.out[static_cast<std::int64_t>(r0 + row) * out + col] = v;
        });
      }
  }
};

// A prepared launch of RowBlockMlp, with FusedMlpLaunch's interface: shapes checked and tables
// on the device once, at construction; operator() enqueues one kernel and allocates nothing.
template <class Exec, int Rows = 32, int Warps = 8, int Depth = 4, int Group = 32>
class RowBlockMlpLaunch {
 public:
  using Kernel = RowBlockMlp<Exec, Rows, Warps, Depth, Group>;

  RowBlockMlpLaunch() = default;
  // widths: the input width, then each layer's output width. last: the last layer's activation.
  RowBlockMlpLaunch(const std::vector<int>& widths, const std::vector<FusedMlpPass>& passes, FusedAct last)
      : n_layers_(static_cast<int>(widths.size()) - 1), last_(last) {
    const int widest = fused_detail::checked_widest("RowBlockMlpLaunch", widths, passes.size());
    ld_ = Kernel::padded(widest) + Kernel::kRowPad;
    scratch_ = Kernel::scratch_bytes(ld_);
    const std::size_t most = max_team_scratch_bytes();
    require(scratch_ <= most, "RowBlockMlpLaunch: ", Rows, " rows of width ", widest, " need ", scratch_,
            " bytes of team scratch; expected at most ", most, " (narrower layers)");

    std::vector<fused_detail::PassEntry> entries;
    std::vector<row_block_detail::Layer> table;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const FusedMlpPass& x = passes[p];
      fused_detail::check_pass("RowBlockMlpLaunch", p, x, n_layers_);
      entries.push_back({x.input, x.rows, static_cast<int>(table.size()), teams_});
      for (int l = 0; l < n_layers_; ++l) {
        const FusedMlpLayer& y = x.layers[l];
        const bool vec = widths[l] % 4 == 0 && reinterpret_cast<std::uintptr_t>(y.w) % 16 == 0;
        table.push_back({y.w, y.b, y.out, vec ? 1 : 0});
      }
      teams_ += (x.rows + Rows - 1) / Rows;
    }
    using M = typename Exec::memory_space;
    passes_ = device_table<M>("zs::row_block_mlp::passes", entries);
    layers_ = device_table<M>("zs::row_block_mlp::layers", table);
    widths_ = device_table<M>("zs::row_block_mlp::widths", widths);
  }

  // clocks: when given, [teams() · (layers + 2)] of RowBlockMlp::clocks' stamps.
  void operator()(const Exec& exec, std::uint64_t* clocks = nullptr) const {
    Kokkos::TeamPolicy<Exec, Kokkos::LaunchBounds<Kernel::kThreads, 1>> policy(exec, teams_, Kernel::kTeamSize,
                                                                              Kernel::Tile::kVectorLength);
    policy.set_scratch_size(0, Kokkos::PerTeam(scratch_));
    Kokkos::parallel_for("zs::row_block_mlp", policy,
                         Kernel{passes_, layers_, widths_, n_layers_, ld_, last_ == FusedAct::relu ? 1 : 0, clocks});
  }

  int rows_per_team() const { return Rows; }
  int teams() const { return teams_; }
  std::size_t scratch_bytes() const { return scratch_; }

 private:
  Kokkos::View<fused_detail::PassEntry*, typename Exec::memory_space> passes_;
  Kokkos::View<row_block_detail::Layer*, typename Exec::memory_space> layers_;
  Kokkos::View<int*, typename Exec::memory_space> widths_;
  int n_layers_ = 0, ld_ = 0, teams_ = 0;
  std::size_t scratch_ = 0;
  FusedAct last_ = FusedAct::none;
};

}  // namespace zs::kernels
