// The network's trunk (config `trunk`: dense + ReLU layers) for several passes as one fused
// launch (kernels/fused_mlp.hpp), prepared once, instead of a GEMM batch and a bias/ReLU launch
// per layer. A prototype for measurement: the step does not use it yet.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/fused_mlp.hpp"
#include "nn/network.hpp"

namespace zs {

// One trunk pass: `params` on `input` [rows, state_dim] into `output` [rows, trunk.back()] (the
// features), and, when `hidden` is not empty, each earlier layer's post-ReLU output into
// hidden[i] [rows, trunk[i]] (the backward pass reads them).
struct FusedTrunkPass {
  const ParamBuffer* params = nullptr;
  ConstMatrixView input;
  MatrixView output;
  std::vector<MatrixView> hidden;
};

// The pass ForwardPlan would make of (params, input, acts, row0): every trunk layer's output into
// rows [row0, row0 + input rows) of acts.trunk.
FusedTrunkPass trunk_pass(const ParamBuffer& params, const ConstMatrixView& input, const Activations& acts, int row0);

class FusedTrunk {
 public:
  // Throws zs::Error naming the pass and the extents when a pass does not fit the network.
  FusedTrunk(const Network& net, const std::vector<FusedTrunkPass>& passes, const kernels::FusedMlpOptions& opt = {});
  // One launch for every pass; no allocation, no sync.
  void enqueue(const ExecSpace& exec) const { launch_(exec); }

  int rows_per_team() const { return launch_.rows_per_team(); }
  int teams() const { return launch_.teams(); }
  std::size_t scratch_bytes() const { return launch_.scratch_bytes(); }

 private:
  kernels::FusedMlpLaunch<ExecSpace> launch_;
};

}  // namespace zs
