#include "losses/ensemble.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "kernels/ensemble_loss.hpp"

namespace zs {

EnsembleTerm::EnsembleTerm(const StepContext& ctx, float budget)
    : LossTerm("ensemble", budget, ctx),
      ctx_(ctx),
      g_(ctx.config, ctx.batch.size),
      logp_("zs::ensemble::logp", ctx.config.ensemble.k, ctx.batch.size, ctx.config.total_actions(), ctx.config.atoms),
      d_value_("zs::ensemble::d_value", ctx.config.ensemble.k, ctx.batch.size, ctx.config.atoms),
      d_branch_("zs::ensemble::d_branch_out", ctx.config.ensemble.k,
                std::size_t(ctx.batch.size) * ctx.config.total_actions() * ctx.config.atoms),
      spread_("zs::ensemble::spread", ctx.batch.size),
      spread_mean_("zs::ensemble::spread_mean") {
  const Config& c = ctx.config;
  const int B = ctx.batch.size, F = c.trunk.back(), T = static_cast<int>(c.trunk.size());
  require(c.ensemble.k >= 1, "ensemble: k = ", c.ensemble.k, "; expected at least 1");
  const std::size_t A = c.total_actions(), J = c.atoms;
  std::vector<std::pair<HeadSet, HeadActs>> sets;
  for (int e = 0; e < c.ensemble.k; ++e) {
    heads_.emplace_back(c, B, LogProbs(logp_.data() + std::size_t(e) * B * A * J, B, A, J));
    const std::string m = "ensemble." + std::to_string(e);
    const HeadSet set{ctx.layout.layer_index(m + ".value.0"), ctx.layout.layer_index(m + ".branch.0.0")};
    sets.emplace_back(set, heads_[e]);
    grads_.push_back({set, heads_[e], d_value_.data() + std::size_t(e) * B * J, d_branch_.data() + std::size_t(e) * B * A * J});
  }
  const ConstMatrixView features(ctx.online_acts.trunk[T - 1].data(), B, F);
  forward_ = std::make_unique<ForwardPlan>(ctx.net, ctx.online, features, sets);
  backward_ = std::make_unique<BackwardPlan>(ctx.net, ctx.online, ctx.batch.states(), ctx.online_acts, grads_, g_, grad(),
                                             BackwardShape{ctx.stacked_heads});
}

std::vector<std::pair<std::size_t, std::size_t>> EnsembleTerm::gradient_spans() const {
  const ParamLayout& l = ctx_.layout;
  const int first = grads_.front().set.value0, last = grads_.back().set.hidden_layer(l.branch_count()) + 1;
  return {l.layers_span(0, l.trunk_layers() - 1), l.layers_span(first, last)};
}

void EnsembleTerm::enqueue(const ExecSpace& exec, const Gemm& gemm) {
  if (riding_) return;
  forward_->enqueue(exec, gemm, ctx_.side);
  enqueue_loss(exec);
  backward_->enqueue(exec, gemm, ctx_.side);
}

std::optional<FusedRider> EnsembleTerm::ride_fused(const FusedOptions& options, const Gemm&) {
  if (options.cluster_forward || options.row_block_forward != 0) return std::nullopt;
  // The dueling head ForwardPlan would run after the members' output layers, which the kernel
  // writes without their biases.
  std::vector<DuelingRows> members;
  for (const HeadSetGrads& m : grads_) members.push_back({&ctx_.online, m.set, &m.acts, 0, m.acts.rows});
  dueling_ = dueling_launch(ctx_.net, members);
  FusedRider r;
  r.loss = [this](const ExecSpace& exec) {
    dueling_(exec);
    enqueue_loss(exec, false);
  };
  r.monitor = [this](const ExecSpace& exec) { enqueue_spread(exec); };
  r.accepted = [this] { riding_ = true; };
  r.g = &g_;
  r.grad = &grad();
  r.head_sets = grads_;
  return r;
}

void EnsembleTerm::enqueue_loss(const ExecSpace& exec, bool spread) {
  kernels::EnsembleLoss<ExecSpace> f;
  f.logp = logp_;
  f.projected = ctx_.c51.projected;
  f.actions = ctx_.batch.actions;
  f.weights = ctx_.batch.weights;
  f.d_value = d_value_;
  f.d_branch_out = d_branch_;
  f.table = ctx_.net.table();
  kernels::ensemble_loss(exec, f, loss());
  if (spread) enqueue_spread(exec);
}

void EnsembleTerm::enqueue_spread(const ExecSpace& exec) {
  const Config& c = ctx_.config;
  kernels::EnsembleSpread<ExecSpace> s;
  s.main_logp = ctx_.online_acts.logp;
  s.logp = logp_;
  s.actions = ctx_.batch.actions;
  s.spread = spread_;
  s.table = ctx_.net.table();
  s.v_min = c.v_min;
  s.delta = (c.v_max - c.v_min) / static_cast<float>(c.atoms - 1);
  kernels::ensemble_spread(exec, s, spread_mean_);
}

}  // namespace zs
