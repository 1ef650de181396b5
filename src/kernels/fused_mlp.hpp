// A stack of small dense layers (y = x·Wᵀ + b, ReLU between them) as one launch, for several
// passes at once (e.g. the online net on s and s′ and the target net on s′). A prototype of the
// trunk without a GEMM and a bias launch per layer: not used by the step yet.
#pragma once
#include <cstddef>
#include <vector>

#include "backends/backend.hpp"
#include "backends/host_copy.hpp"
#include "core/error.hpp"

namespace zs::kernels {

enum class FusedAct : int { none = 0, relu = 1 };

// One layer of one pass: W [out, in] row-major, b [out], and where its output goes in global
// memory (null: kept in team scratch only; the last layer's must be given).
struct FusedMlpLayer {
  const float* w = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
};

// One pass: its input [rows, widths[0]] and one FusedMlpLayer per layer.
struct FusedMlpPass {
  const float* input = nullptr;
  int rows = 0;
  std::vector<FusedMlpLayer> layers;
};

struct FusedMlpOptions {
  // Rows of a pass one team carries through every layer: 0 picks the largest that fits the
  // budget, up to kFusedMaxAutoRows; otherwise a positive multiple of kFusedRowsPerItem.
  int rows_per_team = 0;
  // Team scratch per team in bytes. 48 KiB is what a CUDA block gets without opting in to more;
  // 1 KiB of it is left to Kokkos, which keeps 8·(team_size + 2) bytes of its own there.
  std::size_t scratch_budget = 47 * 1024;
};

// Rows a thread accumulates at once: each weight it reads from scratch feeds this many FMAs, and
// the activations it reads are the same for every lane of a warp (a broadcast, no conflicts).
inline constexpr int kFusedRowsPerItem = 4;
// More rows per team reuse each weight tile more, but leave fewer teams for the SMs: at B = 256
// and three passes, 16 rows make 48 teams.
inline constexpr int kFusedMaxAutoRows = 16;

namespace fused_detail {

// The device copy of a pass: layer entries start at layer0 in the layer table, and the pass owns
// the league ranks [tile0, tile0 + ⌈rows / rows_per_team⌉).
struct PassEntry {
  const float* input = nullptr;
  int rows = 0, layer0 = 0, tile0 = 0;
};

KOKKOS_INLINE_FUNCTION constexpr int round_up(int n, int m) { return (n + m - 1) / m * m; }

// The index of the pass that owns league rank `tile` (the passes' tile0 ascend).
template <class Passes>
KOKKOS_INLINE_FUNCTION int pass_index(const Passes& passes, int tile) {
  const int n = static_cast<int>(passes.extent(0));
  int p = 0;
  while (p + 1 < n && passes(p + 1).tile0 <= tile) ++p;
  return p;
}
template <class Passes>
KOKKOS_INLINE_FUNCTION PassEntry pass_of(const Passes& passes, int tile) {
  return passes(pass_index(passes, tile));
}

// The checks every launch of a layer stack makes (`who` names it in the message): widths and
// passes that fit each other. Returns the widest width.
inline int checked_widest(const char* who, const std::vector<int>& widths, std::size_t passes) {
  require(widths.size() >= 2, who, ": ", widths.size(), " widths given; expected >= 2 (the input ",
          "width, then one per layer)");
  int widest = 0;
  for (std::size_t i = 0; i < widths.size(); ++i) {
    require(widths[i] >= 1, who, ": width ", i, " is ", widths[i], "; expected >= 1");
    if (widths[i] > widest) widest = widths[i];
  }
  require(passes > 0, who, ": 0 passes given; expected at least 1");
  return widest;
}

inline void check_pass(const char* who, std::size_t p, const FusedMlpPass& x, int n_layers) {
  require(x.input != nullptr && x.rows >= 1, who, ": pass ", p, " has ", x.input ? "an input" : "no input", " of ",
          x.rows, " rows; expected an input of >= 1 row");
  require(static_cast<int>(x.layers.size()) == n_layers, who, ": pass ", p, " has ", x.layers.size(),
          " layers; expected ", n_layers, " (one per width after the input's)");
  for (int l = 0; l < n_layers; ++l)
    require(x.layers[l].w != nullptr && x.layers[l].b != nullptr, who, ": pass ", p, " layer ", l,
            " has a null weight or bias; expected both");
  require(x.layers.back().out != nullptr, who, ": pass ", p, " has no output for its last layer; expected one");
}

}  // namespace fused_detail

// A team per tile of rows of a pass. The team keeps its rows' activations in two scratch
// buffers (input and output of the current layer) and streams each layer's weights through a
// third, one [TileN outputs × TileK inputs] tile at a time: 256×256 floats of weights would not
// fit in scratch, while a tile is reused by every row of the team. Each thread item owns
// kFusedRowsPerItem rows × one output column; partial sums wait in the output buffer between
// weight tiles (a barrier separates tiles, so they cannot stay in registers portably), and the
// bias, the ReLU and the global store happen as the last tile of a column block is added.
template <class Exec, int TileN = 64, int TileK = 32>
struct FusedMlp {
  static_assert(TileN % TileK == 0,
                "TileN must be a multiple of TileK: a layer's output is written in whole TileN blocks "
                "(zeros past its width), which the next layer then reads in whole TileK blocks");
  static_assert(TileN % 32 == 0, "TileN must fill whole warps of 32 lanes");
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using ScratchView = Kokkos::View<float*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  static constexpr int kRows = kFusedRowsPerItem;
  // One float of padding per weight-tile row: lanes reading one k of 32 consecutive outputs then
  // hit 32 different banks instead of one.
  static constexpr int kWStride = TileK + 1;

  Kokkos::View<const fused_detail::PassEntry*, Mem> passes;
  Kokkos::View<const FusedMlpLayer*, Mem> layers;  // [pass][layer]
  Kokkos::View<const int*, Mem> widths;            // [n_layers + 1]: input width, then each output
  int n_layers = 0, rows_per_team = 0, act_stride = 0;
  int last_relu = 0;

  static std::size_t scratch_bytes(int rows_per_team, int act_stride) {
    return 2 * ScratchView::shmem_size(static_cast<std::size_t>(rows_per_team) * act_stride) +
           ScratchView::shmem_size(static_cast<std::size_t>(TileN) * kWStride);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int tile = team.league_rank();
    const fused_detail::PassEntry pass = fused_detail::pass_of(passes, tile);
    const int R = rows_per_team, S = act_stride;
    const int r0 = (tile - pass.tile0) * R;
    const int live = pass.rows - r0 < R ? pass.rows - r0 : R;  // rows of this tile that exist

    ScratchView buf_a(team.team_scratch(0), static_cast<std::size_t>(R) * S);
    ScratchView buf_b(team.team_scratch(0), static_cast<std::size_t>(R) * S);
    ScratchView wt(team.team_scratch(0), static_cast<std::size_t>(TileN) * kWStride);
    float* x = buf_a.data();
    float* y = buf_b.data();
    float* const w_tile = wt.data();

    // Zeros in the padding (missing rows, columns up to the next TileK): the weight tile is zero
    // there too, but 0·garbage could be NaN.
    {
      const int in = widths(0), in_pad = fused_detail::round_up(in, TileK);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, R * in_pad), [&](const int i) {
        const int r = i / in_pad, c = i % in_pad;
        x[r * S + c] = r < live && c < in ? pass.input[static_cast<std::size_t>(r0 + r) * in + c] : 0.f;
      });
    }
    team.team_barrier();

    for (int l = 0; l < n_layers; ++l) {
      const int in = widths(l), out = widths(l + 1);
      const FusedMlpLayer layer = layers(pass.layer0 + l);
      const bool relu = l + 1 < n_layers || last_relu != 0;
      for (int n0 = 0; n0 < out; n0 += TileN) {
        for (int k0 = 0; k0 < in; k0 += TileK) {
          // Lanes along k: each warp reads a contiguous stretch of a weight row.
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, TileN * TileK), [&](const int i) {
            const int n = i / TileK, k = i % TileK;
            w_tile[n * kWStride + k] =
                n0 + n < out && k0 + k < in ? layer.w[static_cast<std::size_t>(n0 + n) * in + k0 + k] : 0.f;
          });
          team.team_barrier();
          const bool first = k0 == 0, last = k0 + TileK >= in;
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, (R / kRows) * TileN), [&](const int i) {
            const int g = i / TileN, n = i % TileN, c = n0 + n;
            const float* const xin = x + g * kRows * S + k0;
            float* const yout = y + g * kRows * S + c;
            const float* const wrow = w_tile + n * kWStride;
            float acc[kRows];
            // Columns past the layer's width get bias 0 and zero weights: they come out 0, as the
            // next layer's padding must be.
            const float bias = first && c < out ? layer.b[c] : 0.f;
            for (int m = 0; m < kRows; ++m) acc[m] = first ? bias : yout[m * S];
            for (int k = 0; k < TileK; ++k) {
              const float wk = wrow[k];
              for (int m = 0; m < kRows; ++m) acc[m] += xin[m * S + k] * wk;
            }
            if (!last) {
              for (int m = 0; m < kRows; ++m) yout[m * S] = acc[m];
              return;
            }
            for (int m = 0; m < kRows; ++m) {
              const float v = relu && acc[m] < 0.f ? 0.f : acc[m];  // NaN stays NaN for the guard
              yout[m * S] = v;
              const int r = g * kRows + m;
              if (layer.out != nullptr && c < out && r < live)
                layer.out[static_cast<std::size_t>(r0 + r) * out + c] = v;
            }
          });
          team.team_barrier();
        }
      }
      float* const t = x;
      x = y;
      y = t;
    }
  }
};

// A prepared launch of FusedMlp: shapes checked and tables on the device once, at construction;
// operator() enqueues one kernel and allocates nothing.
template <class Exec, int TileN = 64, int TileK = 32>
class FusedMlpLaunch {
 public:
  using Kernel = FusedMlp<Exec, TileN, TileK>;

  FusedMlpLaunch() = default;
  // widths: the input width, then each layer's output width. last: the last layer's activation.
  FusedMlpLaunch(const std::vector<int>& widths, const std::vector<FusedMlpPass>& passes, FusedAct last,
                 const FusedMlpOptions& opt = {})
      : n_layers_(static_cast<int>(widths.size()) - 1), last_(last) {
    const int widest = fused_detail::checked_widest("FusedMlpLaunch", widths, passes.size());
    stride_ = fused_detail::round_up(widest, TileN);

    const std::size_t budget = opt.scratch_budget;
    require(opt.rows_per_team >= 0 && opt.rows_per_team % kFusedRowsPerItem == 0, "FusedMlpLaunch: rows_per_team = ",
            opt.rows_per_team, "; expected 0 (automatic) or a positive multiple of ", kFusedRowsPerItem);
    if (opt.rows_per_team > 0) {
      rows_ = opt.rows_per_team;
    } else {
      rows_ = kFusedRowsPerItem;
      while (rows_ + kFusedRowsPerItem <= kFusedMaxAutoRows &&
             Kernel::scratch_bytes(rows_ + kFusedRowsPerItem, stride_) <= budget)
        rows_ += kFusedRowsPerItem;
    }
    scratch_ = Kernel::scratch_bytes(rows_, stride_);
    require(scratch_ <= budget, "FusedMlpLaunch: ", rows_, " rows of width ", widest, " (", stride_,
            " with padding) need ", scratch_, " bytes of team scratch; expected at most the budget of ", budget,
            " bytes (fewer rows per team, or narrower layers)");

    std::vector<fused_detail::PassEntry> entries;
    std::vector<FusedMlpLayer> table;
    for (std::size_t p = 0; p < passes.size(); ++p) {
      const FusedMlpPass& x = passes[p];
      fused_detail::check_pass("FusedMlpLaunch", p, x, n_layers_);
      entries.push_back({x.input, x.rows, static_cast<int>(table.size()), teams_});
      table.insert(table.end(), x.layers.begin(), x.layers.end());
      teams_ += (x.rows + rows_ - 1) / rows_;
    }
    using M = typename Exec::memory_space;
    passes_ = device_table<M>("zs::fused_mlp::passes", entries);
    layers_ = device_table<M>("zs::fused_mlp::layers", table);
    widths_ = device_table<M>("zs::fused_mlp::widths", widths);
  }

  void operator()(const Exec& exec) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    // Device: one warp-wide row of lanes per 32 items of a weight tile, so every item has its own
    // thread. Host: one thread per team, its items one after another.
    const int items = rows_ / kFusedRowsPerItem * TileN, vector = host ? 1 : 32;
    const int team = host ? 1 : (items / vector < 16 ? items / vector : 16);
    Kokkos::TeamPolicy<Exec> policy(exec, teams_, team, vector);
    policy.set_scratch_size(0, Kokkos::PerTeam(scratch_));
    Kokkos::parallel_for("zs::fused_mlp", policy,
                         Kernel{passes_, layers_, widths_, n_layers_, rows_, stride_, last_ == FusedAct::relu ? 1 : 0});
  }

  int rows_per_team() const { return rows_; }
  int teams() const { return teams_; }
  std::size_t scratch_bytes() const { return scratch_; }

 private:
  Kokkos::View<fused_detail::PassEntry*, typename Exec::memory_space> passes_;
  Kokkos::View<FusedMlpLayer*, typename Exec::memory_space> layers_;
  Kokkos::View<int*, typename Exec::memory_space> widths_;
  int n_layers_ = 0, rows_ = 0, stride_ = 0, teams_ = 0;
  std::size_t scratch_ = 0;
  FusedAct last_ = FusedAct::none;
};

}  // namespace zs::kernels
