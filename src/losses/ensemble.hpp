// The ensemble heads (issue 6): k extra C51 head sets (value stream + branches) on the shared
// trunk, trained by cross-entropy against the main loss's projected targets; their gradient
// (heads and trunk) in its own buffer, and the spread of Q over all heads as uncertainty.
#pragma once
#include <memory>
#include <vector>

#include "losses/loss_term.hpp"
#include "nn/batch.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class EnsembleHeads {
 public:
  EnsembleHeads(const Config& c, const ParamLayout& layout, int batch_size);
  // online: the online net's activations on all_states() (2B rows; the s-half is used);
  // c51: the main loss's outputs (projected targets) of this step.
  void enqueue(const ExecSpace& exec, const Gemm& gemm, const Network& net, const ParamBuffer& params,
               const Activations& online, const DeviceBatch& batch, const LossOutputs& c51);
  const AuxOutputs& out() const { return out_; }
  int members() const { return static_cast<int>(heads_.size()); }
  // [k, B, A, atoms]: each member's log-probabilities on s.
  Kokkos::View<const float****, Kokkos::LayoutRight, MemSpace> logp() const { return logp_; }
  // [B]: per sample, the mean over branches of the std of Q(s, a_taken) over the main head and
  // the k members; spread_mean() is its batch mean.
  Kokkos::View<const float*, MemSpace> spread() const { return spread_; }
  DeviceScalar<float> spread_mean() const { return spread_mean_; }

 private:
  Config config_;
  AuxOutputs out_;
  Kokkos::View<float****, Kokkos::LayoutRight, MemSpace> logp_;
  Kokkos::View<float***, Kokkos::LayoutRight, MemSpace> d_value_;
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> d_branch_;
  std::vector<HeadActs> heads_;
  std::vector<Gradients> member_g_;  // out_.g with d_value_out / d_branch_out pointing at member e's slice
  Kokkos::View<float*, MemSpace> spread_;
  DeviceScalar<float> spread_mean_;
  // The k head sets as batched launches.
  std::unique_ptr<ForwardPlan> forward_;
  std::unique_ptr<BackwardPlan> backward_;
  PlanKey planned_for_;
};

}  // namespace zs
