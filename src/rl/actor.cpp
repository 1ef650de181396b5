#include "rl/actor.hpp"

#include <cstddef>
#include <vector>

#include "kernels/c51_q.hpp"

namespace zs {

Actor::Actor(const Config& config, const ParamLayout& layout, Stream& stream, int rows, kernels::ActingRng rng,
             const FusedOptions* fused)
    : config_(config),
      stream_(stream),
      gemm_(stream, config.precision),
      net_(config, layout),
      acts_(config, rows),
      rows_(rows),
      rng_(rng),
      q_("zs::actor::q", rows, config.total_actions()),
      actions_("zs::actor::actions", rows, config.branches.size()),
      counter_("zs::actor::counter") {
  require(rows >= 1, "Actor: rows = ", rows, "; expected at least 1 observation per call");
  if (fused && fused_supports(config_, *fused, &fused_off_reason_)) fused_ = *fused;
}

void Actor::act(const ParamBuffer& params, const ConstMatrixView& obs, Kokkos::View<const float, MemSpace> epsilon) {
  require(obs.extent(0) == static_cast<std::size_t>(rows_) &&
              obs.extent(1) == static_cast<std::size_t>(config_.state_dim),
          "Actor::act: observations are [", obs.extent(0), ", ", obs.extent(1), "]; expected [", rows_, ", ",
          config_.state_dim, "]");
  const auto& exec = stream_.exec();
  if (planned_for_.changed({&params, obs.data()})) {
    const std::vector<ForwardPass> passes{{&params, obs, &acts_, 0}};
    if (fused_)
      fused_forward_ = std::make_unique<FusedForward>(net_, passes, *fused_);
    else
      forward_ = std::make_unique<ForwardPlan>(net_, passes);
  }
  if (fused_)
    fused_forward_->enqueue(exec);
  else
    forward_->enqueue(exec, gemm_);
  kernels::q_from_log_probs<ExecSpace>(exec, acts_.logp, config_.v_min, config_.v_max, q_);
  kernels::epsilon_greedy<ExecSpace>(exec, q_, config_.branches, epsilon, counter_, rng_, actions_);
}

}  // namespace zs
