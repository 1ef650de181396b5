// The cluster dense-layer stack on sm_90 (backends/cluster_mlp.hpp says what it computes).
// Cluster c carries rows [row0, row0 + R) of its pass; block `rank` of it, for each layer:
//   1. takes the layer's tiles [tiles·rank/8, tiles·(rank + 1)/8); its warps take a tile each
//      (and, where the block has fewer tiles than warps, a share of the tile's k-steps), the
//      weights loaded from L2 kDepth k-steps ahead (the first ones during the layer before), the
//      input read from its own buffer;
//   2. sums each tile's shares in order, adds the bias, the ReLU (NaN kept, as the fused step's
//      products keep it), stores the live rows to global memory and, unless the layer is the
//      last, writes the rows (TF32 operands, zeros in the padding) into its own buffer for the
//      next layer, then from there into every other block's;              cluster barrier
// The buffers alternate: layer l reads buffer l % 2 and writes buffer (l + 1) % 2, which no block
// reads before the barrier that ends layer l − 1, so one barrier a layer is enough.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "backends/cluster_mlp.hpp"
#include "backends/cuda/check.hpp"
#include "backends/warp_tile.hpp"
#include "core/error.hpp"

namespace zs {

namespace {

namespace cg = cooperative_groups;
using Tile = WarpTile<Kokkos::Cuda>;

constexpr int kBlocks = kClusterMlpBlocks;
// k-steps of 16 of weights a warp keeps on their way (4 registers a lane each).
constexpr int kDepth = 8;

// The tables a block reads in every layer, copied into its shared memory once (each read from
// global memory is a round trip to L2 on the critical path): the layers, the segments' shapes and
// this pass's pointers, and this block's own tiles with their biases, layer after layer.
struct Tables {
  ClusterMlpLayer* layers;
  ClusterMlpShape* shapes;
  ClusterMlpSegment* segments;
  ClusterMlpTile* tiles;  // this block's tiles of layer 0, then of layer 1, ...
  float* bias;            // 8 a tile (0 past the segment's n)
};

__host__ __device__ inline std::size_t table_bytes(int layers, int shapes, int block_tiles) {
  return sizeof(ClusterMlpLayer) * layers + (sizeof(ClusterMlpShape) + sizeof(ClusterMlpSegment)) * shapes +
         (sizeof(ClusterMlpTile) + 8 * sizeof(float)) * block_tiles;
}

__host__ __device__ inline std::size_t buffer_floats(const ClusterMlpArgs& a) {
  return static_cast<std::size_t>(a.rows) * (a.pitch[0] + a.pitch[1]) + static_cast<std::size_t>(a.stage_floats);
}

__device__ inline int first_tile(const ClusterMlpLayer& L, int rank) { return cluster_mlp_first_tile(L.tiles, rank); }
__device__ inline int tile_count(const ClusterMlpLayer& L, int rank) { return cluster_mlp_tile_count(L.tiles, rank); }
__device__ inline int k_parts(const ClusterMlpLayer& L, int nt, int warps) {
  return cluster_mlp_k_parts(nt, warps, L.k_steps);
}

// A warp's share of a layer: tile i of the block's (at `slot` among its tiles of every layer),
// k-steps [s0, s1) of part q.
struct Item {
  const float* w = nullptr;  // the tile's first weight row, k-step 0
  int k = 0, n_left = 0, in_c0 = 0, s0 = 0, s1 = 0, i = 0, q = 0;
  bool vec = false;
};

__device__ inline Item item_of(const Tables& t, int slot0, int nt, int parts, int item) {
  Item it;
  it.i = item % nt;
  it.q = item / nt;
  const ClusterMlpTile tile = t.tiles[slot0 + it.i];
  const ClusterMlpShape sh = t.shapes[tile.seg];
  const float* const w0 = t.segments[tile.seg].w;
  const int steps = (sh.k + 15) / 16;
  it.w = w0 + static_cast<std::int64_t>(tile.c0) * sh.k;
  it.k = sh.k;
  it.n_left = sh.n - tile.c0;
  it.in_c0 = sh.in_c0;
  it.s0 = steps * it.q / parts;
  it.s1 = steps * (it.q + 1) / parts;
  it.vec = sh.k % 4 == 0 && (reinterpret_cast<std::uintptr_t>(w0) & 15) == 0;
  return it;
}

// The item's first kDepth k-steps of weights on their way into the ring.
__device__ inline void issue(const Item& it, Tile::B16 (&ring)[kDepth]) {
  if (it.n_left <= 0) return;
#pragma unroll
  for (int j = 0; j < kDepth; ++j) {
    const int st = it.s0 + j;
    if (st < it.s1) Tile::load_b16(ring[j], it.w + st * 16, it.k, it.n_left, it.k - st * 16, it.vec);
  }
}

// MT tiles of 16 rows, W warps. Blocks of 8 warps and 16 or 32 rows fit two to a multiprocessor
// (128 registers a thread, at most 114 KB of shared memory for the reference net), so twice the
// clusters run at once.
template <int MT, int W>
__global__ void __cluster_dims__(kBlocks, 1, 1) __launch_bounds__(32 * W, MT <= 2 && W == 8 ? 2 : 1)
    cluster_mlp_kernel(const ClusterMlpArgs a) {
  constexpr int R = 16 * MT, kWarps = W, kThreads = 32 * W;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y), tid = warp * 32 + lane;
  const ClusterMlpRows cr = a.clusters[blockIdx.x / kBlocks];
  const ClusterMlpInput in = a.inputs[cr.pass];
  const int live = min(R, in.rows - cr.row0);
  const int layer_count = a.layer_count, shape_count = a.shape_count;
  std::uint64_t* const clocks =
      a.clocks != nullptr && tid == 0 ? a.clocks + static_cast<std::int64_t>(blockIdx.x) * cluster_mlp_stamps(layer_count)
                                      : nullptr;
  auto stamp = [&](int at) {
    if (clocks != nullptr) clocks[at] = static_cast<std::uint64_t>(clock64());
  };
  stamp(0);

  extern __shared__ __align__(16) float zs_cluster_mlp_smem[];
  // Constant indices: a computed index into the arguments would copy them to local memory.
  const int pitch0 = a.pitch[0], pitch1 = a.pitch[1];
  float* const buf0 = zs_cluster_mlp_smem;
  float* const buf1 = buf0 + R * pitch0;
  float* const stage = buf1 + R * pitch1;
  Tables t;
  t.layers = reinterpret_cast<ClusterMlpLayer*>(stage + a.stage_floats);
  t.shapes = reinterpret_cast<ClusterMlpShape*>(t.layers + layer_count);
  t.segments = reinterpret_cast<ClusterMlpSegment*>(t.shapes + shape_count);
  t.tiles = reinterpret_cast<ClusterMlpTile*>(t.segments + shape_count);
  t.bias = reinterpret_cast<float*>(t.tiles + a.block_tiles);

  // 1. The tables: the layers, shapes and this pass's segments, then this block's tiles, then
  // their biases (each step reads the one before).
  const ClusterMlpSegment* const segs = a.segments + static_cast<std::int64_t>(cr.pass) * shape_count;
  for (int i = tid; i < layer_count; i += kThreads) t.layers[i] = a.layers[i];
  for (int i = tid; i < shape_count; i += kThreads) {
    t.shapes[i] = a.shapes[i];
    t.segments[i] = segs[i];
  }
  __syncthreads();
  for (int l = 0, slot0 = 0; l < layer_count; ++l) {
    const ClusterMlpLayer L = t.layers[l];
    const int nt = tile_count(L, rank);
    for (int i = tid; i < nt; i += kThreads) t.tiles[slot0 + i] = a.tiles[L.tile0 + first_tile(L, rank) + i];
    slot0 += nt;
  }
  __syncthreads();
  int slots = 0;
  for (int l = 0; l < layer_count; ++l) slots += tile_count(t.layers[l], rank);
  for (int e = tid; e < slots * 8; e += kThreads) {
    const ClusterMlpTile tile = t.tiles[e / 8];
    const int c = tile.c0 + e % 8;
    const ClusterMlpSegment& sg = t.segments[tile.seg];
    t.bias[e] = sg.b != nullptr && c < t.shapes[tile.seg].n ? sg.b[c] : 0.f;
  }

  // 2. Layer 0's first weights on their way while the input lands.
  Tile::B16 ring[kDepth];
  Item next;
  {
    const ClusterMlpLayer L = t.layers[0];
    const int nt = tile_count(L, rank), parts = k_parts(L, nt, kWarps);
    if (warp < nt * parts) {
      next = item_of(t, 0, nt, parts, warp);
      issue(next, ring);
    }
  }

  // 3. The input's rows into buffer 0 as TF32 operands; zeros past the live rows and the width
  // (a k-step reads 16 columns).
  const int S = a.input_width, S16 = (S + 15) / 16 * 16;
  for (int i = tid; i < R * S16; i += kThreads) {
    const int r = i / S16, c = i - r * S16;
    buf0[r * pitch0 + c] =
        r < live && c < S ? Tile::to_operand(in.p[static_cast<std::int64_t>(cr.row0 + r) * in.ld + c]) : 0.f;
  }
  stamp(1);
  // Every block of the cluster has started before any writes into another's shared memory; the
  // barrier also ends this block's steps 1 and 3.
  cluster.sync();
  stamp(2);

  for (int l = 0, slot0 = 0; l < layer_count; ++l) {
    const ClusterMlpLayer L = t.layers[l];
    const float* const x = (l & 1) ? buf1 : buf0;
    float* const y = (l & 1) ? buf0 : buf1;
    const int xp = (l & 1) ? pitch1 : pitch0, yp = (l & 1) ? pitch0 : pitch1;
    const bool last = l + 1 == layer_count;
    const int nt = tile_count(L, rank), parts = k_parts(L, nt, kWarps), cols = nt * 8;

    // 4. The products: each warp's items, the first one's weights already on their way.
    for (int item = warp; item < nt * parts; item += kWarps) {
      const Item it = item == warp ? next : item_of(t, slot0, nt, parts, item);
      if (item != warp) issue(it, ring);
      Tile acc[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) acc[m].zero();
      if (it.n_left > 0) {
        const float* const xa = x + it.in_c0;
        for (int s = it.s0; s < it.s1; s += kDepth) {
#pragma unroll
          for (int j = 0; j < kDepth; ++j) {
            const int st = s + j;
            if (st < it.s1) {
              Tile::B16 cur = ring[j];
              Tile::round_b16(cur);
              const int ahead = st + kDepth;
              if (ahead < it.s1) Tile::load_b16(ring[j], it.w + ahead * 16, it.k, it.n_left, it.k - ahead * 16, it.vec);
#pragma unroll
              for (int m = 0; m < MT; ++m) {
                Tile::A16 fa;
                Tile::load_a16(fa, xa + m * 16 * xp + st * 16, xp);
                acc[m].mma16(fa, cur);
              }
            }
          }
        }
      }
      float* const part = stage + it.q * R * cols + it.i * 8;
#pragma unroll
      for (int m = 0; m < MT; ++m)
        acc[m].for_each([&](int r, int c, float v) { part[(m * 16 + r) * cols + c] = v; });
    }
    // 5. The next layer's first weights on their way: they do not wait for this layer's outputs.
    if (!last) {
      const ClusterMlpLayer N = t.layers[l + 1];
      const int nn = tile_count(N, rank), np = k_parts(N, nn, kWarps);
      if (warp < nn * np) {
        next = item_of(t, slot0 + nt, nn, np, warp);
        issue(next, ring);
      }
    }
    __syncthreads();
    stamp(3 + 4 * l);

    // 6. Four columns a thread: the parts summed in order, the bias, the ReLU (NaN kept, as the
    // fused step's products keep it), the live rows stored, the operands into this block's buffer.
    for (int e = tid; e < R * nt * 2; e += kThreads) {
      const int r = e / (nt * 2), h = e - r * (nt * 2), i = h >> 1, c4 = (h & 1) * 4;
      const ClusterMlpTile tile = t.tiles[slot0 + i];
      const ClusterMlpShape sh = t.shapes[tile.seg];
      float* const out = t.segments[tile.seg].out;
      const std::int64_t out_ld = t.segments[tile.seg].out_ld;
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int c = tile.c0 + c4 + u;
        float s = 0.f;
        for (int q = 0; q < parts; ++q) s += stage[(q * R + r) * cols + i * 8 + c4 + u];
        if (c < sh.n) {
          s += t.bias[(slot0 + i) * 8 + c4 + u];
          if (L.relu) s = s < 0.f ? 0.f : s;
          if (out != nullptr && r < live) out[static_cast<std::int64_t>(cr.row0 + r) * out_ld + c] = s;
        } else {
          s = 0.f;
        }
        v[u] = Tile::to_operand(s);
      }
      if (!last)
        *reinterpret_cast<float4*>(y + r * yp + sh.out_c0 + tile.c0 + c4) = make_float4(v[0], v[1], v[2], v[3]);
    }
    if (!last) __syncthreads();
    stamp(4 + 4 * l);

    // 7. This block's columns from its buffer into every other block's.
    if (!last)
      for (int e = tid; e < R * nt * 2; e += kThreads) {
        const int r = e / (nt * 2), h = e - r * (nt * 2), i = h >> 1, c4 = (h & 1) * 4;
        const ClusterMlpTile tile = t.tiles[slot0 + i];
        float4* const at = reinterpret_cast<float4*>(y + r * yp + t.shapes[tile.seg].out_c0 + tile.c0 + c4);
        const float4 v4 = *at;
#pragma unroll
        for (int p = 1; p < kBlocks; ++p) *cluster.map_shared_rank(at, (rank + p) % kBlocks) = v4;
      }
    stamp(5 + 4 * l);
    if (!last) cluster.sync();
    stamp(6 + 4 * l);
    slot0 += nt;
  }
}

template <int W>
const void* kernel_of_rows(int rows) {
  switch (rows) {
    case 16: return reinterpret_cast<const void*>(cluster_mlp_kernel<1, W>);
    case 32: return reinterpret_cast<const void*>(cluster_mlp_kernel<2, W>);
    case 48: return reinterpret_cast<const void*>(cluster_mlp_kernel<3, W>);
    case 64: return reinterpret_cast<const void*>(cluster_mlp_kernel<4, W>);
    default: return nullptr;
  }
}

const void* kernel_for(int rows, int warps) {
  return warps == 8 ? kernel_of_rows<8>(rows) : warps == 16 ? kernel_of_rows<16>(rows) : nullptr;
}

template <int W>
void launch(const ClusterMlpArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.cluster_count * kBlocks)), block(32, W);
  switch (args.rows) {
    case 16: cluster_mlp_kernel<1, W><<<grid, block, args.bytes, stream>>>(args); break;
    case 32: cluster_mlp_kernel<2, W><<<grid, block, args.bytes, stream>>>(args); break;
    case 48: cluster_mlp_kernel<3, W><<<grid, block, args.bytes, stream>>>(args); break;
    case 64: cluster_mlp_kernel<4, W><<<grid, block, args.bytes, stream>>>(args); break;
    default: throw Error(str("cluster_mlp: ", args.rows, " rows a cluster; expected 16, 32, 48 or 64"));
  }
}

}  // namespace

bool cluster_mlp_available() {
  int device = 0, major = 0;
  ZS_CUDA_CHECK(cudaGetDevice(&device));
  ZS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}

std::size_t cluster_mlp_bytes(const ClusterMlpArgs& a) {
  const void* const kernel = kernel_for(a.rows, a.warps);
  if (kernel == nullptr || a.pitch[0] < 1 || a.pitch[1] < 1 || a.stage_floats < 0 || a.layer_count < 1 ||
      a.shape_count < 1 || a.block_tiles < 0 || !cluster_mlp_available())
    return 0;
  int device = 0, optin = 0;
  ZS_CUDA_CHECK(cudaGetDevice(&device));
  ZS_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const std::size_t bytes = sizeof(float) * buffer_floats(a) + table_bytes(a.layer_count, a.shape_count, a.block_tiles);
  if (bytes > static_cast<std::size_t>(optin)) return 0;
  ZS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return bytes;
}

int cluster_mlp_active_clusters(int rows, int warps, std::size_t bytes) {
  const void* const kernel = kernel_for(rows, warps);
  if (kernel == nullptr || bytes == 0) return 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kBlocks * 256, 1, 1);
  config.blockDim = dim3(32, static_cast<unsigned>(warps), 1);
  config.dynamicSmemBytes = bytes;
  int clusters = 0;
  ZS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  return clusters;
}

void cluster_mlp(const ExecSpace& exec, const ClusterMlpArgs& args) {
  require(args.bytes > 0, "cluster_mlp: bytes = 0; expected cluster_mlp_bytes of the launch (0 says this kernel "
          "cannot run it)");
  require(args.cluster_count >= 1 && args.layer_count >= 1, "cluster_mlp: ", args.cluster_count, " clusters and ",
          args.layer_count, " layers; expected at least 1 of each");
  if (args.warps == 8) {
    launch<8>(args, exec.cuda_stream());
  } else {
    require(args.warps == 16, "cluster_mlp: ", args.warps, " warps a block; expected 8 or 16");
    launch<16>(args, exec.cuda_stream());
  }
  ZS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace zs
