// The step benchmarks' networks, options and batch (step_bench.cpp, step_timeline_bench.cpp).
#pragma once
#include "train/trainer.hpp"

namespace zs::bench {

// The default network with a trunk of two layers of `width` and heads of `heads` units.
inline Config bench_config(int width, int heads) {
  Config c;
  c.trunk = {width, width};
  c.head_hidden = heads;
  return c;
}

// A fixed random batch (seed 42) in the trainer's batch buffers.
inline void fill_batch(Trainer& t) {
  upload(t.stream().exec(), t.config(), random_batch(t.config(), t.batch().size, 42), t.batch());
}

// The fused benchmarks' network at batch B (trunk 256, heads 128; from B = 4096 trunk 512,
// heads 256) and their options: the fused step at every batch, whichever the default picks.
inline Config fused_config_at(int B) { return B >= 4096 ? bench_config(512, 256) : bench_config(256, 128); }
inline TrainerOptions fused_options_at(int B) {
  TrainerOptions opt;
  opt.fused_step = true;
  opt.fused_max_batch = 1 << 30;
  opt.batch_size = B;
  return opt;
}

}  // namespace zs::bench
