// The CQL regulariser, an auxiliary loss term: α·(logsumexp_a Q − Q(taken)) per branch on the C51
// head of the online net, and its gradient through the head and the trunk.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class CqlTerm final : public LossTerm {
 public:
  CqlTerm(const StepContext& ctx, float budget);
  void enqueue(const ExecSpace& exec, const Gemm& gemm) override;
  // The trunk and the main heads.
  std::vector<std::pair<std::size_t, std::size_t>> gradient_spans() const override {
    return {ctx_.layout.layers_span(0, ctx_.layout.trunk_layers() + ctx_.layout.head_set_layers() - 1)};
  }
  // Its gradient is the online net's on s through the main heads: the fused kernel can carry it.
  std::optional<FusedRider> ride_fused(const FusedOptions& options, const Gemm& gemm) override;

 private:
  void enqueue_loss(const ExecSpace& exec);

  const StepContext& ctx_;
  Gradients g_;
  std::unique_ptr<BackwardPlan> backward_;
  bool riding_ = false;  // ride_fused() was taken: the fused kernel runs the term
};

}  // namespace zs
