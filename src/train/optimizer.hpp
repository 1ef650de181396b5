// Adam over the flat parameter buffer (torch.optim.Adam's semantics) and the target network's
// update, with all their state on the device: m, v, t and the bias corrections, lr, the clip
// scale. The target follows by Polyak averaging inside Adam's pass (tau), or by a copy every N
// applied updates (hard_update_every). Both are skipped on a step the guard tripped.
#pragma once
#include <cstdint>

#include "backends/backend.hpp"
#include "core/config.hpp"
#include "core/safetensors.hpp"
#include "kernels/adam.hpp"
#include "kernels/budget_sum.hpp"
#include "nn/param_buffer.hpp"

namespace zs {

class Optimizer {
 public:
  Optimizer(const Config& config, const ParamLayout& layout);

  // Enqueues one thread: the clip scale min(1, limit / (‖g‖ + 1e-6)) of the gradient whose norm
  // is `norm` into clip_scale(), and unless `skip` is set, t += 1 with its bias corrections.
  void prepare(const ExecSpace& exec, Kokkos::View<const int, MemSpace> skip, Kokkos::View<const double, MemSpace> norm,
               float limit) const;
  // The same work as a functor for one thread of a launch of the caller's (the step runs it as
  // the gradient norm's tail).
  kernels::AdamPrepare<ExecSpace> prepare_kernel(Kokkos::View<const int, MemSpace> skip,
                                                 Kokkos::View<const double, MemSpace> norm, float limit) const;
  // Enqueues Adam on `params` with grad × scale, then the target update; nothing on a skipped step.
  void update(const ExecSpace& exec, const ParamBuffer& params, const ParamBuffer& grad,
              Kokkos::View<const float, MemSpace> scale, Kokkos::View<const int, MemSpace> skip,
              const ParamBuffer& target) const;
  // The same step on the budgeted sum of the terms' gradients (kernels::BudgetSum), which Adam's
  // pass forms element by element and keeps in the sum's buffer, skipped step or not.
  void update_budgeted(const ExecSpace& exec, const ParamBuffer& params, const kernels::BudgetSum<ExecSpace>& grad,
                       Kokkos::View<const int, MemSpace> skip, const ParamBuffer& target) const;

  DeviceScalar<float> lr() const { return lr_; }
  DeviceScalar<float> clip_scale() const { return clip_scale_; }
  const ParamBuffer& m() const { return m_; }
  const ParamBuffer& v() const { return v_; }
  // [t, 1 − β1^t, 1 − β2^t] in doubles (kernels/adam.hpp).
  Kokkos::View<double*, MemSpace> state() const { return state_; }

  // Enqueues lr ← value (graph-safe: kernels read lr from device memory).
  void set_lr(const ExecSpace& exec, float lr) const;
  // Zero moments and t, lr from the config. Blocking: set-up only.
  void reset();
  // Named tensors of the optimizer's state for a checkpoint ("adam_m.<tensor>", "adam_v.<tensor>",
  // "adam.state", "lr"); check_state throws on a missing or misshapen one before load_state
  // writes anything.
  void save_state(safetensors::File& f) const;
  void check_state(const safetensors::File& f) const;
  void load_state(const safetensors::File& f);

 private:
  // Adam on `grad` (a gradient source: kernels::ScaledGrad, kernels::BudgetSum), then the target:
  // Polyak in the same pass, or a copy every hard_update_every applied updates. `who` names the
  // step in errors, `label` is its launch's.
  template <class Grad>
  void step(const ExecSpace& exec, const char* who, const char* label, const ParamBuffer& params, const Grad& grad,
            Kokkos::View<const int, MemSpace> skip, const ParamBuffer& target) const;

  Config config_;
  const ParamLayout& layout_;
  kernels::AdamHyper hyper_;
  ParamBuffer m_, v_;
  Kokkos::View<double*, MemSpace> state_;
  DeviceScalar<float> lr_, clip_scale_;
};

}  // namespace zs
