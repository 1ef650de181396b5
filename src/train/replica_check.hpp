// The parameter check of a data-parallel run. Every rank applies the same averaged update, so the
// ranks' parameters must stay the same bits without ever being broadcast; this checks that they
// do. Every `every` training steps a device fingerprint of the online and target parameters
// (kernels/param_checksum.hpp) goes to a mailbox; the host reads it lagged, never waiting, and
// compare() — a collective, between steps — brings every rank's newest record together and
// throws a PeerFailure naming the ranks whose parameters differ at the same step.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/graph.hpp"
#include "backends/mailbox.hpp"
#include "backends/process_group.hpp"
#include "kernels/param_checksum.hpp"
#include "train/trainer.hpp"

namespace zs {

class ReplicaCheck {
 public:
  // Throws zs::Error unless every >= 1.
  ReplicaCheck(Trainer& trainer, ProcessGroup& group, std::int64_t every);
  ReplicaCheck(const ReplicaCheck&) = delete;
  ReplicaCheck& operator=(const ReplicaCheck&) = delete;

  // Call after each Trainer::step(): enqueues the fingerprint when the trainer's step count is a
  // multiple of `every`. Never waits.
  void after_step();
  // Enqueues a fingerprint of the parameters as they are after the work enqueued so far.
  void enqueue();
  // This rank's newest record to reach the host (step −1 before the first). Never waits.
  kernels::ParamChecksum newest() const;

  // Every rank's newest record through the group, then compare(records). A collective.
  std::int64_t compare();
  // Records taken after the same step must be equal: throws PeerFailure naming the ranks that
  // differ from the lowest rank at their step. Returns the latest step at which two or more
  // ranks were compared, or −1 when no two records share a step.
  static std::int64_t compare(const std::vector<kernels::ParamChecksum>& by_rank);

 private:
  Trainer& trainer_;
  ProcessGroup& group_;
  std::int64_t every_;
  DeviceScalar<std::uint64_t> sum_;
  RecordBox<kernels::ParamChecksum> box_;
  Graph graph_;
};

}  // namespace zs
