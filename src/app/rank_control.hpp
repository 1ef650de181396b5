// The decisions that every rank of `zerosync train` must take at the same iteration, since each
// is followed by collectives (the step's all-reduce, the checkpoint): whether to stop, and why.
// Rank 0 alone evaluates, reports and reads the guard and the Q-value monitor, so its reason to
// stop comes first; then a stop asked for on any rank (Ctrl-C). The ranks exchange their votes
// at control points: alone, every iteration (nothing is exchanged); with several ranks, every
// kEvery iterations and before each checkpoint. The exchange also carries each rank's newest
// parameter fingerprint (ReplicaCheck), so ranks whose parameters differ stop the run with a
// PeerFailure naming them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "app/train_command.hpp"
#include "backends/communicator.hpp"
#include "backends/process_group.hpp"
#include "train/replica_check.hpp"

namespace zs {

struct StopReason {
  TrainOutcome outcome = TrainOutcome::finished;
  std::string message;  // on the rank that decided; the others get the outcome's plain name
  bool healthy = true;  // false: the final checkpoint is not written (the last good one is kept)
  int signal = 0;       // interrupted: the signal that asked for it (SIGINT or SIGTERM)
};

class RankControl {
 public:
  // Iterations between two exchanges of a run of several ranks: a few tens of microseconds each.
  static constexpr std::int64_t kEvery = 50;

  // `replicas` and `communicator` may be null (alone).
  RankControl(ProcessGroup& group, ReplicaCheck* replicas, Communicator* communicator);

  bool alone() const { return group_.size() == 1; }
  // Whether the iteration `iterations` is a control point.
  bool due(std::int64_t iterations) const { return alone() || iterations % kEvery == 0; }
  // The run's decision, the same on every rank: rank 0's `pending` first, then a stop signal
  // (`signal`: SIGINT or SIGTERM this rank received, 0: none) on any rank; nothing: go on.
  // Throws PeerFailure when the ranks' parameters differ or the transport lost a peer.
  std::optional<StopReason> decide(const std::optional<StopReason>& pending, int signal);

 private:
  ProcessGroup& group_;
  ReplicaCheck* replicas_;
  Communicator* communicator_;
};

}  // namespace zs
