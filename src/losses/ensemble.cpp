#include "losses/ensemble.hpp"

#include <cstddef>
#include <utility>

#include "kernels/ensemble_loss.hpp"

namespace zs {

EnsembleHeads::EnsembleHeads(const Config& c, const ParamLayout& layout, int B)
    : config_(c),
      out_(c, layout, B, "ensemble"),
      logp_("zs::ensemble::logp", c.ensemble.k, B, c.total_actions(), c.atoms),
      d_value_("zs::ensemble::d_value", c.ensemble.k, B, c.atoms),
      d_branch_("zs::ensemble::d_branch_out", c.ensemble.k, std::size_t(B) * c.total_actions() * c.atoms),
      spread_("zs::ensemble::spread", B),
      spread_mean_("zs::ensemble::spread_mean") {
  require(c.ensemble.k >= 1, "EnsembleHeads: k = ", c.ensemble.k, "; expected at least 1");
  const std::size_t A = c.total_actions(), J = c.atoms;
  for (int e = 0; e < c.ensemble.k; ++e) {
    heads_.emplace_back(c, B, LogProbs(logp_.data() + std::size_t(e) * B * A * J, B, A, J));
    Gradients m = out_.g;
    m.d_value_out = DeviceFloats(d_value_.data() + std::size_t(e) * B * J, std::size_t(B) * J);
    m.d_branch_out = DeviceFloats(d_branch_.data() + std::size_t(e) * B * A * J, std::size_t(B) * A * J);
    member_g_.push_back(m);
  }
}

void EnsembleHeads::enqueue(const ExecSpace& exec, const Gemm& gemm, const Network& net, const ParamBuffer& params,
                            const Activations& online, const DeviceBatch& batch, const LossOutputs& c51) {
  const Config& c = config_;
  const int B = batch.size, F = c.trunk.back(), T = static_cast<int>(c.trunk.size());
  const ConstMatrixView features(online.trunk[T - 1].data(), B, F);
  if (planned_for_.changed({&params, &online, &batch})) {
    std::vector<std::pair<HeadSet, HeadActs>> sets;
    std::vector<HeadSetGrads> grads;
    for (int e = 0; e < members(); ++e) {
      sets.emplace_back(net.ensemble_heads(e), heads_[e]);
      grads.push_back({net.ensemble_heads(e), heads_[e], member_g_[e].d_value_out.data(), member_g_[e].d_branch_out.data()});
    }
    forward_ = std::make_unique<ForwardPlan>(net, params, features, sets);
    backward_ = std::make_unique<BackwardPlan>(net, params, batch.states(), online, grads, out_.g, out_.grad);
  }
  forward_->enqueue(exec, gemm);
  kernels::EnsembleLoss<ExecSpace> f;
  f.logp = logp_;
  f.projected = c51.projected;
  f.actions = batch.actions;
  f.weights = batch.weights;
  f.d_value = d_value_;
  f.d_branch_out = d_branch_;
  f.table = net.table();
  kernels::ensemble_loss(exec, f, out_.loss);
  kernels::EnsembleSpread<ExecSpace> s;
  s.main_logp = online.logp;
  s.logp = logp_;
  s.actions = batch.actions;
  s.spread = spread_;
  s.table = net.table();
  s.v_min = c.v_min;
  s.delta = (c.v_max - c.v_min) / static_cast<float>(c.atoms - 1);
  kernels::ensemble_spread(exec, s, spread_mean_);
  backward_->enqueue(exec, gemm);
}

}  // namespace zs
