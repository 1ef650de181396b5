#include "backends/cluster_mlp.hpp"

#include "core/error.hpp"

namespace zs {

bool cluster_mlp_available() { return false; }

std::size_t cluster_mlp_bytes(const ClusterMlpArgs&) { return 0; }

int cluster_mlp_active_clusters(int, int, std::size_t) { return 0; }

void cluster_mlp(const ExecSpace&, const ClusterMlpArgs&) {
  throw Error("cluster_mlp: this backend has no thread-block clusters; expected the fused forward's phases or "
              "the row blocks here");
}

}  // namespace zs
