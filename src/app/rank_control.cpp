#include "app/rank_control.hpp"

#include <csignal>
#include <cstddef>
#include <vector>

#include "kernels/param_checksum.hpp"

namespace zs {

namespace {

// Votes travel as doubles: [outcome + 1 (0: none), healthy, stop signal (0: none), fingerprint step,
// high, low].
enum Vote : std::size_t { kOutcome, kHealthy, kSignal, kStep, kHigh, kLow, kVoteSize };

const char* plain_name(TrainOutcome o) {
  switch (o) {
    case TrainOutcome::finished: return "finished";
    case TrainOutcome::solved: return "solved (rank 0's evaluation)";
    case TrainOutcome::interrupted: return "interrupted";
    case TrainOutcome::guard_stopped: return "stopped by the training guard (rank 0's report)";
    case TrainOutcome::q_stopped: return "stopped by the Q-value monitor (rank 0's report)";
  }
  return "stopped";
}

// A stop asked for by `signal`; `where` names the rank that received it (with several ranks).
StopReason signalled(int signal, const std::string& where) {
  const std::string what = signal == SIGTERM ? "terminated (SIGTERM" : "interrupted (Ctrl-C";
  return StopReason{TrainOutcome::interrupted, what + where + ")", true, signal};
}

}  // namespace

RankControl::RankControl(ProcessGroup& group, ReplicaCheck* replicas, Communicator* communicator)
    : group_(group), replicas_(replicas), communicator_(communicator) {}

std::optional<StopReason> RankControl::decide(const std::optional<StopReason>& pending, int signal) {
  if (alone()) {
    if (pending) return pending;
    if (signal != 0) return signalled(signal, "");
    return std::nullopt;
  }
  if (communicator_) communicator_->check();
  std::vector<double> vote(kVoteSize, 0.0);
  if (pending && group_.rank() == 0) {
    vote[kOutcome] = 1.0 + static_cast<int>(pending->outcome);
    vote[kHealthy] = pending->healthy ? 1.0 : 0.0;
  }
  vote[kSignal] = signal;
  const kernels::ParamChecksum mine = replicas_ ? replicas_->newest() : kernels::ParamChecksum{};
  vote[kStep] = mine.step;
  vote[kHigh] = mine.high;
  vote[kLow] = mine.low;
  const auto votes = group_.all_gather(vote, "the ranks' stop decision");
  std::vector<kernels::ParamChecksum> fingerprints;
  int interrupted_on = -1;
  for (std::size_t r = 0; r < votes.size(); ++r) {
    require(votes[r].size() == kVoteSize, "the ranks' stop decision: rank ", r, " sent ", votes[r].size(),
            " values; expected ", static_cast<std::size_t>(kVoteSize));
    fingerprints.push_back({votes[r][kStep], votes[r][kHigh], votes[r][kLow]});
    if (votes[r][kSignal] != 0.0 && interrupted_on < 0) interrupted_on = static_cast<int>(r);
  }
  ReplicaCheck::compare(fingerprints);
  if (votes[0][kOutcome] != 0.0) {
    StopReason s;
    s.outcome = static_cast<TrainOutcome>(static_cast<int>(votes[0][kOutcome]) - 1);
    s.healthy = votes[0][kHealthy] != 0.0;
    s.message = group_.rank() == 0 && pending ? pending->message : plain_name(s.outcome);
    return s;
  }
  if (interrupted_on >= 0)
    return signalled(static_cast<int>(votes[interrupted_on][kSignal]), str(" on rank ", interrupted_on));
  return std::nullopt;
}

}  // namespace zs
