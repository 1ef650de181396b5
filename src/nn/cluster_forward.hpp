// The network's layers for several passes as one launch of thread-block clusters
// (backends/cluster_mlp.hpp): every trunk layer, the heads' hidden layers (each on the features)
// and their output layers (each on its own hidden layer, biases added), writing what
// RowBlockForward writes (every activation but the dueling head's log-probabilities). CUDA on
// sm_90 only, in TF32: where the backend has no clusters, supported() says so and the caller keeps
// the fused forward's phases.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cluster_mlp.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class ClusterForward {
 public:
  // Whether this backend can run `net`'s layers this way at `rows` rows a cluster (0: whichever
  // the constructor would choose) and `warps` warps a block; when not, why, in `reason`.
  static bool supported(const Network& net, int rows = 0, std::string* reason = nullptr, int warps = 8);
  // rows: 16, 32, 48 or 64 rows a cluster, or 0: the fewest that let every cluster run at once
  // (64 when none do); warps: 8 or 16 a block. Throws zs::Error naming the pass when one does
  // not fit the network, and when supported() is false.
  ClusterForward(const Network& net, const std::vector<ForwardPass>& passes, int rows = 0, int warps = 8);
  // One launch; no allocation, no sync. clocks: ClusterMlpArgs::clocks, when given
  // (cluster_mlp_stamps(layers()) for each of clusters() × kClusterMlpBlocks blocks).
  void enqueue(const ExecSpace& exec, std::uint64_t* clocks = nullptr) const {
    ClusterMlpArgs a = args_;
    a.clocks = clocks;
    cluster_mlp(exec, a);
  }

  int rows() const { return args_.rows; }
  int warps() const { return args_.warps; }
  int clusters() const { return args_.cluster_count; }
  int layers() const { return args_.layer_count; }
  std::size_t bytes() const { return args_.bytes; }

 private:
  Kokkos::View<ClusterMlpLayer*, MemSpace> layers_;
  Kokkos::View<ClusterMlpShape*, MemSpace> shapes_;
  Kokkos::View<ClusterMlpSegment*, MemSpace> segments_;
  Kokkos::View<ClusterMlpTile*, MemSpace> tiles_;
  Kokkos::View<ClusterMlpRows*, MemSpace> clusters_;
  Kokkos::View<ClusterMlpInput*, MemSpace> inputs_;
  ClusterMlpArgs args_;
};

}  // namespace zs
