// A second stream beside the step's stream, for work off the step's critical path: the weight
// gradients of the backward pass (nothing later in the pass reads them) and some output layers of
// the forward pass. At B = 256 every product is a few blocks on a 132-SM card, so two of them
// side by side cost about what one costs.
//
// fork() makes the side wait for everything already enqueued on the main stream; join() makes
// the main stream wait for everything enqueued on the side. Both are an event record and a
// stream wait: no host sync, and inside a stream capture they become the edges of parallel
// branches of the one graph (a capture that ends with the side not joined fails). On the host
// the side is the main instance itself, in order, so fork and join have nothing to do.
#pragma once
#include <memory>

#include "backends/gemm.hpp"
#include "backends/stream.hpp"

namespace zs {

class SideLane {
 public:
  // `main` must outlive the lane; products on the side run in `precision`.
  SideLane(Stream& main, Precision precision);
  ~SideLane();
  SideLane(const SideLane&) = delete;
  SideLane& operator=(const SideLane&) = delete;

  const ExecSpace& exec() const { return side_.exec(); }
  // The side's stream, for an owner of work that enqueues on a Stream (an Actor).
  Stream& stream() { return side_; }
  // The side's own cuBLAS handle and workspace: two products in flight must not share one.
  const Gemm& gemm() const { return gemm_; }
  void fork() const;
  void join() const;

 private:
  Stream& main_;
  Stream side_;
  Gemm gemm_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
