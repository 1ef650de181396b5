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

// One segment of a layer of one pass: its weights, b [n] (null: no bias), and where its output
// goes: out [rows, out_ld] from the pass's first row (out_ld 0: n), or null to keep it in scratch
// only. A segment of P parts (RowBlockLayerShape::parts) reads P segments of the layer before,
// each through its own weights (w, then more_w), and sums the products. W is [n, k] row-major
// (k: the width of the segment it reads), or with Trans (RowBlockMlp) [k, n]: a dense layer's W
// read for its input gradient dz·W. mask, when given ([rows, mask_ld] from the pass's first row,
// mask_ld 0: n), zeroes the output where mask <= 0 (a forward's activation: the ReLU's gradient;
// a NaN activation keeps its gradient, as the fused step's products do).
struct RowBlockSegment {
  const float* w = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  std::int64_t out_ld = 0;
  const float* mask = nullptr;
  std::int64_t mask_ld = 0;
  std::vector<const float*> more_w;
};

// A layer's shape, the same for every pass: segment i has n[i] outputs and reads segment from[i]
// of the layer before (the first layer's: the input's segments) and, with parts[i] > 1, the
// parts[i] − 1 segments after it too (parts empty: one each); relu after it or not.
struct RowBlockLayerShape {
  std::vector<int> n, from;
  bool relu = true;
  std::vector<int> parts;
};

// One source of an input segment: [rows, ld] from the pass's first row.
struct RowBlockSource {
  const float* p = nullptr;
  std::int64_t ld = 0;
};

// One pass: its input [rows, input width] and its segments, layers[l][i] for shape l's segment i.
// An input of several segments (RowBlockMlpLaunch's input widths) comes as inputs[i]: the sources
// summed into input segment i (the value stream's gradient, a sum of every branch's share); input
// is then unused.
struct RowBlockPass {
  const float* input = nullptr;
  int rows = 0;
  std::vector<std::vector<RowBlockSegment>> layers;
  std::vector<std::vector<RowBlockSource>> inputs;
};

namespace row_block_detail {

// Where a segment sits: its outputs and inputs in the team's scratch rows, its column groups
// among its layer's, its parts among the pass's.
struct SegmentShape {
  int n = 0;           // outputs
  int k0 = 0, c0 = 0;  // first input column in the layer's input buffer, first output column in its output buffer
  int group0 = 0, groups = 0;
  int b0 = 0;  // its biases' first float in the team's copy of every bias (padded(n) of them)
  int part0 = 0, parts = 0, steps = 0;  // its parts' first index, their count, their k-steps together
};

struct LayerShape {
  int seg0 = 0, segs = 0, groups = 0, relu = 0;
};

// A part of a pass's segment, as the kernel reads it: k, its inputs (padded in scratch), and
// vec: W's rows can be loaded 16 bytes at a time (W 16-byte aligned, k a multiple of 4).
struct Part {
  const float* w = nullptr;
  int k = 0, vec = 0;
};

struct Segment {
  const float* b = nullptr;
  float* out = nullptr;
  std::int64_t out_ld = 0;
  const float* mask = nullptr;
  std::int64_t mask_ld = 0;
};

// An input segment: its width, its first column in scratch, how many sources it sums.
struct InputShape {
  int n = 0, c0 = 0, sources = 0;
};

}  // namespace row_block_detail

// Rows: 16 or 32 rows a team (one or two WarpTiles down a column). Warps: warps a team, each
// owning groups of Group (16 or 32) output columns in turn. Depth: k-steps of weights a warp
// keeps in flight. Trans: every W is [k, n] (the input-gradient chain), not [n, k].
template <class Exec, int Rows = 32, int Warps = 8, int Depth = 4, int Group = 32, bool Trans = false>
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

  Kokkos::View<const fused_detail::PassEntry*, Mem> passes;
  Kokkos::View<const row_block_detail::LayerShape*, Mem> layers;
  Kokkos::View<const row_block_detail::SegmentShape*, Mem> shapes;  // every layer's segments
  Kokkos::View<const row_block_detail::Segment*, Mem> segments;     // [pass][every layer's segments]
  Kokkos::View<const row_block_detail::Part*, Mem> parts;           // [pass][every segment's parts]
  Kokkos::View<const row_block_detail::InputShape*, Mem> inputs;
  Kokkos::View<const RowBlockSource*, Mem> sources;  // [pass][every input segment's sources]
  int n_layers = 0, ld = 0;
  int pass_parts = 0, pass_sources = 0;  // a pass's rows of `parts` and `sources`
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

  // A pass's rows in the tables: its segments, parts and sources start here.
  struct Bases {
    int seg = 0, part = 0, source = 0;
  };

  // Where a warp's weight loads are: layer l, column group g of the layer, a part of its segment,
  // k-step s of the part (the cached fields: that segment and part).
  struct Cursor {
    int l = 0, g = 0, s = 0;
    int n = 0, k = 0, steps = 0, first = 0, vec = 0;  // first: the segment's first group
    int part = 0, part_end = 0;                       // the part's index among the pass's; past the segment's last
    const float* w = nullptr;
  };

  // The segment of column group g of layer l (a layer has a few).
  KOKKOS_INLINE_FUNCTION int segment_of(const row_block_detail::LayerShape& layer, int g) const {
    int i = layer.seg0;
    while (i + 1 < layer.seg0 + layer.segs && shapes(i + 1).group0 <= g) ++i;
    return i;
  }

  // Moves the cursor on to the first layer from c.l with a group c.g, and caches its segment.
  KOKKOS_INLINE_FUNCTION void settle(Cursor& c, int warp, const Bases& at) const {
    for (;;) {
      if (c.l >= n_layers) {
        c.w = nullptr;  // the warp's work is all loaded
        return;
      }
      if (c.g < layers(c.l).groups) break;
      ++c.l;
      c.g = warp;
    }
    locate(c, at);
  }
  KOKKOS_INLINE_FUNCTION void locate(Cursor& c, const Bases& at) const {
    const row_block_detail::SegmentShape& sh = shapes(segment_of(layers(c.l), c.g));
    c.n = sh.n;
    c.first = sh.group0;
    c.part = sh.part0;
    c.part_end = sh.part0 + sh.parts;
    enter_part(c, at);
  }
  KOKKOS_INLINE_FUNCTION void enter_part(Cursor& c, const Bases& at) const {
    const row_block_detail::Part& pt = parts(at.part + c.part);
    c.k = pt.k;
    c.steps = padded(pt.k) / kStep;
    c.w = pt.w;
    c.vec = pt.vec;
  }
  KOKKOS_INLINE_FUNCTION void advance(Cursor& c, int warp, const Bases& at) const {
    if (c.w == nullptr) return;  // past the warp's last load: it stays there
    if (++c.s < c.steps) return;
    c.s = 0;
    if (++c.part < c.part_end) return enter_part(c, at);
    c.g += Warps;
    if (c.g < layers(c.l).groups) return locate(c, at);
    ++c.l;
    c.g = warp;
    settle(c, warp, at);
  }
  // The k-step at the cursor, into f (nothing once the warp's work is all loaded).
  KOKKOS_INLINE_FUNCTION static void load(const Cursor& c, typename Tile::B16 (&f)[kTn]) {
    if (c.w == nullptr) return;
    const int k0 = c.s * kStep;
    ZS_UNROLL
    for (int j = 0; j < kTn; ++j) {
      const int n0 = (c.g - c.first) * kGroup + j * Tile::kN;
      const bool any = n0 < c.n && k0 < c.k;
      if (Trans)
        Tile::load_b16_t(f[j], any ? c.w + static_cast<std::int64_t>(k0) * c.n + n0 : c.w, c.n, c.n - n0, c.k - k0);
      else
        Tile::load_b16(f[j], any ? c.w + static_cast<std::int64_t>(n0) * c.k + k0 : c.w, c.k, c.n - n0, c.k - k0,
                       c.vec != 0);
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int block = team.league_rank();
    const int p = fused_detail::pass_index(passes, block);
    const fused_detail::PassEntry pass = passes(p);
    const Bases at{pass.layer0, p * pass_parts, p * pass_sources};
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
      settle(cur[slot], warp, at);
      ZS_UNROLL
      for (int d = 0; d < Depth; ++d) {
        load(cur[slot], stage[slot][d]);
        advance(cur[slot], warp, at);
      }
    }

    // Every bias of the pass into scratch once (zero past each segment's width, and for a segment
    // with none): an epilogue that read its biases from L2 would wait a latency for them each
    // column group.
    for (int l = 0; l < n_layers; ++l) {
      const row_block_detail::LayerShape layer = layers(l);
      for (int i = layer.seg0; i < layer.seg0 + layer.segs; ++i) {
        const row_block_detail::SegmentShape sh = shapes(i);
        const float* const b = segments(at.seg + i).b;
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, padded(sh.n)),
                             [&](const int c) { biases[sh.b0 + c] = c < sh.n && b != nullptr ? b[c] : 0.f; });
      }
    }
    // The input segments, each the sum of its sources.
    for (int i = 0, s0 = at.source; i < static_cast<int>(inputs.extent(0)); s0 += inputs(i).sources, ++i) {
      const row_block_detail::InputShape in = inputs(i);
      const int in_pad = padded(in.n);
      float* const x = buf[0] + in.c0;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Rows * in_pad), [&](const int e) {
        const int r = e / in_pad, c = e % in_pad;
        // Zeros past the input's edges: the weights are zero there too, but 0 · garbage may be NaN.
        float v = 0.f;
        if (r < live && c < in.n) {
          const std::int64_t row = r0 + r;
          v = sources(s0).p[row * sources(s0).ld + c];
          for (int j = 1; j < in.sources; ++j) v += sources(s0 + j).p[row * sources(s0 + j).ld + c];
        }
        x[r * ld + c] = Tile::to_operand(v);
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
          // A segment's parts read adjacent segments of the layer before, so its A is one run of
          // columns, part after part, as its loads come.
          const float* const xs = x + sh.k0;
          Tile acc[kTm][kTn];
          ZS_UNROLL
          for (int i = 0; i < kTm; ++i)
            ZS_UNROLL
            for (int j = 0; j < kTn; ++j) acc[i][j].zero();
          for (int s0 = 0; s0 < sh.steps; s0 += Depth) {
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
              advance(cur[slot], warp, at);
            }
          }
          epilogue(acc, segments(at.seg + seg), sh, biases + sh.b0, (g - sh.group0) * kGroup, layer.relu != 0,
                   l + 1 < n_layers ? y : nullptr, r0, live);
        }
      }
      team.team_barrier();
      stamp_cycles(team, stamps, 2 + l);
    }
  }

  // acc + bias, the ReLU (NaN stays NaN for the guard) and the mask, into the next layer's scratch
  // y (as its A operand; none after the last layer) and, for the rows and columns that exist, to
  // the segment's output. Columns past the segment's width come out 0 (zero weights, no bias), as
  // the next layer's padding must be. c0: the group's first column in its segment.
  // bias: the segment's biases in scratch.
  KOKKOS_INLINE_FUNCTION void epilogue(const Tile (&acc)[kTm][kTn], const row_block_detail::Segment& sg,
                                       const row_block_detail::SegmentShape& sh, const float* bias_s, int c0,
                                       bool relu, float* y, int r0, int live) const {
    // Every bias and mask value first, kept by accumulator element (on CUDA each index is then a
    // constant), so that no load waits behind the stores.
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
    float keep[kTm][kTn][kAcc];
    ZS_UNROLL
    for (int i = 0; i < kTm; ++i)
      ZS_UNROLL
      for (int j = 0; j < kTn; ++j) {
        int e = 0;
        acc[i][j].for_each([&](int m, int n, float) {
          const int row = i * Tile::kM + m, col = c0 + j * Tile::kN + n;
          keep[i][j][e++] = sg.mask != nullptr && row < live && col < sh.n
                                ? sg.mask[static_cast<std::int64_t>(r0 + row) * sg.mask_ld + col]
                                : 1.f;
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
          v += bias[j][e];
          if (relu && v < 0.f) v = 0.f;
          if (keep[i][j][e] <= 0.f) v = 0.f;  // a NaN activation keeps its gradient
          ++e;
          if (ys != nullptr) ys[row * ld + col] = Tile::to_operand(v);
          if (sg.out != nullptr && row < live && col < sh.n) sg.out[static_cast<std::int64_t>(r0 + row) * sg.out_ld + col] = v;
        });
      }
  }
};

// A prepared launch of RowBlockMlp: shapes checked and tables on the device once, at
// construction; operator() enqueues one kernel and allocates nothing.
template <class Exec, int Rows = 32, int Warps = 8, int Depth = 4, int Group = 32, bool Trans = false>
class RowBlockMlpLaunch {
 public:
  using Kernel = RowBlockMlp<Exec, Rows, Warps, Depth, Group, Trans>;

  RowBlockMlpLaunch() = default;

  // A network of segments: the input's segments' widths, each layer's shape, and the passes.
  RowBlockMlpLaunch(const std::vector<int>& input_widths, const std::vector<RowBlockLayerShape>& shape,
                    const std::vector<RowBlockPass>& passes) {
    build(input_widths, shape, passes);
  }

  // A plain stack (FusedMlpLaunch's interface): widths: the input width, then each layer's
  // output width; last: the last layer's activation (ReLU between the others).
  RowBlockMlpLaunch(const std::vector<int>& widths, const std::vector<FusedMlpPass>& passes, FusedAct last) {
    fused_detail::checked_widest("RowBlockMlpLaunch", widths, passes.size());
    const int L = static_cast<int>(widths.size()) - 1;
    std::vector<RowBlockLayerShape> shape;
    for (int l = 0; l < L; ++l) shape.push_back({{widths[l + 1]}, {0}, l + 1 < L || last == FusedAct::relu, {}});
    std::vector<RowBlockPass> ps;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const FusedMlpPass& x = passes[p];
      fused_detail::check_pass("RowBlockMlpLaunch", p, x, L);
      RowBlockPass q{x.input, x.rows, {}, {}};
      for (int l = 0; l < L; ++l) {
        RowBlockSegment y;
        y.w = x.layers[l].w;
        y.b = x.layers[l].b;
        y.out = x.layers[l].out;
        y.out_ld = widths[l + 1];
        q.layers.push_back({y});
      }
      ps.push_back(q);
    }
    build({widths[0]}, shape, ps);
  }

  // clocks: when given, [teams() · (layers + 2)] of RowBlockMlp::clocks' stamps.
  void operator()(const Exec& exec, std::uint64_t* clocks = nullptr) const {
    Kokkos::TeamPolicy<Exec, Kokkos::LaunchBounds<Kernel::kThreads, 1>> policy(exec, teams_, Kernel::kTeamSize,
                                                                              Kernel::Tile::kVectorLength);
    policy.set_scratch_size(0, Kokkos::PerTeam(scratch_));
    Kernel k{passes_, layers_, shapes_, segments_, parts_, inputs_, sources_};
    k.n_layers = n_layers_;
    k.ld = ld_;
    k.pass_parts = pass_parts_;
    k.pass_sources = pass_sources_;
    k.bias_floats = bias_floats_;
    k.clocks = clocks;
    Kokkos::parallel_for("zs::row_block_mlp", policy, k);
  }

  int rows_per_team() const { return Rows; }
  int teams() const { return teams_; }
  int layers() const { return n_layers_; }
  std::size_t scratch_bytes() const { return scratch_; }

 private:
  void build(const std::vector<int>& input_widths, const std::vector<RowBlockLayerShape>& shape,
             const std::vector<RowBlockPass>& passes) {
    const char* who = "RowBlockMlpLaunch";
    require(!input_widths.empty(), who, ": 0 input segments given; expected at least 1");
    require(!shape.empty(), who, ": 0 layers given; expected at least 1");
    require(!passes.empty(), who, ": 0 passes given; expected at least 1");
    n_layers_ = static_cast<int>(shape.size());
    bias_floats_ = 0;
    // The input's segments, side by side in the first buffer; then every layer's.
    std::vector<row_block_detail::InputShape> inputs;
    std::vector<row_block_detail::SegmentShape> before;
    int widest = 0;
    for (std::size_t i = 0; i < input_widths.size(); ++i) {
      const int n = input_widths[i];
      require(n >= 1, who, ": input segment ", i, " has width ", n, "; expected >= 1");
      const int sources = passes[0].inputs.empty() ? 1 : static_cast<int>(passes[0].inputs.size() > i ? passes[0].inputs[i].size() : 0);
      inputs.push_back({n, widest, sources});
      row_block_detail::SegmentShape src;
      src.n = n;
      src.c0 = widest;
      before.push_back(src);
      widest += Kernel::padded(n);
    }
    std::vector<row_block_detail::LayerShape> layers;
    std::vector<row_block_detail::SegmentShape> shapes;
    std::vector<int> part_k;  // every part's k, in the pass's order
    for (int l = 0; l < n_layers_; ++l) {
      const RowBlockLayerShape& s = shape[static_cast<std::size_t>(l)];
      require(!s.n.empty() && s.n.size() == s.from.size(), who, ": layer ", l, " has ", s.n.size(), " widths and ",
              s.from.size(), " sources; expected as many of each, at least 1");
      require(s.parts.empty() || s.parts.size() == s.n.size(), who, ": layer ", l, " has ", s.parts.size(),
              " part counts for ", s.n.size(), " segments; expected none or one each");
      row_block_detail::LayerShape ls{static_cast<int>(shapes.size()), static_cast<int>(s.n.size()), 0, s.relu ? 1 : 0};
      std::vector<row_block_detail::SegmentShape> now;
      int c0 = 0;
      for (std::size_t i = 0; i < s.n.size(); ++i) {
        const int parts = s.parts.empty() ? 1 : s.parts[i];
        require(s.n[i] >= 1, who, ": layer ", l, " segment ", i, " has width ", s.n[i], "; expected >= 1");
        require(parts >= 1, who, ": layer ", l, " segment ", i, " has ", parts, " parts; expected >= 1");
        require(s.from[i] >= 0 && s.from[i] + parts <= static_cast<int>(before.size()), who, ": layer ", l,
                " segment ", i, " reads segments ", s.from[i], "..", s.from[i] + parts - 1,
                " of the layer before; expected within 0..", before.size() - 1);
        row_block_detail::SegmentShape sh;
        sh.n = s.n[i];
        sh.k0 = before[static_cast<std::size_t>(s.from[i])].c0;
        sh.c0 = c0;
        sh.group0 = ls.groups;
        sh.groups = Kernel::padded(s.n[i]) / Kernel::kGroup;
        sh.b0 = bias_floats_;
        sh.part0 = static_cast<int>(part_k.size());
        sh.parts = parts;
        for (int j = 0; j < parts; ++j) {
          const int k = before[static_cast<std::size_t>(s.from[i] + j)].n;
          part_k.push_back(k);
          sh.steps += Kernel::padded(k) / Kernel::kStep;
        }
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
    std::vector<row_block_detail::Part> part_table;
    std::vector<RowBlockSource> source_table;
    teams_ = 0;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const RowBlockPass& x = passes[p];
      require(x.rows >= 1, who, ": pass ", p, " has an input of ", x.rows, " rows; expected an input of >= 1 row");
      if (x.inputs.empty()) {
        require(x.input != nullptr, who, ": pass ", p, " has no input; expected one");
        require(inputs.size() == 1 && inputs[0].sources == 1, who, ": pass ", p, " has one input for ", inputs.size(),
                " input segments of ", inputs[0].sources, " sources (as pass 0); expected its sources for each ",
                "(RowBlockPass::inputs)");
        source_table.push_back({x.input, input_widths[0]});
      } else {
        require(x.inputs.size() == inputs.size(), who, ": pass ", p, " has sources for ", x.inputs.size(),
                " input segments; expected ", inputs.size());
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          require(static_cast<int>(x.inputs[i].size()) == inputs[i].sources && inputs[i].sources >= 1, who, ": pass ",
                  p, " input segment ", i, " has ", x.inputs[i].size(), " sources; expected ",
                  inputs[i].sources >= 1 ? inputs[i].sources : 1, inputs[i].sources >= 1 ? " (as pass 0)" : " or more");
          for (const RowBlockSource& src : x.inputs[i]) {
            require(src.p != nullptr && src.ld >= inputs[i].n, who, ": pass ", p, " input segment ", i,
                    " has a source with ", src.p ? "" : "no data and ", "ld ", src.ld, "; expected data, ld >= ",
                    inputs[i].n);
            source_table.push_back(src);
          }
        }
      }
      require(static_cast<int>(x.layers.size()) == n_layers_, who, ": pass ", p, " has ", x.layers.size(),
              " layers; expected ", n_layers_);
      entries.push_back({nullptr, x.rows, static_cast<int>(table.size()), teams_});  // its input: in `sources`
      for (int l = 0; l < n_layers_; ++l) {
        const auto& segs = x.layers[static_cast<std::size_t>(l)];
        require(segs.size() == shape[static_cast<std::size_t>(l)].n.size(), who, ": pass ", p, " layer ", l, " has ",
                segs.size(), " segments; expected ", shape[static_cast<std::size_t>(l)].n.size());
        for (std::size_t i = 0; i < segs.size(); ++i) {
          const RowBlockSegment& y = segs[i];
          const row_block_detail::SegmentShape& sh = shapes[static_cast<std::size_t>(layers[l].seg0) + i];
          require(y.w != nullptr, who, ": pass ", p, " layer ", l, " segment ", i, " has a null weight; expected one");
          require(static_cast<int>(y.more_w.size()) == sh.parts - 1, who, ": pass ", p, " layer ", l, " segment ", i,
                  " has ", 1 + y.more_w.size(), " weights; expected ", sh.parts, " (one a part)");
          require(y.out != nullptr || l + 1 < n_layers_, who, ": pass ", p, " layer ", l, " segment ", i,
                  " has no output; expected one in the last layer");
          const std::int64_t out_ld = y.out_ld == 0 ? sh.n : y.out_ld, mask_ld = y.mask_ld == 0 ? sh.n : y.mask_ld;
          require(out_ld >= sh.n, who, ": pass ", p, " layer ", l, " segment ", i, " has out_ld ", out_ld,
                  "; expected >= its width ", sh.n);
          require(mask_ld >= sh.n, who, ": pass ", p, " layer ", l, " segment ", i, " has mask_ld ", mask_ld,
                  "; expected >= its width ", sh.n);
          table.push_back({y.b, y.out, out_ld, y.mask, mask_ld});
          for (int j = 0; j < sh.parts; ++j) {
            const float* w = j == 0 ? y.w : y.more_w[static_cast<std::size_t>(j - 1)];
            require(w != nullptr, who, ": pass ", p, " layer ", l, " segment ", i, " part ", j,
                    " has a null weight; expected one");
            const int k = part_k[static_cast<std::size_t>(sh.part0 + j)];
            const bool vec = !Trans && k % 4 == 0 && reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
            part_table.push_back({w, k, vec ? 1 : 0});
          }
        }
      }
      teams_ += (x.rows + Rows - 1) / Rows;
    }
    pass_parts_ = static_cast<int>(part_k.size());
    pass_sources_ = static_cast<int>(source_table.size() / passes.size());
    using M = typename Exec::memory_space;
    passes_ = device_table<M>("zs::row_block_mlp::passes", entries);
    layers_ = device_table<M>("zs::row_block_mlp::layers", layers);
    shapes_ = device_table<M>("zs::row_block_mlp::shapes", shapes);
    segments_ = device_table<M>("zs::row_block_mlp::segments", table);
    parts_ = device_table<M>("zs::row_block_mlp::parts", part_table);
    inputs_ = device_table<M>("zs::row_block_mlp::inputs", inputs);
    sources_ = device_table<M>("zs::row_block_mlp::sources", source_table);
  }

  Kokkos::View<fused_detail::PassEntry*, typename Exec::memory_space> passes_;
  Kokkos::View<row_block_detail::LayerShape*, typename Exec::memory_space> layers_;
  Kokkos::View<row_block_detail::SegmentShape*, typename Exec::memory_space> shapes_;
  Kokkos::View<row_block_detail::Segment*, typename Exec::memory_space> segments_;
  Kokkos::View<row_block_detail::Part*, typename Exec::memory_space> parts_;
  Kokkos::View<row_block_detail::InputShape*, typename Exec::memory_space> inputs_;
  Kokkos::View<RowBlockSource*, typename Exec::memory_space> sources_;
  int n_layers_ = 0, ld_ = 0, teams_ = 0, bias_floats_ = 0, pass_parts_ = 0, pass_sources_ = 0;
  std::size_t scratch_ = 0;
};

// A row-block launch of 16 or 32 rows a block, the count picked at run time (the step's options).
template <class Exec, bool Trans = false>
class RowBlockLaunchOfRows {
 public:
  RowBlockLaunchOfRows() = default;
  // rows: 16 or 32 (the caller has checked it and named itself in the error); args: those of a
  // RowBlockMlpLaunch constructor.
  template <class... Args>
  explicit RowBlockLaunchOfRows(int rows, const Args&... args) : rows_(rows) {
    if (rows == 16)
      r16_ = Rows16(args...);
    else
      r32_ = Rows32(args...);
  }
  void operator()(const Exec& exec, std::uint64_t* clocks = nullptr) const {
    if (rows_ == 16)
      r16_(exec, clocks);
    else
      r32_(exec, clocks);
  }
  int rows_per_team() const { return rows_; }
  int teams() const { return rows_ == 16 ? r16_.teams() : r32_.teams(); }
  int layers() const { return rows_ == 16 ? r16_.layers() : r32_.layers(); }
  std::size_t scratch_bytes() const { return rows_ == 16 ? r16_.scratch_bytes() : r32_.scratch_bytes(); }

 private:
  using Rows16 = RowBlockMlpLaunch<Exec, 16, 8, 4, 32, Trans>;
  using Rows32 = RowBlockMlpLaunch<Exec, 32, 8, 4, 32, Trans>;
  int rows_ = 32;
  Rows16 r16_;
  Rows32 r32_;
};

}  // namespace zs::kernels
