#include "train/optimizer.hpp"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backends/host_copy.hpp"
#include "kernels/target_update.hpp"

namespace zs {

namespace {
std::vector<std::int64_t> shape_of(const TensorDesc& t) { return {t.shape.begin(), t.shape.end()}; }
}  // namespace

Optimizer::Optimizer(const Config& config, const ParamLayout& layout)
    : config_(config),
      layout_(layout),
      hyper_{config.adam_beta1, config.adam_beta2, config.adam_eps},
      m_(layout, "zs::adam_m"),
      v_(layout, "zs::adam_v"),
      state_(kernels::make_adam_state()),
      lr_("zs::lr"),
      clip_scale_("zs::clip_scale") {
  reset();
}

void Optimizer::reset() {
  Kokkos::deep_copy(m_.flat(), 0.f);
  Kokkos::deep_copy(v_.flat(), 0.f);
  Kokkos::deep_copy(state_, 0.0);
  Kokkos::deep_copy(lr_, config_.lr);
}

void Optimizer::set_lr(const ExecSpace& exec, float lr) const {
  require(std::isfinite(lr) && lr > 0.f, "Optimizer::set_lr: lr = ", lr, " is invalid; expected a positive number");
  Kokkos::deep_copy(exec, lr_, lr);
}

void Optimizer::prepare(const ExecSpace& exec, Kokkos::View<const int, MemSpace> skip,
                        Kokkos::View<const double, MemSpace> norm, float limit) const {
  kernels::adam_prepare(exec, state_, skip, norm, clip_scale_, limit, hyper_);
}

kernels::AdamPrepare<ExecSpace> Optimizer::prepare_kernel(Kokkos::View<const int, MemSpace> skip,
                                                          Kokkos::View<const double, MemSpace> norm, float limit) const {
  return kernels::make_adam_prepare<ExecSpace>(state_, skip, norm, clip_scale_, limit, hyper_);
}

template <class Grad>
void Optimizer::step(const ExecSpace& exec, const char* who, const char* label, const ParamBuffer& params,
                     const Grad& grad, Kokkos::View<const int, MemSpace> skip, const ParamBuffer& target) const {
  const Kokkos::View<const double*, MemSpace> state(state_);
  const bool polyak = config_.hard_update_every == 0;
  const auto work = kernels::adam_default_work<ExecSpace>();
  const auto f = kernels::make_adam_step<ExecSpace>(who, params.flat(), grad, m_.flat(), v_.flat(), state, skip,
                                                    DeviceScalar<const float>(lr_), hyper_,
                                                    polyak ? target.flat() : Kokkos::View<float*, MemSpace>(),
                                                    config_.tau, polyak, work);
  const auto policy = kernels::adam_policy(exec, params.flat().extent(0), work);
  if (polyak) {
    Kokkos::parallel_for(label, policy, AfterPriorGrids<kernels::AdamPolyakUpdate<ExecSpace, Grad>>(f));
    return;
  }
  Kokkos::parallel_for(label, policy, f);
  kernels::hard_update(exec, target.flat(), ConstDeviceFloats(params.flat()), state, skip,
                       std::int64_t{config_.hard_update_every});
}

void Optimizer::update(const ExecSpace& exec, const ParamBuffer& params, const ParamBuffer& grad,
                       Kokkos::View<const float, MemSpace> scale, Kokkos::View<const int, MemSpace> skip,
                       const ParamBuffer& target) const {
  const bool polyak = config_.hard_update_every == 0;
  step(exec, polyak ? "adam_polyak_update" : "adam_update", polyak ? "zs::adam_polyak_update" : "zs::adam_update",
       params, kernels::ScaledGrad<ExecSpace>{ConstDeviceFloats(grad.flat()), scale}, skip, target);
}

void Optimizer::update_budgeted(const ExecSpace& exec, const ParamBuffer& params,
                                const kernels::BudgetSum<ExecSpace>& grad, Kokkos::View<const int, MemSpace> skip,
                                const ParamBuffer& target) const {
  step(exec, "adam_budgeted_update", "zs::adam_budgeted_update", params, grad, skip, target);
}

void Optimizer::save_state(safetensors::File& f) const {
  for (const auto& [prefix, buf] : {std::make_pair("adam_m.", &m_), std::make_pair("adam_v.", &v_)})
    for (const auto& t : layout_.tensors())
      f.tensors[prefix + t.name] = safetensors::Tensor::from<float>(shape_of(t), download_tensor(*buf, t));
  f.tensors["adam.state"] = safetensors::Tensor::from<double>({kernels::kAdamStateSize}, download<double>(state_));
  f.tensors["lr"] = safetensors::Tensor::from<float>({1}, download<float>(lr_));
}

void Optimizer::check_state(const safetensors::File& f) const {
  for (const char* prefix : {"adam_m.", "adam_v."})
    for (const auto& t : layout_.tensors()) f.f32(prefix + t.name, shape_of(t));
  const auto state = f.f64("adam.state", {kernels::kAdamStateSize});
  const double t = state[kernels::kAdamT];
  require(std::isfinite(t) && t >= 0 && t < 9007199254740992.0 && t == std::floor(t), "checkpoint '", f.source,
          "': Adam's step count t = ", t, "; expected a whole number in [0, 2^53)");
  for (int i : {int(kernels::kAdamBc1), int(kernels::kAdamBc2)})
    require(std::isfinite(state[i]) && state[i] >= 0 && state[i] <= 1, "checkpoint '", f.source,
            "': Adam's bias correction ", state[i], "; expected a value in [0, 1]");
  const float lr = f.f32("lr", {1})[0];
  require(std::isfinite(lr) && lr > 0.f, "checkpoint '", f.source, "': lr = ", lr, "; expected a positive number");
}

void Optimizer::load_state(const safetensors::File& f) {
  for (const auto& [prefix, buf] : {std::make_pair("adam_m.", &m_), std::make_pair("adam_v.", &v_)})
    for (const auto& t : layout_.tensors()) upload_tensor(*buf, t, f.f32(prefix + t.name, shape_of(t)));
  upload(state_, f.f64("adam.state", {kernels::kAdamStateSize}));
  upload(lr_, f.f32("lr", {1}));
}

}  // namespace zs
