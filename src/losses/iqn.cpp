#include "losses/iqn.hpp"

#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "kernels/dense.hpp"
#include "kernels/iqn_quantiles.hpp"

namespace zs {

namespace {
ConstMatrixView as_const(const MatrixView& m) { return ConstMatrixView(m.data(), m.extent(0), m.extent(1)); }
kernels::ConstVec<ExecSpace> as_const(const ParamBuffer::Vector& v) {
  return kernels::ConstVec<ExecSpace>(v.data(), v.extent(0));
}
// Fixed per run; mixed into the seed so τ never correlates with parameter init or acting.
constexpr std::uint64_t kIqnSeedSalt = 0x1a0c0ffee1a0ull;
constexpr const char* kCounterTensor = "iqn.counter";
}  // namespace

IqnTerm::IqnTerm(const StepContext& ctx, float budget)
    : LossTerm("iqn", budget, ctx),
      ctx_(ctx),
      B_(ctx.batch.size),
      N_(ctx.config.iqn.n_tau),
      E_(ctx.config.iqn.embed_dim),
      F_(ctx.config.trunk.back()),
      H_(ctx.config.head_hidden),
      A_(ctx.config.total_actions()),
      layer_(ctx.layout.layer_index("iqn.embed")),
      seed_(ctx.config.seed ^ kIqnSeedSalt),
      g_(ctx.config, ctx.batch.size),
      counter_("zs::iqn::counter"),
      tau_("zs::iqn::tau", 2 * std::size_t(B_) * N_),
      cos_("zs::iqn::cos", 2 * std::size_t(B_) * N_, E_) {
  const std::size_t R = std::size_t(B_) * N_;
  for (Side* s : {&online_, &target_}) {
    s->phi = DeviceFloats("zs::iqn::phi", R * F_);
    s->h = DeviceFloats("zs::iqn::h", R * F_);
    s->hidden = DeviceFloats("zs::iqn::hidden", R * H_);
    s->out = DeviceFloats("zs::iqn::out", R * A_);
  }
  d_out_ = DeviceFloats("zs::iqn::d_out", R * A_);
  d_hidden_ = DeviceFloats("zs::iqn::d_hidden", R * H_);
  d_h_ = DeviceFloats("zs::iqn::d_h", R * F_);
  d_phi_ = DeviceFloats("zs::iqn::d_phi", R * F_);

  const int r = static_cast<int>(R);
  const ParamBuffer &on = ctx.online, &tg = ctx.target;
  const float* cos_online = cos_.data();
  const float* cos_target = cos_.data() + R * E_;
  embed_ = GemmBatch(Trans::N, Trans::T, r, F_, E_, 1.f, 0.f,
                     {{cos_online, on.weight(layer_).data(), online_.phi.data()},
                      {cos_target, tg.weight(layer_).data(), target_.phi.data()}});
  hidden_ = GemmBatch(Trans::N, Trans::T, r, H_, F_, 1.f, 0.f,
                      {{online_.h.data(), on.weight(layer_ + 1).data(), online_.hidden.data()},
                       {target_.h.data(), tg.weight(layer_ + 1).data(), target_.hidden.data()}});
  hidden_bias_ = kernels::BiasActLaunch<ExecSpace>({{online_.hidden.data(), on.bias(layer_ + 1).data(), H_, 1},
                                                    {target_.hidden.data(), tg.bias(layer_ + 1).data(), H_, 1}},
                                                   r);
  quantiles_ = GemmBatch(Trans::N, Trans::T, r, A_, H_, 1.f, 0.f,
                         {{online_.hidden.data(), on.weight(layer_ + 2).data(), online_.out.data()},
                          {target_.hidden.data(), tg.weight(layer_ + 2).data(), target_.out.data()}});
  quantile_bias_ = kernels::BiasActLaunch<ExecSpace>({{online_.out.data(), on.bias(layer_ + 2).data(), A_, 0},
                                                      {target_.out.data(), tg.bias(layer_ + 2).data(), A_, 0}},
                                                     r);
  const ParamBuffer& g = grad();
  head_sums_ = kernels::ColumnSumLaunch<ExecSpace>(
      {{d_out_.data(), 0, 1, nullptr, nullptr, g.bias(layer_ + 2).data(), A_},
       {d_hidden_.data(), 0, 1, online_.hidden.data(), d_hidden_.data(), g.bias(layer_ + 1).data(), H_}},
      r);
  embed_sums_ = kernels::ColumnSumLaunch<ExecSpace>({{d_phi_.data(), 0, 1, nullptr, nullptr, g.bias(layer_).data(), F_}}, r);
  trunk_ = std::make_unique<BackwardPlan>(ctx.net, on, ctx.batch.states(), ctx.online_acts,
                                          std::vector<HeadSetGrads>{}, g_, g);
}

void IqnTerm::reset() { Kokkos::deep_copy(counter_, std::uint64_t(0)); }

void IqnTerm::save_state(safetensors::File& f) const {
  std::uint64_t c = 0;
  Kokkos::deep_copy(c, counter_);
  f.tensors[kCounterTensor] = safetensors::Tensor::from<std::int64_t>({1}, {static_cast<std::int64_t>(c)});
}

void IqnTerm::check_state(const safetensors::File& f) const { f.i64(kCounterTensor, {1}); }

void IqnTerm::load_state(const safetensors::File& f) {
  Kokkos::deep_copy(counter_, static_cast<std::uint64_t>(f.i64(kCounterTensor, {1})[0]));
}

void IqnTerm::enqueue(const ExecSpace& exec, const Gemm& gemm) {
  if (riding_) return;
  enqueue_forward(exec, gemm);
  enqueue_loss(exec);
  enqueue_backward(exec, gemm);
  trunk_->enqueue(exec, gemm, ctx_.side);
  if (ctx_.side) ctx_.side->join();
}

std::optional<FusedRider> IqnTerm::ride_fused(const FusedOptions& options, const Gemm& gemm) {
  const bool forward = options.riders_forward && !options.cluster_forward && options.row_block_forward == 0;
  FusedRider r;
  if (!forward)
    r.ahead = [this, &gemm](const ExecSpace& main, const SideLane* side) {
      if (side != nullptr)
        enqueue_forward(side->exec(), side->gemm());
      else
        enqueue_forward(main, gemm);
    };
  r.loss = [this](const ExecSpace& exec) { enqueue_loss(exec); };
  RideShape shape;
  shape.forward = forward;
  shape.weight_grads_last = options.rider_weight_grads_last >= 1;
  shape.modulation_in_product = options.rider_modulation_in_product && options.tile_rows % N_ == 0;
  r.products = [this, shape](FusedBuilder& b, FusedPhase phase, int norm) { add_products(b, phase, shape, norm); };
  r.accepted = [this] { riding_ = true; };
  r.g = &g_;
  r.grad = &grad();
  r.features_given = true;
  return r;
}

void IqnTerm::enqueue_sample(const ExecSpace& exec) {
  // The loss, which every step runs after the draws, advances the counter.
  kernels::iqn_sample(exec, counter_, tau_, cos_, seed_, B_ * N_, static_cast<std::uint64_t>(ctx_.first_sample) * N_,
                      false);
}

void IqnTerm::enqueue_modulate(const ExecSpace& exec) {
  const int R = B_ * N_, T = static_cast<int>(ctx_.config.trunk.size());
  const ConstMatrixView features(ctx_.online_acts.trunk[T - 1].data(), B_, F_);
  const ConstMatrixView next_features(ctx_.target_acts.trunk[T - 1].data(), B_, F_);
  auto of = [&](Side& side, const ConstMatrixView& f, const ParamBuffer& p) {
    return kernels::IqnModulate<ExecSpace>{as_matrix(side.phi, R, F_), as_matrix(side.h, R, F_), f,
                                           as_const(p.bias(layer_)), N_};
  };
  kernels::iqn_modulate<ExecSpace>(exec, of(online_, features, ctx_.online), of(target_, next_features, ctx_.target));
}

void IqnTerm::enqueue_forward(const ExecSpace& exec, const Gemm& gemm) {
  enqueue_sample(exec);
  gemm(embed_);
  enqueue_modulate(exec);
  gemm(hidden_);
  hidden_bias_(exec);
  gemm(quantiles_);
  quantile_bias_(exec);
}

void IqnTerm::enqueue_loss(const ExecSpace& exec) {
  const Config& c = ctx_.config;
  const DeviceBatch& batch = ctx_.batch;
  const int R = B_ * N_;
  kernels::IqnLoss<ExecSpace> f;
  f.quantiles = ConstMatrixView(online_.out.data(), R, A_);
  f.target_quantiles = ConstMatrixView(target_.out.data(), R, A_);
  f.tau = tau_;
  f.actions = batch.actions;
  f.best = ctx_.c51.best;
  f.rewards = batch.rewards;
  f.dones = batch.dones;
  f.weights = batch.weights;
  f.d_quantiles = as_matrix(d_out_, R, A_);
  f.table = ctx_.net.table();
  f.gamma_n = static_cast<float>(std::pow(double(c.gamma), c.n_step));
  f.kappa = c.iqn.kappa;
  f.n_tau = N_;
  f.n_tau_target = N_;
  f.advance = counter_;
  kernels::iqn_loss(exec, f, loss());
}

void IqnTerm::enqueue_backward(const ExecSpace& exec, const Gemm& gemm) {
  // iqn.1, iqn.0, the modulation, iqn.embed (the trunk from ∂loss/∂features is the caller's). The
  // weight gradients go to the side lane, if there is one, each forked after what it reads.
  const int R = B_ * N_;
  const ParamBuffer& g = grad();
  const ParamBuffer& p = ctx_.online;
  const SideLane* side = ctx_.side;
  auto weight_grad = [&](const ConstMatrixView& dy, const ConstMatrixView& x, const MatrixView& dw) {
    if (side) side->fork();
    (side ? side->gemm() : gemm)(Trans::T, Trans::N, 1.f, dy, x, 0.f, dw);
  };
  const MatrixView d_out = as_matrix(d_out_, R, A_);
  const ConstMatrixView hidden(online_.hidden.data(), R, H_), h(online_.h.data(), R, F_);
  weight_grad(as_const(d_out), hidden, g.weight(layer_ + 2));
  const MatrixView dh = as_matrix(d_hidden_, R, H_);
  gemm(Trans::N, Trans::N, 1.f, as_const(d_out), as_const(p.weight(layer_ + 2)), 0.f, dh);
  head_sums_(exec);  // iqn.1's bias; dh through the ReLU mask and iqn.0's bias
  weight_grad(as_const(dh), h, g.weight(layer_ + 1));
  gemm(Trans::N, Trans::N, 1.f, as_const(dh), as_const(p.weight(layer_ + 1)), 0.f, as_matrix(d_h_, R, F_));
  enqueue_modulate_backward(exec, false);
  weight_grad(ConstMatrixView(d_phi_.data(), R, F_), ConstMatrixView(cos_.data(), R, E_), g.weight(layer_));
  embed_sums_(exec);
}

void IqnTerm::enqueue_modulate_backward(const ExecSpace& exec, bool through_relu) {
  const int R = B_ * N_, T = static_cast<int>(ctx_.config.trunk.size());
  const ConstMatrixView features(ctx_.online_acts.trunk[T - 1].data(), B_, F_);
  const ConstMatrixView d_h(d_h_.data(), R, F_), phi(online_.phi.data(), R, F_);
  kernels::iqn_modulate_backward<ExecSpace>(
      exec, {d_h, phi, features, as_matrix(d_phi_, R, F_), as_matrix(g_.d_trunk[T - 1], B_, F_), N_,
             through_relu ? 1 : 0});
}

namespace {
// The weight gradients reduce over B·N rows (2,048 at B = 256): split into runs of this many k
// chunks, their tiles are chains as short as the backward's others.
constexpr int kWeightGradSplitChunks = 8;
}  // namespace

void IqnTerm::weight_grad(FusedBuilder& b, int l, int norm) {
  // Layer layer_ + l's dW = ∂loss/∂(its output)ᵀ · its input, with its bias's gradient, over the
  // B·N rows.
  const std::size_t R = std::size_t(B_) * N_;
  struct Of {
    const float* dy;
    int out;
    const float* x;
    int in;
  };
  const Of of[3] = {{d_phi_.data(), F_, cos_.data(), E_},
                    {d_hidden_.data(), H_, online_.h.data(), F_},
                    {d_out_.data(), A_, online_.hidden.data(), H_}};
  const Of& o = of[l];
  const ParamBuffer& g = grad();
  kernels::ProductJob dw;
  dw.m = o.out;
  dw.n = o.in;
  dw.out = g.weight(layer_ + l).data();
  dw.out_ld = o.in;
  dw.row_sums = g.bias(layer_ + l).data();
  b.product(dw, {{columns_of(o.dy, o.out), columns_of(o.x, o.in), static_cast<int>(R)}}, norm, kWeightGradSplitChunks);
}

void IqnTerm::add_products(FusedBuilder& b, FusedPhase phase, const RideShape& shape, int norm) {
  const bool forward = shape.forward, weight_grads_last = shape.weight_grads_last;
  const int R = B_ * N_, here = b.phases() - 1;
  const ParamBuffer& on = ctx_.online;
  using kernels::ProductJob;
  auto job = [](int m, int n, float* out, int ld) {
    ProductJob j;
    j.m = m;
    j.n = n;
    j.out = out;
    j.out_ld = ld;
    return j;
  };
  // Each side's layer: its input rows, its parameters, its output.
  struct SideOf {
    Side* side;
    const ParamBuffer* params;
    const float* cos;
  };
  const SideOf sides[2] = {{&online_, &ctx_.online, cos_.data()},
                           {&target_, &ctx_.target, cos_.data() + static_cast<std::size_t>(R) * E_}};
  switch (phase) {
    case FusedPhase::trunk_last:
      // φ before its bias, as the launch plans' product leaves it for the modulation. Its tiles
      // (short: k is the embedding's 64) fill the slots that the trunk layer's few long tiles
      // leave free.
      if (!forward) return;
      b.launch_before(here, [this](const ExecSpace& exec) { enqueue_sample(exec); });
      for (const SideOf& x : sides)
        b.product(job(R, F_, x.side->phi.data(), F_), {{rows_of(x.cos, E_), rows_of(x.params->weight(layer_).data(), E_), E_}});
      return;
    case FusedPhase::heads_hidden:
      if (!forward) return;
      // The modulation reads the trunk's features, which the phase before wrote.
      b.launch_before(here, [this](const ExecSpace& exec) { enqueue_modulate(exec); });
      for (const SideOf& x : sides) {
        ProductJob j = job(R, H_, x.side->hidden.data(), H_);
        j.bias = x.params->bias(layer_ + 1).data();
        j.relu = 1;
        b.product(j, {{rows_of(x.side->h.data(), F_), rows_of(x.params->weight(layer_ + 1).data(), F_), F_}});
      }
      return;
    case FusedPhase::heads_out:
      if (!forward) return;
      for (const SideOf& x : sides) {
        ProductJob j = job(R, A_, x.side->out.data(), A_);
        j.bias = x.params->bias(layer_ + 2).data();
        b.product(j, {{rows_of(x.side->hidden.data(), H_), rows_of(x.params->weight(layer_ + 2).data(), H_), H_}});
      }
      return;
    case FusedPhase::backward_out: {
      // iqn.1: dW = d_outᵀ·hidden with its bias's gradient; ∂loss/∂hidden = d_out·W through the ReLU.
      if (!weight_grads_last) weight_grad(b, 2, norm);
      ProductJob dx = job(R, H_, d_hidden_.data(), H_);
      dx.mask = online_.hidden.data();
      dx.mask_ld = H_;
      b.product(dx, {{rows_of(d_out_.data(), A_), columns_of(on.weight(layer_ + 2).data(), H_), A_}});
      return;
    }
    case FusedPhase::backward_hidden: {
      if (!weight_grads_last) weight_grad(b, 1, norm);
      ProductJob dh = job(R, F_, d_h_.data(), F_);
      if (shape.modulation_in_product) {
        // ∂φ and ∂features (through the trunk's last ReLU) straight from the tiles; ∂h itself is
        // never stored.
        const int T = static_cast<int>(ctx_.config.trunk.size());
        dh.out = d_phi_.data();
        dh.mask = online_.phi.data();
        dh.mask_ld = F_;
        dh.scale = ctx_.online_acts.trunk[T - 1].data();
        dh.scale_ld = F_;
        dh.group = N_;
        dh.group_sums = g_.d_trunk[T - 1].data();
        dh.group_sums_ld = F_;
        dh.group_relu = 1;
      }
      b.product(dh, {{rows_of(d_hidden_.data(), H_), columns_of(on.weight(layer_ + 1).data(), F_), H_}});
      return;
    }
    case FusedPhase::backward_trunk:
      // The features' gradient, which this phase's trunk products read, and ∂loss/∂φ first.
      if (!shape.modulation_in_product)
        b.launch_before(here, [this](const ExecSpace& exec) { enqueue_modulate_backward(exec, true); });
      if (!weight_grads_last) weight_grad(b, 0, norm);
      return;
    case FusedPhase::backward_last:
      if (weight_grads_last)
        for (int l = 2; l >= 0; --l) weight_grad(b, l, norm);
      return;
  }
}

}  // namespace zs
