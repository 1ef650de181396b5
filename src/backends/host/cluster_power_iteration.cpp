#include "backends/cluster_power_iteration.hpp"

#include "core/error.hpp"

namespace zs {

std::size_t cluster_power_iteration_bytes(const std::vector<ClusterMatrix>&) { return 0; }

void cluster_power_iteration(const ExecSpace&, const ClusterPowerIterationArgs&) {
  throw Error("cluster_power_iteration: this backend has no thread-block clusters; expected the three-launch "
              "spectral norm (kernels/power_iteration.hpp) here");
}

}  // namespace zs
