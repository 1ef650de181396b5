// `zerosync train`: the whole agent — vectorised environments, device replay, ε-greedy acting
// and the training step — with a progress bar, a run directory (config, CSV metrics,
// checkpoints, learning-curve PNG), Ctrl-C that saves, and --resume.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "backends/process_group.hpp"

namespace zs {

struct TrainCommand {
  std::string env;          // "" → the config's, else "cartpole"
  std::string config_path;  // JSON; missing keys keep the environment's defaults
  std::optional<std::int64_t> steps;
  std::optional<int> envs;
  std::optional<std::uint64_t> seed;
  std::string out;          // run directory; "" → runs/<env>-<date>-<time>
  bool resume = false;      // continue the run in `out` from its checkpoint
  bool quiet = false;       // no progress output at all (the start line, errors and the summary still print)
  // The ranks of the run (mpirun); nullptr: this process alone. Rank 0 alone prints, evaluates
  // and writes the run directory; every rank trains on its own environments and replay.
  ProcessGroup* group = nullptr;
};

enum class TrainOutcome { finished, solved, interrupted, guard_stopped, q_stopped };

struct TrainSummary {
  TrainOutcome outcome = TrainOutcome::finished;
  int signal = 0;  // interrupted: the signal that asked for it (SIGINT or SIGTERM)
  std::string run_dir, plot, best_model, checkpoint;
  std::int64_t env_steps = 0, updates = 0;
  double wall_s = 0;
  double best_eval = 0;    // best evaluation mean (NaN: no evaluation ran)
  double last_eval = 0;
  std::string message;     // why it stopped, in words
};

// Runs the command; progress goes to `log` (rank 0's; the other ranks print nothing). Throws
// zs::Error on bad input (a SharedError on every rank at once when the ranks agree on it), and a
// PeerFailure when a rank is lost or the ranks' parameters differ.
TrainSummary run_train_command(const TrainCommand& cmd, std::ostream& log);

// Set by the SIGINT handler; the loop saves a checkpoint and stops at the next iteration.
void request_train_stop();

}  // namespace zs
