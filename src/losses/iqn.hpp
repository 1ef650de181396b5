// The IQN head (issue 6) on the trunk output: τ ~ U(0, 1) from the counter-based RNG (counter on
// the device), φ(τ) = ReLU(W_emb·cos(π·i·τ) + b), quantiles Z(s, ·, τ) = iqn.1(ReLU(iqn.0(f ⊙ φ)))
// for every action of every branch; the quantile Huber loss against the target net's quantiles
// at C51's double-DQN action; its gradient (head and trunk) in its own buffer and that norm.
#pragma once
#include <cstdint>
#include <memory>

#include "losses/loss_term.hpp"
#include "nn/batch.hpp"
#include "kernels/dense_batch.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class IqnHead {
 public:
  IqnHead(const Config& c, const ParamLayout& layout, int batch_size);
  // online / target: the nets' activations (2B rows on all_states(), B rows on next_states());
  // c51: this step's main loss outputs (its a* is the double-DQN action).
  void enqueue(const ExecSpace& exec, const Gemm& gemm, const Network& net, const ParamBuffer& online_params,
               const ParamBuffer& target_params, const Activations& online, const Activations& target,
               const DeviceBatch& batch, const LossOutputs& c51);
  const AuxOutputs& out() const { return out_; }
  // [2·B·N]: the last step's τ (B·N online rows, sample-major, then B·N target rows).
  Kokkos::View<const float*, MemSpace> taus() const { return tau_; }
  // [B·N, A]: the online quantiles of the last step (row i·N + n).
  Kokkos::View<const float*, MemSpace> quantiles() const { return out_online_; }
  // The RNG call counter (one call per step), for checkpoints.
  DeviceScalar<std::uint64_t> counter() const { return counter_; }
  std::uint64_t seed() const { return seed_; }
  void reset_counter();

 private:
  struct Side {
    DeviceFloats phi, h, hidden, out;
  };
  // The batched launches below, for these buffers (see PlanKey).
  void plan(const Network& net, const ParamBuffer& online_params, const ParamBuffer& target_params,
            const Activations& online, const DeviceBatch& batch);

  Config config_;
  int B_, N_, E_, F_, H_, A_, layer_;
  std::uint64_t seed_;
  AuxOutputs out_;
  DeviceScalar<std::uint64_t> counter_;
  Kokkos::View<float*, MemSpace> tau_;
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> cos_;
  Side online_, target_;
  DeviceFloats out_online_;
  DeviceFloats d_out_, d_hidden_, d_h_, d_phi_;
  // Online and target sides through each layer together; the head's bias gradients (and the
  // hidden ReLU mask) in two column-sum launches; the trunk as a BackwardPlan.
  GemmBatch embed_, hidden_, quantiles_;
  kernels::BiasActLaunch<ExecSpace> hidden_bias_, quantile_bias_;
  kernels::ColumnSumLaunch<ExecSpace> head_sums_, embed_sums_;
  std::unique_ptr<BackwardPlan> trunk_;
  PlanKey planned_for_;
};

}  // namespace zs
