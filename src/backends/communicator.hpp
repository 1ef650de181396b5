// Averages a device buffer over the ranks of a data-parallel run, inside the training step: the
// trainer makes one such call per step, over every loss term's gradient and loss at once
// (train/trainer.hpp). On the host backend it is MPI (ProcessGroup::all_sum, then a scale); on
// CUDA, NCCL's ncclAllReduce with ncclAvg on the step's stream, which a CUDA graph records like
// any kernel (NCCL's unique id travels through the ProcessGroup).
#pragma once
#include <memory>

#include "backends/backend.hpp"
#include "backends/process_group.hpp"
#include "backends/stream.hpp"

namespace zs {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Enqueues data ← the mean over the ranks of data, in place, on `stream`, after the work
  // already enqueued there; graph-safe (no allocation, no fence). Every rank must make the same
  // calls in the same order with the same sizes. Every rank gets the same bits.
  virtual void enqueue_mean(Stream& stream, const DeviceFloats& data) = 0;
  // Between steps, on the host: throws PeerFailure when the transport has seen a peer fail
  // (NCCL's asynchronous errors). The host backend's waits are bounded already: nothing to do.
  virtual void check() {}

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_ = 0, size_ = 1;
};

// This backend's communicator for `group`. With a group of one the mean is still taken (and
// changes nothing): the path that tests and benchmarks measure.
std::unique_ptr<Communicator> make_communicator(ProcessGroup& group, Stream& stream);

}  // namespace zs
