// The ensemble heads, an auxiliary loss term: k extra C51 head sets (value stream + branches) on
// the shared trunk, trained by cross-entropy against the C51 term's projected targets; their
// gradient (heads and trunk), and the spread of Q over all heads as uncertainty.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class EnsembleTerm final : public LossTerm {
 public:
  EnsembleTerm(const StepContext& ctx, float budget);
  void enqueue(const ExecSpace& exec, const Gemm& gemm) override;
  std::pair<std::string, DeviceScalar<float>> statistic() const override { return {"spread", spread_mean_}; }
  std::vector<std::pair<std::string, Kokkos::View<const float*, MemSpace>>> sample_outputs() const override {
    return {{"spread", spread_}};
  }

  int members() const { return static_cast<int>(heads_.size()); }
  // [k, B, A, atoms]: each member's log-probabilities on s.
  Kokkos::View<const float****, Kokkos::LayoutRight, MemSpace> logp() const { return logp_; }
  // [B]: per sample, the mean over branches of the std of Q(s, a_taken) over the main head and
  // the k members; spread_mean() is its batch mean.
  Kokkos::View<const float*, MemSpace> spread() const { return spread_; }
  DeviceScalar<float> spread_mean() const { return spread_mean_; }

 private:
  const StepContext& ctx_;
  Gradients g_;
  Kokkos::View<float****, Kokkos::LayoutRight, MemSpace> logp_;
  Kokkos::View<float***, Kokkos::LayoutRight, MemSpace> d_value_;
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> d_branch_;
  std::vector<HeadActs> heads_;
  Kokkos::View<float*, MemSpace> spread_;
  DeviceScalar<float> spread_mean_;
  // The k head sets as batched launches.
  std::unique_ptr<ForwardPlan> forward_;
  std::unique_ptr<BackwardPlan> backward_;
};

}  // namespace zs
