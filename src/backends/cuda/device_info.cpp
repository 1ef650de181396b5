#include "backends/device_info.hpp"

#include "backends/backend.hpp"
#include "backends/cuda/check.hpp"

namespace zs {

DeviceInfo device_info() {
  DeviceInfo info;
  info.backend = kBackendName;
  info.kokkos_version = str(KOKKOS_VERSION / 10000, ".", KOKKOS_VERSION / 100 % 100, ".",
                            KOKKOS_VERSION % 100);
  int n = 0;
  ZS_CUDA_CHECK(cudaGetDeviceCount(&n));
  int current = 0;
  cudaGetDevice(&current);
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    ZS_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    info.devices.push_back(str("GPU ", d, (d == current ? " (in use)" : ""), ": ", p.name,
                               ", sm_", p.major, p.minor, ", ", p.multiProcessorCount, " SMs, ",
                               p.totalGlobalMem >> 20, " MiB, L2 ", p.l2CacheSize >> 20, " MiB"));
  }
  info.concurrency = ExecSpace().concurrency();
  return info;
}

std::size_t max_team_scratch_bytes() {
  int device = 0, bytes = 0;
  ZS_CUDA_CHECK(cudaGetDevice(&device));
  ZS_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(bytes) - 1024;
}

}  // namespace zs
