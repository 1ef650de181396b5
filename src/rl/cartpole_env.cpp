// The cart-pole VecEnv: buffers from the base, dynamics in kernels/cartpole.hpp.
#include <cstdint>

#include "rl/envs.hpp"

namespace zs {

CartPoleEnv::CartPoleEnv(int n, std::uint64_t seed, const kernels::CartPoleParams& params)
    : VecEnv(n, kernels::kCartDim, {2}, params.max_episode_steps, kernels::kCartDim, seed,
             to_json(params)),
      p_(params) {}

void CartPoleEnv::reset(const ExecSpace& exec) {
  kernels::cartpole_reset(exec, state_, obs, next_obs, stats(), counter_, p_, seed_);
}

void CartPoleEnv::step(const ExecSpace& exec, const EnvActions& actions) {
  kernels::cartpole_step(exec, state_, obs, next_obs,
                         Kokkos::View<const std::int32_t**, Kokkos::LayoutRight, MemSpace>(actions),
                         stats(), counter_, p_, seed_);
}

void CartPoleEnv::step_in_tail(const ExecSpace& exec, const kernels::CollectStages<ExecSpace>& s) {
  check_tail_actions(s, "cartpole step_in_tail");
  kernels::launch_collect_tail(exec, s,
                               kernels::CartPoleStep<ExecSpace>{state_, obs, next_obs, s.greedy.actions, stats(),
                                                                counter_, p_, seed_},
                               size(), counter_);
}

}  // namespace zs
