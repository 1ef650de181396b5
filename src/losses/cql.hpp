// The CQL regulariser (issue 6): α·(logsumexp_a Q − Q(taken)) per branch on the C51 head of the
// online net, its gradient through the head and trunk into its own buffer, and that buffer's norm.
#pragma once
#include <memory>

#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"
#include "nn/batch.hpp"

namespace zs {

class CqlRegulariser {
 public:
  CqlRegulariser(const Config& c, const ParamLayout& layout, int batch_size);
  // online: the online net's activations on all_states() (2B rows; the s-half is used).
  void enqueue(const ExecSpace& exec, const Gemm& gemm, const Network& net, const ParamBuffer& params,
               const Activations& online, const DeviceBatch& batch);
  const AuxOutputs& out() const { return out_; }

 private:
  Config config_;
  AuxOutputs out_;
  std::unique_ptr<BackwardPlan> backward_;
  PlanKey planned_for_;
};

}  // namespace zs
