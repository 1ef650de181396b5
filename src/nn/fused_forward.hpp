// The forward of the C51 network as phases of one fused kernel: every trunk layer of every
// pass, then the heads' hidden layers, their output layers (biases added) and the dueling head
// with its log-softmax. It writes what ForwardPlan writes (value_out and branch_out with their
// biases, which ForwardPlan leaves to the dueling kernel), so everything that reads the
// activations reads them the same way.
#pragma once
#include <cstddef>
#include <vector>

#include "nn/fused_kernel.hpp"
#include "nn/network_plan.hpp"

namespace zs {

// A head set of its own on `features` ([acts.rows, trunk.back()]) with `params` (the ensemble's
// members on the online net's features of s): its hidden layers ride the heads' hidden phase, its
// output layers the output layers' phase, written without their biases, as ForwardPlan leaves them
// for the dueling launch (which the head set's owner runs).
struct HeadSetPass {
  const ParamBuffer* params = nullptr;
  const float* features = nullptr;
  HeadSet set;
  HeadActs acts;
};

// Appends the forward's phases for `passes` (all of the same row count; adjacent passes of one
// parameter buffer into adjacent rows of one Activations, reading adjacent input rows, share
// their products) and returns the dueling head the last phase runs. dueling_phase false: the
// phases end with the output layers, and the caller forms the head itself (the C51 step's
// loss, FusedOptions::fuse_head_loss); what is returned is then not run. `hook`, when given, is
// called in the last trunk layer's phase, the heads' hidden phase and their output phase
// (FusedPhase::trunk_last, heads_hidden, heads_out), after the products of each.
kernels::DuelingTiles<ExecSpace, kernels::DuelingTable<MemSpace>> add_forward_phases(
    FusedBuilder& b, const Network& net, const std::vector<ForwardPass>& passes, const FusedOptions& options,
    bool dueling_phase = true, const std::vector<HeadSetPass>& head_sets = {}, const FusedPhaseHook& hook = {});

// The dueling head's table for `passes` (one entry per run of adjacent passes), which
// add_forward_phases returns; for a caller whose forward runs elsewhere (FusedOptions::row_block_forward).
kernels::DuelingTiles<ExecSpace, kernels::DuelingTable<MemSpace>> dueling_tiles(
    const Network& net, const std::vector<ForwardPass>& passes, const FusedOptions& options);

// The team scratch of the forward's phases.
std::size_t forward_scratch_bytes(const Network& net, const FusedOptions& options);

class FusedForward {
 public:
  FusedForward(const Network& net, const std::vector<ForwardPass>& passes, const FusedOptions& options = {});
  void enqueue(const ExecSpace& exec) const { kernel_.enqueue(exec); }
  const FusedKernel& kernel() const { return kernel_; }

 private:
  FusedKernel kernel_;
};

}  // namespace zs
