// The CQL regulariser, an auxiliary loss term: α·(logsumexp_a Q − Q(taken)) per branch on the C51
// head of the online net, and its gradient through the head and the trunk.
#pragma once
#include <memory>

#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class CqlTerm final : public LossTerm {
 public:
  CqlTerm(const StepContext& ctx, float budget);
  void enqueue(const ExecSpace& exec, const Gemm& gemm) override;

 private:
  const StepContext& ctx_;
  Gradients g_;
  std::unique_ptr<BackwardPlan> backward_;
};

}  // namespace zs
