// The network's layers for several passes as one row-block launch (kernels/row_block_mlp.hpp):
// every trunk layer, the heads' hidden layers (each on the features) and their output layers
// (each on its own hidden layer, biases added), writing what add_forward_phases writes but the
// dueling head's log-probabilities. A prototype for measurement: the step does not use it yet.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/row_block_mlp.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class RowBlockForward {
 public:
  // rows: 16 or 32 rows a block. Throws zs::Error naming the pass when one does not fit the
  // network (its input's extents, its rows in its activations).
  RowBlockForward(const Network& net, const std::vector<ForwardPass>& passes, int rows = 32);
  // One launch; no allocation, no sync. clocks: RowBlockMlpLaunch's, when given.
  void enqueue(const ExecSpace& exec, std::uint64_t* clocks = nullptr) const { launch_(exec, clocks); }

  int teams() const { return launch_.teams(); }
  int layers() const { return launch_.layers(); }
  std::size_t scratch_bytes() const { return launch_.scratch_bytes(); }

 private:
  kernels::RowBlockLaunchOfRows<ExecSpace> launch_;
};

}  // namespace zs
