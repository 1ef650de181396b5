// The host-side owner of batched spectral normalisation: the device table of weight-matrix
// descriptors, the persistent power-iteration vectors u/v, and σ per matrix for monitoring.
// Built once from a ParamLayout, with the kernels' plan (which team does which part of which
// matrix, and the scratch between passes); apply() is three launches (kernels/power_iteration.hpp
// says what one call computes and what happens to zero, tiny and non-finite matrices), or where
// the backend can, one (backends/cluster_power_iteration.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cluster_power_iteration.hpp"
#include "kernels/power_iteration.hpp"
#include "core/param_layout.hpp"

namespace zs {

class SpectralNorm {
 public:
  // One matrix per layer of `layout`, in layout order. u (length out) and v (length in) start
  // as unit vectors in random normal directions drawn from `seed` by a generator of our own
  // (std::normal_distribution's output differs between standard libraries), so a seed gives
  // the same vectors everywhere. Throws zs::Error when sigma_max is not a finite number > 0.
  // one_launch: where the backend can (backends/cluster_power_iteration.hpp: CUDA sm_90, every
  // matrix's slab within a block's shared memory), apply() is one launch of a cluster per
  // matrix instead of three; one_launch() says whether it is.
  SpectralNorm(const ParamLayout& layout, float sigma_max, std::uint64_t seed, bool one_launch = true);

  // Enqueues one power iteration + scaling of every weight matrix in `params` (a flat buffer
  // laid out by the same ParamLayout) on `exec`. One launch or three; no allocation, no fence. With
  // `skip` (a device flag, e.g. the guard's) set when they run, they change nothing.
  void apply(const ExecSpace& exec, const DeviceFloats& params, Kokkos::View<const int, MemSpace> skip = {}) const;

  // σ estimated by the latest apply(), one per matrix in layout order (0 before any apply).
  Kokkos::View<const float*, MemSpace> sigmas() const { return sigmas_; }
  // The persistent vectors: matrix i's u at descriptors()[i].u_offset, v at .v_offset.
  Kokkos::View<const float*, MemSpace> vectors() const { return uv_; }
  // The same, writable: for restoring a checkpoint (between steps, never inside one).
  const DeviceFloats& device_vectors() const { return uv_; }
  // What u and v start as, and are reset to for a degenerate (σ < 1e-6 or non-finite) matrix.
  Kokkos::View<const float*, MemSpace> initial_vectors() const { return uv_init_; }
  // Host copy of the device descriptor table.
  const std::vector<kernels::SpectralNormDesc>& descriptors() const { return host_descs_; }
  const std::vector<std::string>& names() const { return names_; }
  int matrices() const { return static_cast<int>(host_descs_.size()); }
  float sigma_max() const { return sigma_max_; }
  bool one_launch() const { return cluster_bytes_ > 0; }

 private:
  float sigma_max_;
  std::size_t param_size_;
  std::vector<kernels::SpectralNormDesc> host_descs_;
  std::vector<std::string> names_;
  kernels::SpectralNormPlan<MemSpace> plan_;
  DeviceFloats uv_, uv_init_, sigmas_;
  Kokkos::View<ClusterMatrix*, MemSpace> cluster_matrices_;
  std::size_t cluster_bytes_ = 0;  // > 0: the one launch
};

}  // namespace zs
