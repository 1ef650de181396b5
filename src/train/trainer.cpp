#include "train/trainer.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>

#include "kernels/adam.hpp"
#include "kernels/budget_sum.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/grad_norm.hpp"

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
      guard_(options.guard),
      budget_(budget_of(config_)),
      unit_scale_("zs::unit_scale"),
      budget_record_("zs::budget_record", kernels::kBudgetSlots),
      norm_scratch_(kernels::make_grad_norms_scratch(stream_.exec())),
      aux_mailbox_(kernels::kBudgetSlots) {
  require(!options.budget.iqn_on && !options.budget.ensemble_on && !options.budget.cql_on,
          "Trainer: TrainerOptions::budget turns on iqn = ", options.budget.iqn_on, ", ensemble = ",
          options.budget.ensemble_on, ", cql = ", options.budget.cql_on,
          "; expected them off there: auxiliaries and their budgets are Config keys (iqn, ensemble, cql)");
  budget_.validate();
  Kokkos::deep_copy(unit_scale_, 1.f);
  if (config_.any_auxiliary()) applied_ = std::make_unique<ParamBuffer>(layout_, "zs::applied_grad");
  if (config_.iqn.on) iqn_ = std::make_unique<IqnHead>(config_, layout_, options.batch_size);
  if (config_.ensemble.on()) ensemble_ = std::make_unique<EnsembleHeads>(config_, layout_, options.batch_size);
  if (config_.cql.on) cql_ = std::make_unique<CqlRegulariser>(config_, layout_, options.batch_size);
  if (config_.spectral_norm > 0.f)
    spectral_ = std::make_unique<SpectralNorm>(layout_, config_.spectral_norm, config_.seed ^ 0x5eed5eedull);
  forward_plan_ = std::make_unique<ForwardPlan>(
      net_, std::vector<ForwardPass>{{&online_, batch_.states(), &acts_online_, 0},
                                     {&online_, batch_.next_states(), &acts_online_, options.batch_size},
                                     {&target_, batch_.next_states(), &acts_target_, 0}});
  backward_plan_ = std::make_unique<BackwardPlan>(net_, online_, batch_.states(), acts_online_, grads_, grad_);
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
  if (iqn_) iqn_->reset_counter();
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
    case Phase::auxiliary: return "auxiliary";
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
      forward_plan_->enqueue(exec, gemm_);
      break;
    case Phase::loss:
      c51_loss(exec, net_, acts_online_, acts_target_, batch_, loss_, grads_);
      break;
    case Phase::backward:
      backward_plan_->enqueue(exec, gemm_);
      break;
    case Phase::auxiliary:
      if (iqn_) iqn_->enqueue(exec, gemm_, net_, online_, target_, acts_online_, acts_target_, batch_, loss_);
      if (ensemble_) ensemble_->enqueue(exec, gemm_, net_, online_, acts_online_, batch_, loss_);
      if (cql_) cql_->enqueue(exec, gemm_, net_, online_, acts_online_, batch_);
      break;
    case Phase::norm_and_guard:
      // The guard judges C51's loss and raw gradient norm; each auxiliary's norm only sets its
      // own clip (a non-finite one adds nothing) and is reported in aux_metrics(). All the
      // norms come from one launch.
      if (config_.any_auxiliary()) {
        std::vector<ConstDeviceFloats> grads{ConstDeviceFloats(grad_.flat())};
        std::vector<DeviceScalar<double>> norms{grad_norm_};
        auto add = [&](const AuxOutputs& a) {
          grads.push_back(ConstDeviceFloats(a.grad.flat()));
          norms.push_back(a.norm);
        };
        if (iqn_) add(iqn_->out());
        if (ensemble_) add(ensemble_->out());
        if (cql_) add(cql_->out());
        kernels::grad_norms(exec, grads, norms, norm_scratch_);
      } else {
        kernels::global_grad_norm(exec, ConstDeviceFloats(grad_.flat()), grad_norm_);
      }
      guard_.check(exec, loss_.loss, grad_norm_, lr_);
      if (config_.any_auxiliary()) {
        kernels::BudgetRecord<ExecSpace> r;
        r.record = budget_record_;
        r.c51_norm = grad_norm_;
        if (iqn_) r.iqn_norm = iqn_->out().norm, r.iqn_loss = iqn_->out().loss;
        if (ensemble_)
          r.ensemble_norm = ensemble_->out().norm, r.ensemble_loss = ensemble_->out().loss,
          r.ensemble_spread = ensemble_->spread_mean();
        if (cql_) r.cql_norm = cql_->out().norm, r.cql_loss = cql_->out().loss;
        r.step = guard_.step_counter();
        r.c51_limit = double(budget_.c51_fraction() * config_.max_grad_norm);
        r.iqn_limit = double(budget_.iqn * config_.max_grad_norm);
        r.ensemble_limit = double(budget_.ensemble * config_.max_grad_norm);
        r.cql_limit = double(budget_.cql * config_.max_grad_norm);
        kernels::budget_record(exec, r);
        aux_mailbox_.post_every(exec, budget_record_, guard_.step_counter(), options_.guard.post_every);
      }
      break;
    case Phase::optimizer: {
      // C51's share of max_grad_norm. Alone, its clip rides inside Adam as a scale (no extra pass
      // over the gradient); with auxiliaries, the gradient is scaled in place and each
      // auxiliary is added clipped to its own share, so ‖applied‖ ≤ max_grad_norm. The clip
      // scale is written by adam_prepare's one thread and the Polyak update rides in Adam's
      // pass: two launches, where each one costs the graph a few microseconds.
      kernels::adam_prepare(exec, adam_state_, guard_.skip_flag(), DeviceScalar<const double>(grad_norm_),
                            clip_scale_, budget_.c51_fraction() * config_.max_grad_norm, adam_hyper(config_));
      DeviceScalar<const float> scale = clip_scale_;
      ConstDeviceFloats applied(grad_.flat());
      if (applied_) {
        // grad_ stays C51's raw gradient: the sum is built in its own buffer, so no stale
        // auxiliary values can linger in tensors that C51's backward never writes.
        std::vector<kernels::BudgetTerm> terms;
        auto add = [&](const AuxOutputs& a, float share) {
          terms.push_back({a.grad.flat().data(), a.norm.data(), static_cast<double>(share * config_.max_grad_norm)});
        };
        if (iqn_) add(iqn_->out(), budget_.iqn);
        if (ensemble_) add(ensemble_->out(), budget_.ensemble);
        if (cql_) add(cql_->out(), budget_.cql);
        kernels::budget_sum(exec, applied_->flat(), ConstDeviceFloats(grad_.flat()),
                            DeviceScalar<const float>(clip_scale_), terms);
        applied = ConstDeviceFloats(applied_->flat());
        scale = unit_scale_;
      }
      kernels::adam_polyak_update(exec, online_.flat(), applied, m_.flat(), v_.flat(),
                                  Kokkos::View<const double*, MemSpace>(adam_state_), guard_.skip_flag(),
                                  DeviceScalar<const float>(lr_), scale, adam_hyper(config_), target_.flat(),
                                  config_.tau);
      break;
    }
  }
}

std::optional<AuxStatus> Trainer::aux_metrics() const {
  if (!config_.any_auxiliary()) return std::nullopt;
  const auto rec = aux_mailbox_.read();
  if (!rec) return std::nullopt;
  const auto& v = rec->values;
  AuxStatus s;
  s.seq = rec->seq;
  s.step = static_cast<std::int64_t>(v[kernels::kBudgetStep]);
  s.steps_behind = steps_ - 1 - s.step;
  s.c51_grad_norm = v[kernels::kBudgetC51Norm];
  s.c51_scale = v[kernels::kBudgetC51Scale];
  s.iqn_loss = v[kernels::kBudgetIqnLoss];
  s.iqn_grad_norm = v[kernels::kBudgetIqnNorm];
  s.iqn_scale = v[kernels::kBudgetIqnScale];
  s.ensemble_loss = v[kernels::kBudgetEnsembleLoss];
  s.ensemble_grad_norm = v[kernels::kBudgetEnsembleNorm];
  s.ensemble_scale = v[kernels::kBudgetEnsembleScale];
  s.ensemble_spread = v[kernels::kBudgetEnsembleSpread];
  s.cql_loss = v[kernels::kBudgetCqlLoss];
  s.cql_grad_norm = v[kernels::kBudgetCqlNorm];
  s.cql_scale = v[kernels::kBudgetCqlScale];
  return s;
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
  if (!graph_) graph_ = std::make_unique<Graph>();
  graph_->run(stream_, [this] { enqueue_step(); });
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
