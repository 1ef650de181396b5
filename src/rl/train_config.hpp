// The configuration of `zerosync train`: which environment, the network and optimiser (a zs::Config
// under "network"), and the loop around the step — vectorised environments, replay, exploration,
// evaluation, checkpoints. Every key is documented in docs/train.md; unknown keys are errors.
#pragma once
#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "core/guard_config.hpp"
#include "core/json.hpp"  // nlohmann::json, and the strict reader for whoever reads a saved config

namespace zs {

// A value that moves linearly from `start` to `end` over the first `steps` environment steps and
// then stays at `end`. Evaluated on the device (kernels::LinearRamp in kernels/train_loop.hpp).
struct LinearSchedule {
  float start = 1.f;
  float end = 0.f;
  std::int64_t steps = 0;
};

struct TrainConfig {
  std::string env = "cartpole";
  nlohmann::json env_params = nlohmann::json::object();  // the environment's own keys
  Config network;            // network, loss and optimiser; network.state_dim/branches follow the env
  int envs = 8;              // environments stepped together
  std::int64_t steps = 100000;  // environment steps in total (summed over the envs)
  std::uint64_t seed = 0;    // seeds everything: init, environments, exploration, replay sampling
  int batch_size = 64;
  std::int64_t learning_starts = 1000;  // environment steps collected before the first update
  int train_every = 1;       // loop iterations (one step of every env) between updates
  int updates = 1;           // training steps per update
  // Replay (docs/replay.md).
  int replay_capacity = 100000;
  bool prioritized = true;
  // Priority exponent and importance-sampling exponent; for both, steps = 0 means "over the
  // whole run". A plain number in the JSON is a constant.
  LinearSchedule alpha{0.6f, 0.6f, 0};
  LinearSchedule beta{0.4f, 1.f, 0};
  float priority_eps = 1e-6f;
  LinearSchedule epsilon{1.f, 0.02f, 10000};
  // Evaluation: `eval_episodes` greedy episodes (one per evaluation env) every `eval_every`
  // environment steps; the run stops early once their mean return reaches `solve_return`
  // (when stop_when_solved).
  std::int64_t eval_every = 5000;
  int eval_episodes = 100;
  double solve_return = 0;
  bool stop_when_solved = false;
  std::int64_t checkpoint_every = 20000;  // environment steps between checkpoints
  GuardConfig guard{};

  // Throws zs::Error naming the first bad key, its value and what is expected.
  void validate() const;
  // Missing keys keep their defaults (those of `base`); unknown keys and wrong types are errors.
  static TrainConfig from_json(const nlohmann::json& j, const TrainConfig& base);
  static TrainConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  static TrainConfig from_file(const std::string& path, const TrainConfig& base);
  static TrainConfig from_file(const std::string& path);
  // The built-in defaults for an environment: "cartpole" (solves in about a minute on 2 cores)
  // or "market". Throws zs::Error for an unknown name.
  static TrainConfig defaults_for(const std::string& env);
};

}  // namespace zs
