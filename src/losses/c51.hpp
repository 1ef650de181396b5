// The C51 double-DQN loss, the step's main term: per sample and branch, a* from the online net on
// s′, the target net's distribution at a* projected onto the support, cross-entropy against the
// online net on s; per-sample priorities for the replay buffer; its gradient through the heads
// and the trunk. Its share of max_grad_norm is what the other terms leave.
#pragma once
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "losses/c51_fused.hpp"
#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"

namespace zs {

// Enqueues the loss into `out` and ∂loss/∂(head outputs) into g. online: activations of the
// online net on all_states() (2B rows); target: of the target net on next_states() (B rows).
// narrow_gather, min_blocks: kernels::C51Loss's.
void c51_loss(const ExecSpace& exec, const Network& net, const Activations& online, const Activations& target,
              const DeviceBatch& batch, C51Outputs& out, Gradients& g, bool narrow_gather = false, int min_blocks = 0);

// With ctx.fused the term's enqueue() is the whole chain, the forward included, as one fused
// kernel (FusedC51), built by fuse() once every term is made (so that it can carry the others'
// backward); otherwise the loss kernel and a BackwardPlan after the trainer's forward.
class C51Term final : public LossTerm {
 public:
  C51Term(const StepContext& ctx, float budget);
  void enqueue(const ExecSpace& exec, const Gemm& gemm) override;
  // The trunk and the main heads.
  std::vector<std::pair<std::size_t, std::size_t>> gradient_spans() const override {
    return {ctx_.layout.layers_span(0, ctx_.layout.trunk_layers() + ctx_.layout.head_set_layers() - 1)};
  }
  // Builds the fused kernel (ctx.fused), carrying each rider's backward (FusedC51). Once. Where
  // the kernel has no room for every rider (kernels::kFusedMaxItems runs of tiles), the last ones
  // are left out and keep their own launches; with a rider left out the kernel takes no norm
  // (FusedOptions::norm_in_backward), which the trainer's norms' launch then needs. Returns how
  // many riders it took (FusedRider::accepted is called on each).
  std::size_t fuse(const std::vector<FusedRider>& riders);
  // The fused kernel, nullptr when the term runs launch plans.
  const FusedC51* fused() const { return fused_.get(); }
  FusedC51* fused() { return fused_.get(); }
 private:
  const StepContext& ctx_;
  Gradients g_;
  std::unique_ptr<BackwardPlan> backward_;
  std::unique_ptr<FusedC51> fused_;
};

}  // namespace zs
