// The one-launch spectral norm on sm_90: a cluster of kPowerIterationCluster blocks per matrix.
// Block `rank` of matrix m owns rows [rank·slab, (rank + 1)·slab), slab = ⌈rows / cluster⌉:
//   1. its slab of W and of u into shared memory (8 loads in flight a thread);
//   2. part[c] = Σ_{its rows, in order} W[r, c] u[r];                       cluster barrier
//   3. v_raw[c] = Σ_{ranks, in order} part_rank[c] (read from each block's shared memory, so
//      every block holds the same bits), ‖v_raw‖ by one warp, v stored by rank 0;
//   4. u_raw[r] = (W[r, :] · v_raw) / (‖v_raw‖ + eps) for its rows, a warp a row, from shared
//      memory; its rows' Σ u_raw² by one warp;                              cluster barrier
//   5. σ = √(Σ_{ranks, in order} those sums) (the same bits in every block);
//      cluster barrier (no block leaves while another still reads its shared memory);
//   6. its rows of u (or the reset), σ by rank 0, and its slab of W scaled when σ > σ_max.
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>

#include "backends/cluster_power_iteration.hpp"
#include "backends/cuda/check.hpp"

namespace zs {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCluster = kPowerIterationCluster;
constexpr int kLoads = 8;
// A block's shared memory at most: two blocks of a cluster may then share a multiprocessor.
constexpr std::size_t kMaxBytes = 100 * 1024;

__host__ __device__ constexpr std::size_t align8(std::size_t n) { return (n + 7) / 8 * 8; }

__host__ __device__ inline int slab_rows(int rows) { return (rows + kCluster - 1) / kCluster; }

// Shared memory of one matrix's block: W's slab (float), part and v_raw (double, cols each),
// u then u_raw of the slab's rows (double), two sums.
__host__ __device__ inline std::size_t matrix_bytes(int rows, int cols) {
  const std::size_t slab = static_cast<std::size_t>(slab_rows(rows));
  return align8(slab * cols * sizeof(float)) + 2 * static_cast<std::size_t>(cols) * sizeof(double) +
         slab * sizeof(double) + 2 * sizeof(double);
}

__device__ inline double warp_sum(double s) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  return s;  // lane 0's is the sum
}

__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads)
    power_iteration_cluster(const ClusterPowerIterationArgs a) {
  if (a.skip != nullptr && *a.skip != 0) return;  // the same for every block: no barrier is left waiting
  cg::cluster_group cluster = cg::this_cluster();
  const int m = static_cast<int>(blockIdx.x) / kCluster;
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const ClusterMatrix d = a.matrices[m];
  const int rows = d.rows, cols = d.cols, slab = slab_rows(rows);
  const int r0 = rank * slab < rows ? rank * slab : rows;
  const int n = (r0 + slab < rows ? r0 + slab : rows) - r0;
  const int elems = n * cols;

  extern __shared__ __align__(16) unsigned char zs_power_iteration_smem[];
  unsigned char* const base = zs_power_iteration_smem;
  float* const w = reinterpret_cast<float*>(base);
  std::size_t at = align8(static_cast<std::size_t>(slab) * cols * sizeof(float));
  double* const part = reinterpret_cast<double*>(base + at);
  at += static_cast<std::size_t>(cols) * sizeof(double);
  double* const vraw = reinterpret_cast<double*>(base + at);
  at += static_cast<std::size_t>(cols) * sizeof(double);
  double* const urow = reinterpret_cast<double*>(base + at);
  at += static_cast<std::size_t>(slab) * sizeof(double);
  double* const sums = reinterpret_cast<double*>(base + at);  // [0] ‖v_raw‖², [1] the slab's Σ u_raw²

  // 1.
  const float* const W = a.params + d.weight_offset + static_cast<std::int64_t>(r0) * cols;
  for (int i = tid; i < elems; i += kThreads * kLoads) {
    float b[kLoads];
#pragma unroll
    for (int q = 0; q < kLoads; ++q) {
      const int j = i + q * kThreads;
      b[q] = j < elems ? W[j] : 0.f;
    }
#pragma unroll
    for (int q = 0; q < kLoads; ++q) {
      const int j = i + q * kThreads;
      if (j < elems) w[j] = b[q];
    }
  }
  for (int r = tid; r < n; r += kThreads) urow[r] = a.uv[d.u_offset + r0 + r];
  __syncthreads();

  // 2.
  for (int c = tid; c < cols; c += kThreads) {
    double s = 0.0;
    for (int r = 0; r < n; ++r) s += static_cast<double>(w[r * cols + c]) * urow[r];
    part[c] = s;
  }
  cluster.sync();

  // 3.
  for (int c = tid; c < cols; c += kThreads) {
    double s = 0.0;
    for (int b = 0; b < kCluster; ++b) s += cluster.map_shared_rank(part, b)[c];
    vraw[c] = s;
  }
  __syncthreads();
  if (warp == 0) {
    double s = 0.0;
    for (int c = lane; c < cols; c += 32) s += vraw[c] * vraw[c];
    s = warp_sum(s);
    if (lane == 0) sums[0] = s;
  }
  __syncthreads();
  const double v_scale = 1.0 / (::sqrt(sums[0]) + a.eps);
  if (rank == 0)
    for (int c = tid; c < cols; c += kThreads) a.uv[d.v_offset + c] = static_cast<float>(vraw[c] * v_scale);

  // 4. (u is no longer needed: urow takes u_raw)
  for (int r = warp; r < n; r += kWarps) {
    double s = 0.0;
    for (int c = lane; c < cols; c += 32) s += static_cast<double>(w[r * cols + c]) * vraw[c];
    s = warp_sum(s);
    if (lane == 0) urow[r] = s * v_scale;
  }
  __syncthreads();
  if (warp == 0) {
    double s = 0.0;
    for (int r = lane; r < n; r += 32) s += urow[r] * urow[r];
    s = warp_sum(s);
    if (lane == 0) sums[1] = s;
  }
  cluster.sync();

  // 5.
  double uu = 0.0;
  for (int b = 0; b < kCluster; ++b) uu += cluster.map_shared_rank(sums, b)[1];
  cluster.sync();
  const double sigma = ::sqrt(uu);
  const bool degenerate = !isfinite(sigma) || sigma < a.min_sigma;

  // 6.
  float* const u = a.uv + d.u_offset + r0;
  if (degenerate) {
    for (int r = tid; r < n; r += kThreads) u[r] = a.uv_init[d.u_offset + r0 + r];
    // The same threads wrote v above, column for column: these stores come after theirs.
    if (rank == 0)
      for (int c = tid; c < cols; c += kThreads) a.uv[d.v_offset + c] = a.uv_init[d.v_offset + c];
  } else {
    const double u_scale = 1.0 / (sigma + a.eps);
    for (int r = tid; r < n; r += kThreads) u[r] = static_cast<float>(urow[r] * u_scale);
  }
  if (rank == 0 && tid == 0) a.sigmas[m] = static_cast<float>(sigma);
  if (!degenerate && sigma > a.sigma_max) {
    const float f = static_cast<float>(a.sigma_max / sigma);
    float* const out = a.params + d.weight_offset + static_cast<std::int64_t>(r0) * cols;
    for (int i = tid; i < elems; i += kThreads) out[i] = w[i] * f;
  }
}

}  // namespace

std::size_t cluster_power_iteration_bytes(const std::vector<ClusterMatrix>& matrices) {
  int device = 0, major = 0;
  ZS_CUDA_CHECK(cudaGetDevice(&device));
  ZS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9 || matrices.empty()) return 0;
  std::size_t bytes = 0;
  for (const ClusterMatrix& d : matrices) {
    if (d.rows < 1 || d.cols < 1) return 0;
    bytes = std::max(bytes, matrix_bytes(d.rows, d.cols));
  }
  if (bytes > kMaxBytes) return 0;
  ZS_CUDA_CHECK(cudaFuncSetAttribute(power_iteration_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  return bytes;
}

void cluster_power_iteration(const ExecSpace& exec, const ClusterPowerIterationArgs& args) {
  require(args.bytes > 0, "cluster_power_iteration: bytes = 0; expected cluster_power_iteration_bytes of the "
          "matrices (0 says this kernel cannot run them)");
  require(args.count >= 1, "cluster_power_iteration: ", args.count, " matrices; expected at least 1");
  power_iteration_cluster<<<args.count * kCluster, kThreads, args.bytes, exec.cuda_stream()>>>(args);
  ZS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace zs
