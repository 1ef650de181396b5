// VecEnv's common buffers and checkpointing, and make_env.
#include "rl/envs.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "backends/host_copy.hpp"

namespace zs {

namespace {

std::int64_t as_i64(std::uint64_t u) {
  std::int64_t i;
  std::memcpy(&i, &u, sizeof i);
  return i;
}
std::uint64_t as_u64(std::int64_t i) {
  std::uint64_t u;
  std::memcpy(&u, &i, sizeof u);
  return u;
}

}  // namespace

VecEnv::VecEnv(int n, int obs_dim, std::vector<int> branches, int max_episode_steps,
               int state_dim, std::uint64_t seed, nlohmann::json params)
    : seed_(seed), params_(std::move(params)), n_(n), obs_dim_(obs_dim),
      max_episode_steps_(max_episode_steps), branches_(std::move(branches)) {
  require(n >= 1, "make_env: n = ", n, " environments; expected at least 1");
  const auto N = static_cast<std::size_t>(n);
  obs = EnvMatrix("zs::env_obs", N, obs_dim);
  next_obs = EnvMatrix("zs::env_next_obs", N, obs_dim);
  reward = EnvVector("zs::env_reward", N);
  terminated = EnvVector("zs::env_terminated", N);
  truncated = EnvVector("zs::env_truncated", N);
  episode_return = EnvVector("zs::env_episode_return", N);
  episode_length = Kokkos::View<std::int32_t*, MemSpace>("zs::env_episode_length", N);
  episodes_done = Kokkos::View<std::int32_t*, MemSpace>("zs::env_episodes_done", N);
  first_return = EnvVector("zs::env_first_return", N);
  last_return = EnvVector("zs::env_last_return", N);
  state_ = Kokkos::View<double**, Kokkos::LayoutRight, MemSpace>("zs::env_state", N, state_dim);
  counter_ = Kokkos::View<std::uint64_t, MemSpace>("zs::env_rng_counter");
  Kokkos::deep_copy(first_return, kernels::env_nan());
  Kokkos::deep_copy(last_return, kernels::env_nan());
}

VecEnv::~VecEnv() = default;

kernels::EnvStats<MemSpace> VecEnv::stats() const {
  return {reward, terminated, truncated, episode_return,
          episode_length, episodes_done, first_return, last_return};
}

void VecEnv::check_tail_actions(const kernels::CollectStages<ExecSpace>& s, const char* who) const {
  const auto& a = s.greedy.actions;
  require(a.extent(0) == static_cast<std::size_t>(n_) && a.extent(1) == branches_.size(), who, ": actions are [",
          a.extent(0), ", ", a.extent(1), "]; expected [", n_, ", ", branches_.size(), "] (N x branches)");
}

void VecEnv::save_state(safetensors::File& f, const std::string& prefix) const {
  const std::int64_t N = n_, D = obs_dim_, S = static_cast<std::int64_t>(state_.extent(1));
  using safetensors::Tensor;
  f.metadata[prefix + "env"] = name();
  f.metadata[prefix + "params"] = params_.dump();
  f.tensors[prefix + "state"] = Tensor::from<double>({N, S}, download<double>(state_));
  f.tensors[prefix + "obs"] = Tensor::from<float>({N, D}, download<float>(obs));
  f.tensors[prefix + "next_obs"] = Tensor::from<float>({N, D}, download<float>(next_obs));
  const std::pair<const char*, EnvVector> floats[] = {
      {"reward", reward},         {"terminated", terminated},     {"truncated", truncated},
      {"episode_return", episode_return}, {"first_return", first_return}, {"last_return", last_return}};
  for (const auto& [key, view] : floats)
    f.tensors[prefix + key] = Tensor::from<float>({N}, download<float>(view));
  f.tensors[prefix + "episode_length"] = Tensor::from<std::int32_t>({N}, download<std::int32_t>(episode_length));
  f.tensors[prefix + "episodes_done"] = Tensor::from<std::int32_t>({N}, download<std::int32_t>(episodes_done));
  const auto counter = download<std::uint64_t>(counter_);
  f.tensors[prefix + "rng"] = Tensor::from<std::int64_t>({2}, {as_i64(seed_), as_i64(counter[0])});
}

void VecEnv::load_state(const safetensors::File& f, const std::string& prefix) {
  const std::int64_t N = n_, D = obs_dim_, S = static_cast<std::int64_t>(state_.extent(1));
  const auto meta = [&](const std::string& key) {
    auto it = f.metadata.find(prefix + key);
    require(it != f.metadata.end(), "env load_state: no '", prefix, key, "' in the metadata of '",
            f.source, "'; expected a file written by VecEnv::save_state");
    return it->second;
  };
  require(meta("env") == name(), "env load_state: '", f.source, "' holds a '", meta("env"),
          "' environment; expected '", name(), "'");
  require(meta("params") == params_.dump(), "env load_state: '", f.source, "' was saved with params ",
          meta("params"), "; this environment has ", params_.dump());
  // Read and check everything before touching the device, so a bad file changes nothing.
  const auto state = f.f64(prefix + "state", {N, S});
  const auto o = f.f32(prefix + "obs", {N, D});
  const auto no = f.f32(prefix + "next_obs", {N, D});
  const std::pair<const char*, EnvVector> floats[] = {
      {"reward", reward},         {"terminated", terminated},     {"truncated", truncated},
      {"episode_return", episode_return}, {"first_return", first_return}, {"last_return", last_return}};
  std::vector<std::vector<float>> float_data;
  for (const auto& [key, view] : floats) float_data.push_back(f.f32(prefix + key, {N}));
  const auto len = f.i32(prefix + "episode_length", {N});
  const auto done = f.i32(prefix + "episodes_done", {N});
  const auto rng = f.i64(prefix + "rng", {2});
  require(as_u64(rng[0]) == seed_, "env load_state: '", f.source, "' was saved with seed ",
          as_u64(rng[0]), "; this environment has seed ", seed_);
  for (std::size_t k = 0; k < len.size(); ++k)
    require(len[k] >= 0 && len[k] < max_episode_steps_, "env load_state: '", f.source,
            "': episode_length[", k, "] = ", len[k], "; expected 0..", max_episode_steps_ - 1);

  upload(state_, state);
  upload(obs, o);
  upload(next_obs, no);
  for (std::size_t k = 0; k < float_data.size(); ++k) upload(floats[k].second, float_data[k]);
  upload(episode_length, len);
  upload(episodes_done, done);
  upload(counter_, std::vector<std::uint64_t>{as_u64(rng[1])});
}

std::unique_ptr<VecEnv> make_env(const std::string& name, int n, std::uint64_t seed,
                                 const nlohmann::json& params) {
  require(n >= 1, "make_env: n = ", n, " environments; expected at least 1");
  if (name == "cartpole") return std::make_unique<CartPoleEnv>(n, seed, cartpole_params(params));
  if (name == "market") return std::make_unique<MarketEnv>(n, seed, market_params(params));
  fail("make_env: unknown environment '", name, "'; expected \"cartpole\" or \"market\"");
}

}  // namespace zs
