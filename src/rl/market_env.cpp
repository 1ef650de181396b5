// The market VecEnv: buffers from the base, dynamics in kernels/market.hpp.
#include <cstddef>
#include <cstdint>

#include "rl/envs.hpp"

namespace zs {

MarketEnv::MarketEnv(int n, std::uint64_t seed, const kernels::MarketParams& params)
    : VecEnv(n, kernels::kMarketObsDim, {kernels::kExposureActions, kernels::kOrderTypes, kernels::kUrgencies},
             params.episode_length, kernels::kMktStateDim, seed, to_json(params)),
      factored_action("zs::env_factored_action", static_cast<std::size_t>(n)),
      p_(params) {
  Kokkos::deep_copy(factored_action, kernels::kInvalidFactoredAction);
}

kernels::MarketViews<MemSpace> MarketEnv::views() const {
  return {state_, obs, next_obs, factored_action, stats(), counter_};
}

void MarketEnv::reset(const ExecSpace& exec) {
  kernels::market_reset(exec, views(), counter_, p_, seed_);
}

void MarketEnv::step(const ExecSpace& exec, const EnvActions& actions) {
  kernels::market_step(exec, views(),
                       Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemSpace>(actions),
                       counter_, p_, seed_);
}

void MarketEnv::step_in_tail(const ExecSpace& exec, const kernels::CollectStages<ExecSpace>& s) {
  check_tail_actions(s, "market step_in_tail");
  using K = kernels::MarketKernel<ExecSpace>;
  kernels::launch_collect_tail(exec, s, kernels::WithTag<K, typename K::StepTag>{K{views(), s.greedy.actions, p_, seed_}},
                               size(), counter_);
}

}  // namespace zs
