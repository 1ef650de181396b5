// `zerosync step`: K training steps on one batch read from a safetensors file, results written
// to another, so any framework can check zerosync's step against its own.
#pragma once
#include <ostream>
#include <string>

#include "backends/process_group.hpp"

namespace zs {

struct StepCommand {
  std::string config_path, batch_path, params_path, out_path;
  int steps = 1;
  // The ranks of the run (mpirun); nullptr: this process alone. Every rank reads the inputs and
  // trains on its equal share of the batch (rank r: samples [r·B/N, (r+1)·B/N)), averaging the
  // gradients every step; rank 0 writes the output, whose per-sample tensors are every rank's in
  // rank order, i.e. the batch's order.
  ProcessGroup* group = nullptr;
};

// Runs the command; progress and a summary go to `log` (rank 0's). Throws zs::Error on bad input.
void run_step_command(const StepCommand& cmd, std::ostream& log);

}  // namespace zs
