// A stack of dense layers (y = x·Wᵀ + b, ReLU between them) for several passes in one launch of
// thread-block clusters, where the backend has them (CUDA, sm_90). A cluster of kClusterMlpBlocks
// blocks carries a block of rows through every layer: each block computes its share of a layer's
// output columns (8-column tiles, TF32 tensor cores, the weights straight from L2 into registers),
// so a multiprocessor reads only its share of the weights; the outputs are stored once to global
// memory and written into every block's shared memory (distributed shared memory), where the next
// layer reads its whole input; the blocks meet at the cluster's hardware barrier between layers.
// The row-block design (kernels/row_block_mlp.hpp) had one multiprocessor read every weight; the
// fused step's phases pay a launch between layers: this is the shape between the two.
//
// A layer is one or more segments, each its own dense layer reading a run of columns of the
// layer's input (the heads: every hidden layer reads the trunk, every output layer its own hidden
// layer). Each sum runs in a fixed order, so a launch is reproducible bit for bit (a graph replay
// gives the direct launch's bits). The host has no such kernel: cluster_mlp_bytes says 0 there.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"

namespace zs {

// Blocks a cluster.
inline constexpr int kClusterMlpBlocks = 8;

// A segment's shape, the same for every pass: n outputs from k inputs read from column in_c0 of
// its layer's input buffer; out_c0: where its outputs go in the next layer's input buffer (a
// multiple of 16, its width padded to 16 with zeros there; unused in the last layer).
struct ClusterMlpShape {
  std::int32_t n = 0, k = 0, in_c0 = 0, out_c0 = 0;
};

// A segment of one pass: W [n, k] row-major, b [n] (null: no bias), out [rows, out_ld] from the
// pass's first row (null: not stored).
struct ClusterMlpSegment {
  const float* w = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  std::int64_t out_ld = 0;
};

// A layer: its 8-column tiles [tile0, tile0 + tiles) (block r of a cluster takes the r-th
// eighth), ReLU after it or not, and its longest segment's k in steps of 16.
struct ClusterMlpLayer {
  std::int32_t tile0 = 0, tiles = 0, relu = 0, k_steps = 0;
};

// One tile: its segment (an index into the shapes) and first column.
struct ClusterMlpTile {
  std::int32_t seg = 0, c0 = 0;
};

// A cluster's block of rows: its pass and first row.
struct ClusterMlpRows {
  std::int32_t pass = 0, row0 = 0;
};

// A pass's input: [rows, ld], the first input_width columns read.
struct ClusterMlpInput {
  const float* p = nullptr;
  std::int64_t ld = 0;
  std::int32_t rows = 0;
};

// What a launch reads: device tables and the launch's shape.
struct ClusterMlpArgs {
  const ClusterMlpLayer* layers = nullptr;
  const ClusterMlpShape* shapes = nullptr;
  const ClusterMlpSegment* segments = nullptr;  // [pass × shape_count + shape]
  const ClusterMlpTile* tiles = nullptr;
  const ClusterMlpRows* clusters = nullptr;
  const ClusterMlpInput* inputs = nullptr;  // one a pass
  int layer_count = 0, shape_count = 0, cluster_count = 0;
  int input_width = 0;
  int rows = 0;              // rows a cluster: 16, 32, 48 or 64
  int warps = 8;             // warps a block: 8 or 16
  int pitch[2] = {0, 0};     // the two activation buffers' row pitches, floats (layer l reads buffer l % 2)
  int stage_floats = 0;      // a block's partial sums
  int block_tiles = 0;       // the most tiles a block of the cluster takes, every layer together
  std::size_t bytes = 0;     // cluster_mlp_bytes of the above
  // Where each block stores its clocks (clock64) when given: cluster_mlp_stamps(layer_count) a
  // block, block after block: its start, its tables and input loaded, the first cluster barrier
  // passed, then for every layer its products done (every warp's), its outputs in its own
  // buffer, its outputs in the other blocks' buffers and its barrier passed.
  std::uint64_t* clocks = nullptr;
};

KOKKOS_INLINE_FUNCTION constexpr int cluster_mlp_stamps(int layers) { return 3 + 4 * layers; }

// Which of a layer's `tiles` block `rank` takes: [tiles·rank/8, tiles·(rank + 1)/8). The host
// sizes a block's shared memory with these and the kernel walks its tiles with them, so both
// must count alike.
KOKKOS_INLINE_FUNCTION constexpr int cluster_mlp_first_tile(int tiles, int rank) {
  return tiles * rank / kClusterMlpBlocks;
}
KOKKOS_INLINE_FUNCTION constexpr int cluster_mlp_tile_count(int tiles, int rank) {
  return tiles * (rank + 1) / kClusterMlpBlocks - tiles * rank / kClusterMlpBlocks;
}
// The shares of a tile's k-steps a block's `warps` warps take where it has fewer tiles (nt) than
// warps: as many as fill the warps, at most one a k-step.
KOKKOS_INLINE_FUNCTION constexpr int cluster_mlp_k_parts(int nt, int warps, int k_steps) {
  if (nt <= 0) return 1;
  const int parts = warps / nt < k_steps ? warps / nt : k_steps;
  return parts < 1 ? 1 : parts;
}

// Rows a cluster may carry.
inline constexpr int kClusterMlpMaxRows = 64;

// Whether this backend has the kernel at all (CUDA on sm_90 or later).
bool cluster_mlp_available();

// Shared memory a block of this launch needs (its rows, warps, pitches, stage_floats,
// layer_count, shape_count and block_tiles; and, on CUDA, the kernel allowed that much), or 0
// where it cannot run: this backend has no clusters, rows is not 16, 32, 48 or 64, warps not 8 or
// 16, or the block does not fit a multiprocessor.
std::size_t cluster_mlp_bytes(const ClusterMlpArgs& shape);

// Clusters of blocks of `bytes` shared memory the device holds at once (0 where none).
int cluster_mlp_active_clusters(int rows, int warps, std::size_t bytes);

// Enqueues the one launch on exec: no allocation, no fence (it can be captured into a graph).
// Throws zs::Error where the backend has no such kernel (bytes 0).
void cluster_mlp(const ExecSpace& exec, const ClusterMlpArgs& args);

}  // namespace zs
