// The IQN head on the trunk output, an auxiliary loss term: τ ~ U(0, 1) from the counter-based RNG
// (counter on the device), φ(τ) = ReLU(W_emb·cos(π·i·τ) + b), quantiles
// Z(s, ·, τ) = iqn.1(ReLU(iqn.0(f ⊙ φ))) for every action of every branch; the quantile Huber loss
// against the target net's quantiles at C51's double-DQN action; its gradient (head and trunk).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/dense_batch.hpp"
#include "losses/loss_term.hpp"
#include "nn/network_plan.hpp"

namespace zs {

class IqnTerm final : public LossTerm {
 public:
  IqnTerm(const StepContext& ctx, float budget);
  void enqueue(const ExecSpace& exec, const Gemm& gemm) override;
  // The trunk and its own three layers.
  std::vector<std::pair<std::size_t, std::size_t>> gradient_spans() const override {
    return {ctx_.layout.layers_span(0, ctx_.layout.trunk_layers() - 1), ctx_.layout.layers_span(layer_, layer_ + 2)};
  }
  // Its gradient reaches the trunk through the features: the fused kernel carries the trunk's
  // backward, and its own layers as products of the kernel's phases (the forward's where the
  // forward is phases, else in the riders' launch), each side's two layers beside the heads'.
  std::optional<FusedRider> ride_fused(const FusedOptions& options, const Gemm& gemm) override;
  void save_state(safetensors::File& f) const override;
  void check_state(const safetensors::File& f) const override;
  void load_state(const safetensors::File& f) override;
  void reset() override;

  // [2·B·N]: the last step's τ (B·N online rows, sample-major, then B·N target rows).
  Kokkos::View<const float*, MemSpace> taus() const { return tau_; }
  // [B·N, A]: the online quantiles of the last step (row i·N + n).
  Kokkos::View<const float*, MemSpace> quantiles() const { return online_.out; }
  // The RNG call counter (one call per step), for checkpoints.
  DeviceScalar<std::uint64_t> counter() const { return counter_; }
  std::uint64_t seed() const { return seed_; }

 private:
  // τ and the quantile network on both sides (what reads only the trunk's features).
  void enqueue_forward(const ExecSpace& exec, const Gemm& gemm);
  // τ with its cosine features, and the modulation h = f ⊙ ReLU(φ + b) of both sides.
  void enqueue_sample(const ExecSpace& exec);
  void enqueue_modulate(const ExecSpace& exec);
  // The quantile Huber loss and ∂loss/∂(the online quantiles).
  void enqueue_loss(const ExecSpace& exec);
  // The backward from ∂loss/∂quantiles down to ∂loss/∂features, the weight gradients forked onto
  // the side lane (not joined).
  void enqueue_backward(const ExecSpace& exec, const Gemm& gemm);
  // The modulation's backward: ∂loss/∂φ and ∂loss/∂features (through the trunk's last ReLU when
  // through_relu: FusedRider::features_given).
  void enqueue_modulate_backward(const ExecSpace& exec, bool through_relu);
  // FusedRider::products: the term's layers in the fused kernel's phases (the forward's only when
  // `forward`), its weight gradients counted in `norm`.
  // (weight_grads_last: its weight gradients in the backward's last phase,
  // FusedOptions::rider_weight_grads_last; modulation_in_product: the modulation's backward in
  // the ∂h product's epilogue, FusedOptions::rider_modulation_in_product where n_tau divides the
  // tiles' rows.)
  struct RideShape {
    bool forward = true, weight_grads_last = false, modulation_in_product = false;
  };
  void add_products(FusedBuilder& b, FusedPhase phase, const RideShape& shape, int norm);
  // Its layer layer_ + l's weight and bias gradients as a product (split over the B·N rows).
  void weight_grad(FusedBuilder& b, int l, int norm);

  struct Side {
    DeviceFloats phi, h, hidden, out;
  };

  const StepContext& ctx_;
  int B_, N_, E_, F_, H_, A_, layer_;
  std::uint64_t seed_;
  Gradients g_;
  DeviceScalar<std::uint64_t> counter_;
  Kokkos::View<float*, MemSpace> tau_;
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> cos_;
  Side online_, target_;
  DeviceFloats d_out_, d_hidden_, d_h_, d_phi_;
  // Online and target sides through each layer together; the head's bias gradients (and the
  // hidden ReLU mask) in two column-sum launches; the trunk as a BackwardPlan.
  GemmBatch embed_, hidden_, quantiles_;
  kernels::BiasActLaunch<ExecSpace> hidden_bias_, quantile_bias_;
  kernels::ColumnSumLaunch<ExecSpace> head_sums_, embed_sums_;
  std::unique_ptr<BackwardPlan> trunk_;
  bool riding_ = false;  // ride_fused() was taken: the fused kernel runs the trunk's backward
};

}  // namespace zs
