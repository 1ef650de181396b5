// A stack of dense layers (y = x·Wᵀ + b, ReLU between them) for several passes in one launch,
// a team per block of Rows rows carrying them through every layer: the row-block design of
// docs/performance.md ("the per-layer design's floor"). The block's activations stay in team
// scratch (two buffers, a layer's input and output); the weights come straight from L2 into
// registers, each warp loading only its own columns, Depth k-steps ahead of the tensor cores,
// so that about 64 KiB a multiprocessor is on its way at once (Little's law at L2's latency).
// A warp's loads run on across its column groups and across layers (the next layer's first
// weights land while this one's epilogue runs); only the activations wait for a barrier.
// The products are WarpTile's k-steps of 16 (TF32 tensor cores on CUDA, FP32 loops on the host).
// A layer is one or more segments, each its own dense layer reading one segment of the layer
// before (the heads: every hidden layer reads the trunk, every output layer its own hidden one),
// so a network of several heads is one stack.
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

// One segment of a layer of one pass: W [n, k] row-major (k: the width of the segment it reads),
// b [n], and where its output goes: out [rows, out_ld] from the pass's first row (out_ld 0: n),
// or null to keep it in scratch only.
struct RowBlockSegment {
  const float* w = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  std::int64_t out_ld = 0;
};

// A layer's shape, the same for every pass: segment i has n[i] outputs and reads segment from[i]
// of the layer before (0 for the first layer: the input); relu after it or not.
struct RowBlockLayerShape {
  std::vector<int> n, from;
  bool relu = true;
};

// One pass: its input [rows, input width] and its segments, layers[l][i] for shape l's segment i.
struct RowBlockPass {
  const float* input = nullptr;
  int rows = 0;
  std::vector<std::vector<RowBlockSegment>> layers;
};

namespace row_block_detail {

// Where a segment sits: its outputs and inputs in the team's scratch rows, its column groups
// among its layer's.
struct SegmentShape {
  int n = 0, k = 0;    // outputs, inputs
  int k0 = 0, c0 = 0;  // first input column in the layer's input buffer, first output column in its output buffer
  int group0 = 0, groups = 0;
  int b0 = 0;  // its biases' first float in the team's copy of every bias (padded(n) of them)
};

struct LayerShape {
  int seg0 = 0, segs = 0, groups = 0, relu = 0;
};

// A segment of a pass, as the kernel reads it: vec says W's rows can be loaded 16 bytes at a
// time (W 16-byte aligned, k a multiple of 4).
struct Segment {
  const float* w = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  std::int64_t out_ld = 0;
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
  // A scratch row: the widest padded layer, plus 16 floats on CUDA so that a quarter warp's
  // 16-byte loads of rows g and g + 1 fall in different banks.
  static constexpr int kRowPad = kHost ? 0 : 16;

  KOKKOS_INLINE_FUNCTION static constexpr int padded(int w) { return (w + kPad - 1) / kPad * kPad; }

  Kokkos::View<const fused_detail::PassEntry*, Mem> passes;  // layer0: the pass's first segment
  Kokkos::View<const row_block_detail::LayerShape*, Mem> layers;
  Kokkos::View<const row_block_detail::SegmentShape*, Mem> shapes;  // every layer's segments
  Kokkos::View<const row_block_detail::Segment*, Mem> segments;     // [pass][every layer's segments]
  int n_layers = 0, ld = 0, in_width = 0;
  int bias_floats = 0;  // Σ padded(n) over every segment: the team's copy of the pass's biases
  // When given, the block's cycles at its start, once its input is staged and once each layer is
  // done: clocks[block·(n_layers + 2) + i] (a benchmark's timeline).
  std::uint64_t* clocks = nullptr;

  // 16 bytes more than the buffers: Kokkos places a team's scratch after 8·(team size + 2) bytes of
  // its own, so where that is not a multiple of 16 the kernel moves its buffers up to the next 16
  // (its A loads are 16 bytes at a time).
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes(int ld, int bias_floats) {
    return sizeof(float) * (2 * Rows * static_cast<std::size_t>(ld) + static_cast<std::size_t>(bias_floats)) + 16;
  }

  // Where a warp's weight loads are: layer l, column group g of the layer, k-step s of its
  // segment (the cached fields: that segment).
  struct Cursor {
    int l = 0, g = 0, s = 0;
    int n = 0, k = 0, steps = 0, first = 0, vec = 0;  // first: the segment's first group
    const float* w = nullptr;
  };

  // The segment of column group g of layer l (a layer has a few).
  KOKKOS_INLINE_FUNCTION int segment_of(const row_block_detail::LayerShape& layer, int g) const {
    int i = layer.seg0;
    while (i + 1 < layer.seg0 + layer.segs && shapes(i + 1).group0 <= g) ++i;
    return i;
  }

  // Moves the cursor on to the first layer from c.l with a group c.g, and caches its segment.
  KOKKOS_INLINE_FUNCTION void settle(Cursor& c, int warp, int seg_base) const {
    for (;;) {
      if (c.l >= n_layers) {
        c.w = nullptr;  // the warp's work is all loaded
        return;
      }
      if (c.g < layers(c.l).groups) break;
      ++c.l;
      c.g = warp;
    }
    locate(c, seg_base);
  }
  KOKKOS_INLINE_FUNCTION void locate(Cursor& c, int seg_base) const {
    const int seg = segment_of(layers(c.l), c.g);
    const row_block_detail::SegmentShape& sh = shapes(seg);
    const row_block_detail::Segment& sg = segments(seg_base + seg);
    c.n = sh.n;
    c.k = sh.k;
    c.steps = padded(sh.k) / kStep;
    c.first = sh.group0;
    c.w = sg.w;
    c.vec = sg.vec;
  }
  KOKKOS_INLINE_FUNCTION void advance(Cursor& c, int warp, int seg_base) const {
    if (c.w == nullptr) return;  // past the warp's last load: it stays there
    if (++c.s < c.steps) return;
    c.s = 0;
    c.g += Warps;
    if (c.g < layers(c.l).groups) return locate(c, seg_base);
    ++c.l;
    c.g = warp;
    settle(c, warp, seg_base);
  }
  // The k-step at the cursor, into f (nothing once the warp's work is all loaded).
  KOKKOS_INLINE_FUNCTION static void load(const Cursor& c, typename Tile::B16 (&f)[kTn]) {
    if (c.w == nullptr) return;
    const int k0 = c.s * kStep;
    ZS_UNROLL
    for (int j = 0; j < kTn; ++j) {
      const int n0 = (c.g - c.first) * kGroup + j * Tile::kN;
      const bool any = n0 < c.n && k0 < c.k;
      Tile::load_b16(f[j], any ? c.w + static_cast<std::int64_t>(n0) * c.k + k0 : c.w, c.k, c.n - n0, c.k - k0,
                     c.vec != 0);
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int block = team.league_rank();
    const fused_detail::PassEntry pass = fused_detail::pass_of(passes, block);
    const int seg_base = pass.layer0;
    const int r0 = (block - pass.tile0) * Rows;
    const int live = pass.rows - r0 < Rows ? pass.rows - r0 : Rows;
    float* const base = align16(team.team_scratch(0).get_shmem(scratch_bytes(ld, bias_floats)));
    float* const buf[2] = {base, base + Rows * ld};
    float* const biases = base + 2 * Rows * ld;
    const int warp0 = kHost ? 0 : team.team_rank();
    std::uint64_t* const stamps = clocks != nullptr ? clocks + block * (n_layers + 2) : nullptr;
    stamp_cycles(team, stamps, 0);

    // Every warp starts its weight loads before the input is staged: they need nothing from it.
    Cursor cur[kSlots];
    typename Tile::B16 stage[kSlots][Depth][kTn];
    ZS_UNROLL
    for (int slot = 0; slot < kSlots; ++slot) {
      const int warp = warp0 + slot;
      cur[slot].g = warp;
      settle(cur[slot], warp, seg_base);
      ZS_UNROLL
      for (int d = 0; d < Depth; ++d) {
        load(cur[slot], stage[slot][d]);
        advance(cur[slot], warp, seg_base);
      }
    }

    // Every bias of the pass into scratch once (zero past each segment's width): an epilogue that
    // read its biases from L2 would wait a latency for them each column group.
    for (int l = 0; l < n_layers; ++l) {
      const row_block_detail::LayerShape layer = layers(l);
      for (int i = layer.seg0; i < layer.seg0 + layer.segs; ++i) {
        const row_block_detail::SegmentShape sh = shapes(i);
        const float* const b = segments(seg_base + i).b;
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, padded(sh.n)),
                             [&](const int c) { biases[sh.b0 + c] = c < sh.n ? b[c] : 0.f; });
      }
    }
    {
      const int in = in_width, in_pad = padded(in);
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
      const row_block_detail::LayerShape layer = layers(l);
      ZS_UNROLL
      for (int slot = 0; slot < kSlots; ++slot) {
        const int warp = warp0 + slot;
        for (int g = warp; g < layer.groups; g += Warps) {
          const int seg = segment_of(layer, g);
          const row_block_detail::SegmentShape sh = shapes(seg);
          const int steps = padded(sh.k) / kStep;
          const float* const xs = x + sh.k0;
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
              for (int i = 0; i < kTm; ++i) Tile::load_a16(a[i], xs + i * Tile::kM * ld + k0, ld);
              ZS_UNROLL
              for (int j = 0; j < kTn; ++j) Tile::round_b16(stage[slot][d][j]);
              ZS_UNROLL
              for (int i = 0; i < kTm; ++i)
                ZS_UNROLL
                for (int j = 0; j < kTn; ++j) acc[i][j].mma16(a[i], stage[slot][d][j]);
              load(cur[slot], stage[slot][d]);
              advance(cur[slot], warp, seg_base);
            }
          }
          epilogue(acc, segments(seg_base + seg), sh, biases + sh.b0, (g - sh.group0) * kGroup, layer.relu != 0,
                   l + 1 < n_layers ? y : nullptr, r0, live);
        }
      }
      team.team_barrier();
      stamp_cycles(team, stamps, 2 + l);
    }
  }

  // acc + bias, the ReLU (NaN stays NaN for the guard), into the next layer's scratch y (as its A
  // operand; none after the last layer) and, for the rows and columns that exist, to the
  // segment's output. Columns past the segment's width come out 0 (zero weights, no bias), as the
  // next layer's padding must be. c0: the group's first column in its segment.
  // bias: the segment's biases in scratch.
  KOKKOS_INLINE_FUNCTION void epilogue(const Tile (&acc)[kTm][kTn], const row_block_detail::Segment& sg,
                                       const row_block_detail::SegmentShape& sh, const float* bias_s, int c0,
                                       bool relu, float* y, int r0, int live) const {
    // Every bias first, kept by accumulator element (the same columns in every row tile) so that
    // on CUDA each index is a constant.
    constexpr int kAcc = static_cast<int>(sizeof(Tile::c) / sizeof(float));
    float bias[kTn][kAcc];
    ZS_UNROLL
    for (int j = 0; j < kTn; ++j) {
      int e = 0;
      acc[0][j].for_each([&](int, int n, float) {
        const int col = c0 + j * Tile::kN + n;
        bias[j][e++] = bias_s[col];
      });
    }
    float* const ys = y != nullptr ? y + sh.c0 : nullptr;
    ZS_UNROLL
    for (int i = 0; i < kTm; ++i)
      ZS_UNROLL
      for (int j = 0; j < kTn; ++j) {
        int e = 0;
        acc[i][j].for_each([&](int m, int n, float v) {
          const int row = i * Tile::kM + m, col = c0 + j * Tile::kN + n;
          v += bias[j][e++];
          if (relu && v < 0.f) v = 0.f;
          if (ys != nullptr) ys[row * ld + col] = Tile::to_operand(v);
          if (sg.out != nullptr && row < live && col < sh.n) sg.out[static_cast<std::int64_t>(r0 + row) * sg.out_ld + col] = v;
        });
      }
  }
};

// A prepared launch of RowBlockMlp: shapes checked and tables on the device once, at
// construction; operator() enqueues one kernel and allocates nothing.
template <class Exec, int Rows = 32, int Warps = 8, int Depth = 4, int Group = 32>
class RowBlockMlpLaunch {
 public:
  using Kernel = RowBlockMlp<Exec, Rows, Warps, Depth, Group>;

  RowBlockMlpLaunch() = default;

  // A network of segments: the input's width, each layer's shape, and the passes.
  RowBlockMlpLaunch(int input_width, const std::vector<RowBlockLayerShape>& shape, const std::vector<RowBlockPass>& passes) {
    build(input_width, shape, passes);
  }

  // A plain stack (FusedMlpLaunch's interface): widths: the input width, then each layer's
  // output width; last: the last layer's activation (ReLU between the others).
  RowBlockMlpLaunch(const std::vector<int>& widths, const std::vector<FusedMlpPass>& passes, FusedAct last) {
    fused_detail::checked_widest("RowBlockMlpLaunch", widths, passes.size());
    const int L = static_cast<int>(widths.size()) - 1;
    std::vector<RowBlockLayerShape> shape;
    for (int l = 0; l < L; ++l) shape.push_back({{widths[l + 1]}, {0}, l + 1 < L || last == FusedAct::relu});
    std::vector<RowBlockPass> ps;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const FusedMlpPass& x = passes[p];
      fused_detail::check_pass("RowBlockMlpLaunch", p, x, L);
      RowBlockPass q{x.input, x.rows, {}};
      for (int l = 0; l < L; ++l) q.layers.push_back({{x.layers[l].w, x.layers[l].b, x.layers[l].out, widths[l + 1]}});
      ps.push_back(q);
    }
    build(widths[0], shape, ps);
  }

  // clocks: when given, [teams() · (layers + 2)] of RowBlockMlp::clocks' stamps.
  void operator()(const Exec& exec, std::uint64_t* clocks = nullptr) const {
    Kokkos::TeamPolicy<Exec, Kokkos::LaunchBounds<Kernel::kThreads, 1>> policy(exec, teams_, Kernel::kTeamSize,
                                                                              Kernel::Tile::kVectorLength);
    policy.set_scratch_size(0, Kokkos::PerTeam(scratch_));
    Kokkos::parallel_for("zs::row_block_mlp", policy,
                         Kernel{passes_, layers_, shapes_, segments_, n_layers_, ld_, in_width_, bias_floats_, clocks});
  }

  int rows_per_team() const { return Rows; }
  int teams() const { return teams_; }
  int layers() const { return n_layers_; }
  std::size_t scratch_bytes() const { return scratch_; }

 private:
  void build(int input_width, const std::vector<RowBlockLayerShape>& shape, const std::vector<RowBlockPass>& passes) {
    const char* who = "RowBlockMlpLaunch";
    require(input_width >= 1, who, ": input width ", input_width, "; expected >= 1");
    require(!shape.empty(), who, ": 0 layers given; expected at least 1");
    require(!passes.empty(), who, ": 0 passes given; expected at least 1");
    n_layers_ = static_cast<int>(shape.size());
    in_width_ = input_width;
    bias_floats_ = 0;
    std::vector<row_block_detail::LayerShape> layers;
    std::vector<row_block_detail::SegmentShape> shapes;
    // The segments of the layer before: the input, one segment at column 0.
    std::vector<row_block_detail::SegmentShape> before{{input_width, 0, 0, 0, 0, 0}};
    int widest = Kernel::padded(input_width);
    for (int l = 0; l < n_layers_; ++l) {
      const RowBlockLayerShape& s = shape[static_cast<std::size_t>(l)];
      require(!s.n.empty() && s.n.size() == s.from.size(), who, ": layer ", l, " has ", s.n.size(), " widths and ",
              s.from.size(), " sources; expected as many of each, at least 1");
      row_block_detail::LayerShape ls{static_cast<int>(shapes.size()), static_cast<int>(s.n.size()), 0, s.relu ? 1 : 0};
      std::vector<row_block_detail::SegmentShape> now;
      int c0 = 0;
      for (std::size_t i = 0; i < s.n.size(); ++i) {
        require(s.n[i] >= 1, who, ": layer ", l, " segment ", i, " has width ", s.n[i], "; expected >= 1");
        require(s.from[i] >= 0 && s.from[i] < static_cast<int>(before.size()), who, ": layer ", l, " segment ", i,
                " reads segment ", s.from[i], " of the layer before; expected 0 to ", before.size() - 1);
        const row_block_detail::SegmentShape& src = before[static_cast<std::size_t>(s.from[i])];
        row_block_detail::SegmentShape sh{s.n[i], src.n, src.c0, c0, ls.groups, Kernel::padded(s.n[i]) / Kernel::kGroup,
                                          bias_floats_};
        bias_floats_ += Kernel::padded(s.n[i]);
        ls.groups += sh.groups;
        c0 += Kernel::padded(s.n[i]);
        now.push_back(sh);
        shapes.push_back(sh);
      }
      if (l + 1 < n_layers_ && c0 > widest) widest = c0;  // the last layer's output stays out of scratch
      layers.push_back(ls);
      before = now;
    }
    ld_ = widest + Kernel::kRowPad;
    scratch_ = Kernel::scratch_bytes(ld_, bias_floats_);
    const std::size_t most = max_team_scratch_bytes();
    require(scratch_ <= most, who, ": ", Rows, " rows of ", widest, " columns (padded) need ", scratch_,
            " bytes of team scratch; expected at most ", most, " (narrower layers)");

    std::vector<fused_detail::PassEntry> entries;
    std::vector<row_block_detail::Segment> table;
    teams_ = 0;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const RowBlockPass& x = passes[p];
      require(x.input != nullptr && x.rows >= 1, who, ": pass ", p, " has ", x.input ? "an input" : "no input", " of ",
              x.rows, " rows; expected an input of >= 1 row");
      require(static_cast<int>(x.layers.size()) == n_layers_, who, ": pass ", p, " has ", x.layers.size(),
              " layers; expected ", n_layers_);
      entries.push_back({x.input, x.rows, static_cast<int>(table.size()), teams_});
      for (int l = 0; l < n_layers_; ++l) {
        const auto& segs = x.layers[static_cast<std::size_t>(l)];
        require(segs.size() == shape[static_cast<std::size_t>(l)].n.size(), who, ": pass ", p, " layer ", l, " has ",
                segs.size(), " segments; expected ", shape[static_cast<std::size_t>(l)].n.size());
        for (std::size_t i = 0; i < segs.size(); ++i) {
          const RowBlockSegment& y = segs[i];
          const row_block_detail::SegmentShape& sh = shapes[static_cast<std::size_t>(layers[l].seg0) + i];
          require(y.w != nullptr && y.b != nullptr, who, ": pass ", p, " layer ", l, " segment ", i,
                  " has a null weight or bias; expected both");
          require(y.out != nullptr || l + 1 < n_layers_, who, ": pass ", p, " layer ", l, " segment ", i,
                  " has no output; expected one in the last layer");
          const std::int64_t out_ld = y.out_ld == 0 ? sh.n : y.out_ld;
          require(out_ld >= sh.n, who, ": pass ", p, " layer ", l, " segment ", i, " has out_ld ", out_ld,
                  "; expected >= its width ", sh.n);
          const bool vec = sh.k % 4 == 0 && reinterpret_cast<std::uintptr_t>(y.w) % 16 == 0;
          table.push_back({y.w, y.b, y.out, out_ld, vec ? 1 : 0});
        }
      }
      teams_ += (x.rows + Rows - 1) / Rows;
    }
    using M = typename Exec::memory_space;
    passes_ = device_table<M>("zs::row_block_mlp::passes", entries);
    layers_ = device_table<M>("zs::row_block_mlp::layers", layers);
    shapes_ = device_table<M>("zs::row_block_mlp::shapes", shapes);
    segments_ = device_table<M>("zs::row_block_mlp::segments", table);
  }

  Kokkos::View<fused_detail::PassEntry*, typename Exec::memory_space> passes_;
  Kokkos::View<row_block_detail::LayerShape*, typename Exec::memory_space> layers_;
  Kokkos::View<row_block_detail::SegmentShape*, typename Exec::memory_space> shapes_;
  Kokkos::View<row_block_detail::Segment*, typename Exec::memory_space> segments_;
  int n_layers_ = 0, ld_ = 0, in_width_ = 0, teams_ = 0, bias_floats_ = 0;
  std::size_t scratch_ = 0;
};

}  // namespace zs::kernels
