// One power iteration + scaling of every weight matrix in a single launch, where the backend has
// thread-block clusters (CUDA, sm_90): a cluster of kPowerIterationCluster blocks per matrix,
// each block holding a slab of the matrix's rows in shared memory, so W is read from memory once
// and the passes meet at the cluster's hardware barrier instead of at launch boundaries. What one
// call computes is kernels/power_iteration.hpp's (the same rule for σ > σ_max, tiny and
// non-finite matrices); only the order of the sums differs (slabs of rows/cluster rows, each
// sum in a fixed order, so a call is reproducible). The host has no such kernel:
// cluster_power_iteration_bytes says 0 there and callers keep the three launches.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"

namespace zs {

// One matrix: offsets into the flat parameter buffer (W [rows, cols] row-major) and into the
// u/v buffer (u: rows floats, v: cols floats).
struct ClusterMatrix {
  std::int64_t weight_offset = 0, u_offset = 0, v_offset = 0;
  std::int32_t rows = 0, cols = 0;
};

// Blocks a matrix is spread over.
inline constexpr int kPowerIterationCluster = 8;

// Shared memory each block of the one-launch kernel needs for these matrices (and, on CUDA, the
// kernel allowed that much), or 0 where it cannot run them: this backend has no clusters, or a
// block's slab of some matrix does not fit.
std::size_t cluster_power_iteration_bytes(const std::vector<ClusterMatrix>& matrices);

struct ClusterPowerIterationArgs {
  const ClusterMatrix* matrices = nullptr;  // device table of `count` matrices
  int count = 0;
  float* params = nullptr;
  float* uv = nullptr;
  const float* uv_init = nullptr;  // what u and v are reset to for a degenerate matrix
  float* sigmas = nullptr;         // one per matrix
  double sigma_max = 1.0;
  double eps = 1e-12;              // normalisation guard
  double min_sigma = 1e-6;         // below: degenerate
  const int* skip = nullptr;       // set on the device: change nothing (may be null)
  std::size_t bytes = 0;           // cluster_power_iteration_bytes of these matrices
};

// Enqueues the one launch on exec: no allocation, no fence (it can be captured into a graph).
// Throws zs::Error where the backend has no such kernel (bytes 0).
void cluster_power_iteration(const ExecSpace& exec, const ClusterPowerIterationArgs& args);

}  // namespace zs
