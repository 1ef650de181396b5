// Vectorised environments: N copies stepped in one launch on the step's stream, with auto-reset
// and a device-resident RNG counter, so reset()/step() can be recorded into a zs::Graph.
// The contract (obs vs next_obs, terminated vs truncated, stats) is in docs/environments.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.hpp"
#include "kernels/cartpole.hpp"
#include "kernels/collect_tail.hpp"
#include "kernels/market.hpp"
#include "kernels/vec_env.hpp"
#include "core/safetensors.hpp"

namespace zs {

using EnvMatrix = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;         // [N, obs_dim]
using EnvActions = Kokkos::View<std::int32_t**, Kokkos::LayoutRight, MemSpace>;  // [N, branches]
using EnvVector = Kokkos::View<float*, MemSpace>;                                // [N]

class VecEnv {
 public:
  virtual ~VecEnv();
  VecEnv(const VecEnv&) = delete;
  VecEnv& operator=(const VecEnv&) = delete;

  virtual const char* name() const = 0;
  int size() const { return n_; }
  int obs_dim() const { return obs_dim_; }
  const std::vector<int>& branches() const { return branches_; }
  int max_episode_steps() const { return max_episode_steps_; }
  std::uint64_t seed() const { return seed_; }
  // RNG calls made so far (one per reset()/step()); device memory, read it after a sync.
  const Kokkos::View<std::uint64_t, MemSpace>& rng_counter() const { return counter_; }

  // Device buffers, allocated once in the constructor, written by reset()/step():
  EnvMatrix obs;         // current observation (after an auto-reset)
  EnvMatrix next_obs;    // the observation the last action led to (before any auto-reset)
  EnvVector reward;      // reward of the last step
  EnvVector terminated;  // 1 if the last step ended the episode in a terminal state, else 0
  EnvVector truncated;   // 1 if it ended at the time limit (and was not terminal), else 0
  Kokkos::View<float*, MemSpace> episode_return;       // running return of the current episode
  Kokkos::View<std::int32_t*, MemSpace> episode_length;
  Kokkos::View<std::int32_t*, MemSpace> episodes_done;  // episodes finished since reset()
  Kokkos::View<float*, MemSpace> first_return;  // return of the first episode since reset() (NaN until then)
  Kokkos::View<float*, MemSpace> last_return;   // return of the latest finished episode (NaN until then)

  // Enqueue on exec: all N envs to fresh episodes (new draws each call); clears the stats.
  virtual void reset(const ExecSpace& exec) = 0;
  // Enqueue on exec: one step of all N envs; ended episodes auto-reset (obs = fresh start,
  // next_obs keeps the final observation). Throws zs::Error if actions is not [N, branches].
  virtual void step(const ExecSpace& exec, const EnvActions& actions) = 0;
  // Enqueue on exec: `stages` (acting, and the loop's copy and replay insert where given) around
  // one step of all N envs on the actions stages.greedy picks, as one launch
  // (kernels/collect_tail.hpp). The step is step()'s, bit for bit. Throws zs::Error if those
  // actions are not [N, branches].
  virtual void step_in_tail(const ExecSpace& exec, const kernels::CollectStages<ExecSpace>& stages) = 0;
  // Blocking (fences): every device value needed to continue exactly, as tensors prefix + "...",
  // and the env's name and params in the metadata.
  virtual void save_state(safetensors::File& f, const std::string& prefix) const;
  // Blocking: refuses (zs::Error, nothing changed) a missing tensor, a wrong dtype or shape
  // (another N), another environment, seed or params.
  virtual void load_state(const safetensors::File& f, const std::string& prefix);

 protected:
  VecEnv(int n, int obs_dim, std::vector<int> branches, int max_episode_steps, int state_dim,
         std::uint64_t seed, nlohmann::json params);
  kernels::EnvStats<MemSpace> stats() const;
  // The actions stages.greedy writes, checked to be [N, branches] (who: the caller's name).
  void check_tail_actions(const kernels::CollectStages<ExecSpace>& stages, const char* who) const;

  Kokkos::View<double**, Kokkos::LayoutRight, MemSpace> state_;  // [N, state_dim], env-specific
  Kokkos::View<std::uint64_t, MemSpace> counter_;
  std::uint64_t seed_;
  nlohmann::json params_;  // as validated, defaults filled in: compared on load

 private:
  int n_, obs_dim_, max_episode_steps_;
  std::vector<int> branches_;
};

class CartPoleEnv final : public VecEnv {
 public:
  CartPoleEnv(int n, std::uint64_t seed, const kernels::CartPoleParams& params);
  const char* name() const override { return "cartpole"; }
  void reset(const ExecSpace& exec) override;
  void step(const ExecSpace& exec, const EnvActions& actions) override;
  void step_in_tail(const ExecSpace& exec, const kernels::CollectStages<ExecSpace>& stages) override;
  const kernels::CartPoleParams& params() const { return p_; }

 private:
  kernels::CartPoleParams p_;
};

class MarketEnv final : public VecEnv {
 public:
  MarketEnv(int n, std::uint64_t seed, const kernels::MarketParams& params);
  const char* name() const override { return "market"; }
  void reset(const ExecSpace& exec) override;
  void step(const ExecSpace& exec, const EnvActions& actions) override;
  void step_in_tail(const ExecSpace& exec, const kernels::CollectStages<ExecSpace>& stages) override;
  const kernels::MarketParams& params() const { return p_; }

  // The order each env executed on the last step as a factored action (exposure·9 +
  // order_type·3 + urgency, after clamping and routing); −1 after reset(). Output only.
  Kokkos::View<std::int32_t*, MemSpace> factored_action;

 private:
  kernels::MarketViews<MemSpace> views() const;
  kernels::MarketParams p_;
};

// Validated params (unknown keys, wrong types and out-of-range values throw zs::Error naming
// the key, the value and what is expected). to_json gives every key with its value.
kernels::CartPoleParams cartpole_params(const nlohmann::json& params);
nlohmann::json to_json(const kernels::CartPoleParams& p);
kernels::MarketParams market_params(const nlohmann::json& params);
nlohmann::json to_json(const kernels::MarketParams& p);

// name: "cartpole" | "market"; params: env-specific JSON object (docs/environments.md); n >= 1.
std::unique_ptr<VecEnv> make_env(const std::string& name, int n, std::uint64_t seed,
                                 const nlohmann::json& params = nlohmann::json::object());

}  // namespace zs
