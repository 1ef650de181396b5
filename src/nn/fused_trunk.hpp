// The network's trunk (config `trunk`: dense + ReLU layers) for several passes as one fused
// launch (kernels/fused_mlp.hpp), prepared once, instead of a GEMM batch and a bias/ReLU launch
// per layer. A prototype for measurement: the step does not use it yet.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/fused_mlp.hpp"
#include "kernels/row_block_mlp.hpp"
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

// A trunk pass as the layer-stack kernels take it (pass index p names it in errors); throws
// zs::Error when it does not fit c's trunk.
kernels::FusedMlpPass mlp_pass(const Config& c, const FusedTrunkPass& x, std::size_t p);

// Which kernel runs the trunk: the seventh session's FP32 walk of weight tiles through scratch
// (kernels/fused_mlp.hpp), or the row blocks of 16 or 32 rows with TF32 warp tiles and weights
// streamed into registers (kernels/row_block_mlp.hpp).
enum class TrunkKernel { serial_tiles, row_blocks_16, row_blocks_32 };

class FusedTrunk {
 public:
  // Throws zs::Error naming the pass and the extents when a pass does not fit the network.
  // opt applies to TrunkKernel::serial_tiles.
  FusedTrunk(const Network& net, const std::vector<FusedTrunkPass>& passes, const kernels::FusedMlpOptions& opt = {},
             TrunkKernel kernel = TrunkKernel::serial_tiles);
  // One launch for every pass; no allocation, no sync.
  void enqueue(const ExecSpace& exec) const;

  int rows_per_team() const;
  int teams() const;
  std::size_t scratch_bytes() const;

 private:
  // f(the launch of kernel_).
  template <class F>
  decltype(auto) with_launch(F&& f) const {
    return kernel_ == TrunkKernel::serial_tiles ? f(serial_) : f(rows_);
  }

  TrunkKernel kernel_;
  kernels::FusedMlpLaunch<ExecSpace> serial_;
  kernels::RowBlockLaunchOfRows<ExecSpace> rows_;
};

}  // namespace zs
