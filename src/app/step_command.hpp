// `zerosync step`: K training steps on one batch read from a safetensors file, results written
// to another, so any framework can check zerosync's step against its own.
#pragma once
#include <ostream>
#include <string>

namespace zs {

struct StepCommand {
  std::string config_path, batch_path, params_path, out_path;
  int steps = 1;
};

// Runs the command; progress and a summary go to `log`. Throws zs::Error on bad input.
void run_step_command(const StepCommand& cmd, std::ostream& log);

}  // namespace zs
