#include "iqn.hpp"

#include "kernels/dense.hpp"
#include "kernels/grad_norm.hpp"
#include "kernels/iqn.hpp"

namespace zs {

namespace {
ConstMatrixView as_const(const MatrixView& m) { return ConstMatrixView(m.data(), m.extent(0), m.extent(1)); }
kernels::ConstVec<ExecSpace> as_const(const ParamBuffer::Vector& v) {
  return kernels::ConstVec<ExecSpace>(v.data(), v.extent(0));
}
// Fixed per run; mixed into the seed so τ never correlates with parameter init or acting.
constexpr std::uint64_t kIqnSeedSalt = 0x1a0c0ffee1a0ull;
}  // namespace

IqnHead::IqnHead(const Config& c, const ParamLayout& layout, int B)
    : config_(c),
      B_(B),
      N_(c.iqn.n_tau),
      E_(c.iqn.embed_dim),
      F_(c.trunk.back()),
      H_(c.head_hidden),
      A_(c.total_actions()),
      layer_(layout.iqn_layer()),
      seed_(c.seed ^ kIqnSeedSalt),
      out_(c, layout, B, "iqn"),
      counter_("zs::iqn::counter"),
      tau_("zs::iqn::tau", 2 * std::size_t(B) * c.iqn.n_tau),
      cos_("zs::iqn::cos", 2 * std::size_t(B) * c.iqn.n_tau, c.iqn.embed_dim) {
  require(layer_ >= 0, "IqnHead: the layout has no IQN layers; expected a config with iqn on");
  const std::size_t R = std::size_t(B) * N_;
  for (Side* s : {&online_, &target_}) {
    s->phi = DeviceFloats("zs::iqn::phi", R * F_);
    s->h = DeviceFloats("zs::iqn::h", R * F_);
    s->hidden = DeviceFloats("zs::iqn::hidden", R * H_);
    s->out = DeviceFloats("zs::iqn::out", R * A_);
  }
  out_online_ = online_.out;
  d_out_ = DeviceFloats("zs::iqn::d_out", R * A_);
  d_hidden_ = DeviceFloats("zs::iqn::d_hidden", R * H_);
  d_h_ = DeviceFloats("zs::iqn::d_h", R * F_);
  d_phi_ = DeviceFloats("zs::iqn::d_phi", R * F_);
}

void IqnHead::reset_counter() { Kokkos::deep_copy(counter_, std::uint64_t(0)); }

void IqnHead::forward_side(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& p,
                           const ConstMatrixView& cosines, const ConstMatrixView& features, Side& s) const {
  const int R = B_ * N_;
  const MatrixView phi = as_matrix(s.phi, R, F_), h = as_matrix(s.h, R, F_);
  gemm(Trans::N, Trans::T, 1.f, cosines, as_const(p.weight(layer_)), 0.f, phi);
  kernels::iqn_modulate<ExecSpace>(exec, {phi, h, features, as_const(p.bias(layer_)), N_});
  const MatrixView hidden = as_matrix(s.hidden, R, H_), out = as_matrix(s.out, R, A_);
  gemm(Trans::N, Trans::T, 1.f, as_const(h), as_const(p.weight(layer_ + 1)), 0.f, hidden);
  kernels::bias_act<ExecSpace>(exec, hidden, as_const(p.bias(layer_ + 1)), true);
  gemm(Trans::N, Trans::T, 1.f, as_const(hidden), as_const(p.weight(layer_ + 2)), 0.f, out);
  kernels::bias_act<ExecSpace>(exec, out, as_const(p.bias(layer_ + 2)), false);
}

void IqnHead::enqueue(const ExecSpace& exec, const Gemm& gemm, const Network& net, const ParamBuffer& online_params,
                      const ParamBuffer& target_params, const Activations& online, const Activations& target,
                      const DeviceBatch& batch, const LossOutputs& c51) {
  const Config& c = config_;
  const int R = B_ * N_, T = static_cast<int>(c.trunk.size());
  require(batch.size == B_, "IqnHead: batch of ", batch.size, "; this head was built for ", B_);
  kernels::iqn_sample(exec, counter_, tau_, cos_, seed_, R);
  const ConstMatrixView cos_online(cos_.data(), R, E_), cos_target(cos_.data() + std::size_t(R) * E_, R, E_);
  const ConstMatrixView features(online.trunk[T - 1].data(), B_, F_);
  const ConstMatrixView next_features(target.trunk[T - 1].data(), B_, F_);
  forward_side(exec, gemm, online_params, cos_online, features, online_);
  forward_side(exec, gemm, target_params, cos_target, next_features, target_);

  kernels::IqnLoss<ExecSpace> f;
  f.quantiles = ConstMatrixView(online_.out.data(), R, A_);
  f.target_quantiles = ConstMatrixView(target_.out.data(), R, A_);
  f.tau = tau_;
  f.actions = batch.actions;
  f.best = c51.best;
  f.rewards = batch.rewards;
  f.dones = batch.dones;
  f.weights = batch.weights;
  const MatrixView d_out = as_matrix(d_out_, R, A_);
  f.d_quantiles = d_out;
  f.cum = net.table().cum;
  f.gamma_n = static_cast<float>(std::pow(double(c.gamma), c.n_step));
  f.kappa = c.iqn.kappa;
  f.n_tau = N_;
  f.n_tau_target = N_;
  kernels::iqn_loss(exec, f, out_.loss);

  // Backward: iqn.1, iqn.0, the modulation, iqn.embed; then the trunk from ∂loss/∂features.
  const ParamBuffer& g = out_.grad;
  const ParamBuffer& p = online_params;
  const ConstMatrixView hidden(online_.hidden.data(), R, H_), h(online_.h.data(), R, F_), phi(online_.phi.data(), R, F_);
  gemm(Trans::T, Trans::N, 1.f, as_const(d_out), hidden, 0.f, g.weight(layer_ + 2));
  kernels::column_sum<ExecSpace>(exec, as_const(d_out), g.bias(layer_ + 2));
  const MatrixView dh = as_matrix(d_hidden_, R, H_);
  gemm(Trans::N, Trans::N, 1.f, as_const(d_out), as_const(p.weight(layer_ + 2)), 0.f, dh);
  kernels::relu_backward<ExecSpace>(exec, dh, hidden);
  gemm(Trans::T, Trans::N, 1.f, as_const(dh), h, 0.f, g.weight(layer_ + 1));
  kernels::column_sum<ExecSpace>(exec, as_const(dh), g.bias(layer_ + 1));
  const MatrixView d_h = as_matrix(d_h_, R, F_), d_phi = as_matrix(d_phi_, R, F_);
  gemm(Trans::N, Trans::N, 1.f, as_const(dh), as_const(p.weight(layer_ + 1)), 0.f, d_h);
  kernels::iqn_modulate_backward<ExecSpace>(
      exec, {as_const(d_h), phi, features, d_phi, as_matrix(out_.g.d_trunk[T - 1], B_, F_), N_});
  gemm(Trans::T, Trans::N, 1.f, as_const(d_phi), cos_online, 0.f, g.weight(layer_));
  kernels::column_sum<ExecSpace>(exec, as_const(d_phi), g.bias(layer_));
  net.backward_trunk(exec, gemm, p, batch.states(), online, out_.g, g);
  kernels::global_grad_norm(exec, ConstDeviceFloats(g.flat()), out_.norm);
}

}  // namespace zs
