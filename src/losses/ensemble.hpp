// The ensemble heads, an auxiliary loss term: k extra C51 head sets (value stream + branches) on
// the shared trunk, trained by cross-entropy against the C51 term's projected targets; their
// gradient (heads and trunk), and the spread of Q over all heads as uncertainty.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/c51_head.hpp"
#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class EnsembleTerm final : public LossTerm {
 public:
  EnsembleTerm(const StepContext& ctx, float budget);
  void enqueue(const ExecSpace& exec, const Gemm& gemm) override;
  // The trunk and its members' head sets (consecutive in the layout).
  std::vector<std::pair<std::size_t, std::size_t>> gradient_spans() const override;
  // Its members are head sets on the online net's features of s: where the fused kernel's forward
  // is phases, it carries their forward and the backward; the term then runs their dueling head,
  // its loss and the spread between the kernel's loss phase and its backward.
  std::optional<FusedRider> ride_fused(const FusedOptions& options, const Gemm& gemm) override;
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
  // The loss and its gradient, then (spread) the spread, which only the metrics record reads.
  void enqueue_loss(const ExecSpace& exec, bool spread = true);
  void enqueue_spread(const ExecSpace& exec);

  const StepContext& ctx_;
  Gradients g_;
  std::vector<HeadSetGrads> grads_;  // each member's head set, activations and output gradients
  kernels::DuelingLaunch<ExecSpace> dueling_;  // riding: the members' dueling head (and output biases)
  bool riding_ = false;
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
