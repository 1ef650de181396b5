#include "trainer.hpp"

#include <cmath>
#include <random>

#include "kernels/adam.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/grad_norm.hpp"
#include "kernels/target_update.hpp"

namespace zs {

namespace {
kernels::AdamHyper adam_hyper(const Config& c) { return {c.adam_beta1, c.adam_beta2, c.adam_eps}; }
}  // namespace

Trainer::Trainer(const Config& config, const TrainerOptions& options)
    : config_((config.validate(), config)),
      options_(options),
      layout_(config_),
      gemm_(stream_, config_.precision),
      net_(config_, layout_),
      online_(layout_, "zs::online"),
      target_(layout_, "zs::target"),
      grad_(layout_, "zs::grad"),
      m_(layout_, "zs::adam_m"),
      v_(layout_, "zs::adam_v"),
      batch_(config_, options.batch_size),
      acts_online_(config_, 2 * options.batch_size),
      acts_target_(config_, options.batch_size),
      grads_(config_, options.batch_size),
      loss_(config_, options.batch_size),
      grad_norm_("zs::grad_norm"),
      lr_("zs::lr"),
      clip_scale_("zs::clip_scale"),
      adam_state_(kernels::make_adam_state()),
      guard_(options.guard) {
  options_.budget.validate();
  if (config_.spectral_norm > 0.f)
    spectral_ = std::make_unique<SpectralNorm>(layout_, config_.spectral_norm, config_.seed ^ 0x5eed5eedull);
  init_params(config_.seed);
}

Trainer::~Trainer() {
  // Work still queued reads these buffers; let it finish before they go.
  stream_.synchronize();
}

void Trainer::set_lr(float lr) {
  require(std::isfinite(lr) && lr > 0.f, "Trainer::set_lr: lr = ", lr, " is invalid; expected a positive number");
  Kokkos::deep_copy(stream_.exec(), lr_, lr);
}

void Trainer::init_params(std::uint64_t seed) {
  stream_.synchronize();
  std::mt19937_64 rng(seed);
  auto host = Kokkos::create_mirror_view(online_.flat());
  Kokkos::deep_copy(host, 0.f);
  for (const auto& l : layout_.layers()) {
    const float bound = 1.f / std::sqrt(static_cast<float>(l.in));
    std::uniform_real_distribution<float> u(-bound, bound);
    for (std::size_t i = 0; i < std::size_t(l.in) * l.out; ++i) host(l.weight_offset + i) = u(rng);
    for (int i = 0; i < l.out; ++i) host(l.bias_offset + i) = u(rng);
  }
  Kokkos::deep_copy(online_.flat(), host);
  Kokkos::deep_copy(target_.flat(), host);
  Kokkos::deep_copy(m_.flat(), 0.f);
  Kokkos::deep_copy(v_.flat(), 0.f);
  Kokkos::deep_copy(grad_.flat(), 0.f);
  Kokkos::deep_copy(adam_state_, 0.0);
  Kokkos::deep_copy(lr_, config_.lr);
  Kokkos::fence();
  guard_.reset();
  steps_ = 0;
}

const char* Trainer::phase_name(Phase p) {
  switch (p) {
    case Phase::spectral_norm: return "spectral_norm";
    case Phase::forward: return "forward";
    case Phase::loss: return "loss";
    case Phase::backward: return "backward";
    case Phase::norm_and_guard: return "norm_and_guard";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

void Trainer::enqueue_phase(Phase phase) {
  const ExecSpace& exec = stream_.exec();
  switch (phase) {
    case Phase::spectral_norm:
      if (spectral_) spectral_->apply(exec, online_.flat());
      break;
    case Phase::forward:
      net_.forward(exec, gemm_, online_, batch_.all_states(), acts_online_);
      net_.forward(exec, gemm_, target_, batch_.next_states(), acts_target_);
      break;
    case Phase::loss:
      c51_loss(exec, net_, acts_online_, acts_target_, batch_, loss_, grads_);
      break;
    case Phase::backward:
      net_.backward(exec, gemm_, online_, batch_.states(), acts_online_, grads_, grad_);
      break;
    case Phase::norm_and_guard:
      kernels::global_grad_norm(exec, ConstDeviceFloats(grad_.flat()), grad_norm_);
      guard_.check(exec, loss_.loss, grad_norm_, lr_);
      break;
    case Phase::optimizer:
      // Clipping rides inside Adam as a scale: no extra pass over the gradient.
      kernels::clip_scale(exec, DeviceScalar<const double>(grad_norm_), clip_scale_,
                          options_.budget.c51_fraction() * config_.max_grad_norm);
      kernels::adam_prepare(exec, adam_state_, guard_.skip_flag(), adam_hyper(config_));
      kernels::adam_update(exec, online_.flat(), ConstDeviceFloats(grad_.flat()), m_.flat(), v_.flat(),
                           Kokkos::View<const double*, MemSpace>(adam_state_), guard_.skip_flag(),
                           DeviceScalar<const float>(lr_), DeviceScalar<const float>(clip_scale_),
                           adam_hyper(config_));
      kernels::polyak_update(exec, target_.flat(), ConstDeviceFloats(online_.flat()), guard_.skip_flag(),
                             config_.tau);
      break;
  }
}

void Trainer::enqueue_step() {
  for (Phase p : kPhases) enqueue_phase(p);
}

void Trainer::step_direct() {
  enqueue_step();
  ++steps_;
}

void Trainer::step() {
  if (!options_.use_graph) return step_direct();
  if (!graph_) {
    step_direct();
    graph_ = std::make_unique<Graph>();
    graph_->capture(stream_, [this] { enqueue_step(); });
    return;
  }
  graph_->replay(stream_);
  ++steps_;
}

std::vector<float> Trainer::read_tensor(const ParamBuffer& buf, const std::string& name) const {
  const TensorDesc& t = layout_.tensor(name);
  stream_.synchronize();
  auto sub = Kokkos::subview(buf.flat(), std::make_pair(t.offset, t.offset + t.size()));
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sub);
  return std::vector<float>(host.data(), host.data() + host.size());
}

void Trainer::write_tensor(const ParamBuffer& buf, const std::string& name, const std::vector<float>& data) {
  const TensorDesc& t = layout_.tensor(name);
  require(data.size() == t.size(), "Trainer::write_tensor: '", name, "' given ", data.size(),
          " values; expected ", t.size());
  stream_.synchronize();
  auto sub = Kokkos::subview(buf.flat(), std::make_pair(t.offset, t.offset + t.size()));
  Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> host(data.data(), data.size());
  Kokkos::deep_copy(sub, host);
}

}  // namespace zs
