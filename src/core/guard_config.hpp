// The training guard's thresholds: plain host data, so a training config that holds them is read
// without the device code (and its readers can be fuzzed alone).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/error.hpp"

namespace zs {

// Constants fixed for a run, so they are passed by value; lr is not (schedules change it).
struct GuardConfig {
  double loss_clip = 1e6;            // halt_loss_clip when loss > loss_clip
  double collapse_multiplier = 100;  // halt_grad_collapse when grad_norm < lr * multiplier
  std::int64_t warmup_steps = 1000;  // ... and only from step index warmup_steps on
  std::int64_t post_every = 1;       // post the record to the mailbox after every N-th check

  // Throws zs::Error naming the first bad field, its value and what is expected.
  void validate() const {
    require(std::isfinite(loss_clip) && loss_clip > 0, "GuardConfig: loss_clip = ", loss_clip,
            " is invalid; expected a finite number > 0");
    require(std::isfinite(collapse_multiplier) && collapse_multiplier >= 0,
            "GuardConfig: collapse_multiplier = ", collapse_multiplier,
            " is invalid; expected a finite number >= 0 (0 turns the collapse check off)");
    require(warmup_steps >= 0, "GuardConfig: warmup_steps = ", warmup_steps,
            " is invalid; expected an integer >= 0");
    require(post_every >= 1, "GuardConfig: post_every = ", post_every,
            " is invalid; expected an integer >= 1");
  }
};

}  // namespace zs
