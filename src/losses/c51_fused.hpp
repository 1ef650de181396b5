// The C51 term's whole chain as one fused kernel (nn/fused_kernel.hpp): the forward of the online
// net on s and s′ and of the target net on s′, the loss a tile per (sample, branch), and the
// backward through the heads and the trunk into the term's gradient, weight gradients beside the
// input gradients of the layer below. What the launch plans and c51_loss enqueue as ~30
// launches is one persistent launch on CUDA.
#pragma once
#include <memory>
#include <vector>

#include "losses/loss_term.hpp"
#include "nn/cluster_forward.hpp"
#include "nn/fused_forward.hpp"
#include "nn/row_block_chain.hpp"
#include "nn/row_block_forward.hpp"

namespace zs {

class FusedC51 {
 public:
  // Reads and writes what the plans would: ctx's activations, ctx.c51 (loss, priorities,
  // projected, a*), g's trunk gradients, and every main-network tensor of `grad`; the outputs'
  // gradients go to its own buffers, whose rows it pads to four floats (g's stay unwritten).
  // Each rider's backward runs in the backward's phases beside C51's (FusedOptions::
  // auxiliaries_ride), its loss launched between the loss's phase and them; only where
  // carries_riders(options).
  FusedC51(const StepContext& ctx, Gradients& g, const ParamBuffer& grad, const FusedOptions& options,
           const std::vector<FusedRider>& riders = {});
  // Whether a kernel of these options takes riders: auxiliaries_ride, the backward as phases,
  // each phase a launch of its own (a rider's loss is a launch between two of them).
  static bool carries_riders(const FusedOptions& options);
  // The row-block or cluster forward first when FusedOptions asks for it.
  void enqueue(const ExecSpace& exec) const {
    if (row_blocks_) row_blocks_->enqueue(exec);
    if (clusters_) clusters_->enqueue(exec);
    kernel_.enqueue(exec);
  }
  const FusedKernel& kernel() const { return kernel_; }
  FusedKernel& kernel() { return kernel_; }

 private:
  DeviceFloats d_value_parts_;  // [K][B][atoms, padded]: each branch's share of ∂loss/∂value_out
  DeviceFloats d_branch_out_;   // per branch [B][n_k·atoms, padded]: ∂loss/∂branch_out
  DeviceFloats dz_hidden_;      // [1 + K][B][head_hidden]: each head's gradient below its ReLU
  std::vector<DeviceFloats> rider_dz_hidden_;  // the same, a rider each
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> ce_;  // [B, K]
  std::unique_ptr<RowBlockForward> row_blocks_;  // FusedOptions::row_block_forward
  std::unique_ptr<ClusterForward> clusters_;     // FusedOptions::cluster_forward
  std::unique_ptr<RowBlockChain> chain_;         // FusedOptions::row_block_backward, launched by kernel_
  FusedKernel kernel_;
};

}  // namespace zs
