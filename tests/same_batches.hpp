// Two trainers stepped side by side on the same fresh random batches, for tests that compare
// two ways of taking the same step (graph against direct launches, with and without a step
// phase) bit for bit.
#pragma once
#include <cstdint>

#include "nn/batch.hpp"
#include "train/trainer.hpp"

namespace zs::test {

// Before each of `steps` calls of step(a, b), both trainers get random_batch(config, B, seed + s)
// (B: a's batch size); then waits for both.
template <class Step>
void step_on_same_batches(Trainer& a, Trainer& b, int steps, std::uint64_t seed, Step step) {
  const Config& c = a.config();
  for (int s = 0; s < steps; ++s) {
    const auto hb = random_batch(c, a.batch().size, seed + static_cast<std::uint64_t>(s));
    upload(a.stream().exec(), c, hb, a.batch());
    upload(b.stream().exec(), c, hb, b.batch());
    step(a, b);
  }
  a.synchronize();
  b.synchronize();
}

}  // namespace zs::test
