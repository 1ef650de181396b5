// The training loop's throughput: one iteration = every env acts and steps once, the transitions
// go to replay, and one training step runs (sample → step → priority update), past
// learning_starts. Reported per iteration, with env steps/s and training steps/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>

#include "bench_util.hpp"
#include "rl/train_loop.hpp"

namespace {

// One loop iteration with the actors' forward as `options` say. Args: env (0 cartpole, 1 market),
// envs, train (1: an update every iteration; 0: acting only), then the benchmark's own.
void train_iteration(benchmark::State& state, const zs::LoopOptions& options) {
  const bool market = state.range(0) == 1;
  zs::TrainConfig c = zs::TrainConfig::defaults_for(market ? "market" : "cartpole");
  c.envs = static_cast<int>(state.range(1));
  c.learning_starts = state.range(2) ? 0 : (std::int64_t{1} << 50);
  c.replay_capacity = std::max(c.replay_capacity, 4 * c.envs * (c.network.n_step + 1));
  c.eval_every = 0;
  c.stop_when_solved = false;
  c.steps = std::int64_t{1} << 50;  // the config accepts at most 2^50
  zs::TrainLoop loop(c, nullptr, options);
  if (options.fused_acting && c.envs <= options.fused_acting_max_rows && !loop.actor().fused()) {
    state.SkipWithError(("the fused forward is off: " + loop.actor().fused_off_reason()).c_str());
    return;
  }
  loop.iterate();  // the actor makes its plan (and keeps the row blocks or not) on its first call
  if (options.row_block_acting != 0 && loop.actor().row_blocks() == 0) {
    state.SkipWithError(("the row blocks are off: " + loop.actor().row_block_off_reason()).c_str());
    return;
  }
  // Enough transitions that a batch draws from a filled buffer.
  while (loop.env_steps() < 4 * c.batch_size) loop.iterate();
  zs::bench::time_on_stream(state, loop.trainer().stream(), [&] { loop.iterate(); }, 20);
  const double us = state.counters["us_per_call"];
  state.counters["env_steps_per_s"] = c.envs * 1e6 / us;
  state.counters["train_steps_per_s"] = state.range(2) ? 1e6 / us : 0.0;
  state.SetLabel(market ? "market" : "cartpole");
}
// fact (1: the actors on the fused forward, LoopOptions::fused_acting; 0: the launch plans).
void BM_TrainIteration(benchmark::State& state) {
  zs::LoopOptions options;
  options.fused_acting = state.range(3) != 0;
  options.row_block_acting = 0;
  options.overlap_collect = zs::CollectOverlap::off;
  train_iteration(state, options);
}

// The collect as two launches: the row-block forward, then one team for the rest
// (LoopOptions::row_block_acting); rows: 16 or 32 a block.
void BM_TrainIterationRowBlocks(benchmark::State& state) {
  zs::LoopOptions options;
  options.fused_acting = false;
  options.overlap_collect = zs::CollectOverlap::off;
  options.row_block_acting = static_cast<int>(state.range(3));
  options.row_block_acting_max_rows = static_cast<int>(state.range(1));
  train_iteration(state, options);
}
BENCHMARK(BM_TrainIterationRowBlocks)
    ->ArgNames({"market", "envs", "train", "rows"})
    ->Args({0, 8, 1, 16})
    ->Args({0, 8, 0, 16})
    ->Args({0, 8, 1, 32})
    ->Args({1, 64, 1, 16})
    ->Args({1, 64, 0, 16})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The collect beside the training step (LoopOptions::overlap_collect); rows: the actors on row
// blocks of 16 (16) or on the fused forward where it runs, else the launch plans (0); path: the
// launches around the step (LoopOptions::replay_beside and one_launch_head): 0 the schedules, the
// copy, the draw and the gather each a launch, the insert and the priority update after the join
// (the twenty-seventh session's loop); 1 the insert beside the step; 2 that and the head as one
// launch; 3 the insert and the priority update beside, the head as one launch (the defaults);
// 4 the head alone; 5 the insert and the priority update beside, the head as four launches.
void BM_TrainIterationOverlap(benchmark::State& state) {
  zs::LoopOptions options;
  options.overlap_collect = zs::CollectOverlap::on;
  options.row_block_acting = options.row_block_acting_beside = static_cast<int>(state.range(3));
  options.row_block_acting_max_rows = static_cast<int>(state.range(1));
  const std::int64_t path = state.range(4);
  using B = zs::ReplayBeside;
  options.replay_beside = path == 1 || path == 2 ? B::insert : path == 3 || path == 5 ? B::insert_and_priorities : B::none;
  options.one_launch_head = path >= 2 && path <= 4;
  train_iteration(state, options);
}
BENCHMARK(BM_TrainIterationOverlap)
    ->ArgNames({"market", "envs", "train", "rows", "path"})
    ->Args({0, 8, 1, 16, 0})
    ->Args({0, 8, 1, 16, 1})
    ->Args({0, 8, 1, 16, 2})
    ->Args({0, 8, 1, 16, 3})
    ->Args({0, 8, 1, 16, 4})
    ->Args({0, 8, 1, 16, 5})
    ->Args({0, 8, 1, 0, 0})
    ->Args({0, 8, 1, 0, 1})
    ->Args({0, 8, 1, 0, 2})
    ->Args({0, 8, 1, 0, 3})
    ->Args({0, 8, 1, 0, 4})
    ->Args({0, 8, 1, 0, 5})
    ->Args({0, 256, 1, 0, 0})
    ->Args({0, 256, 1, 0, 3})
    ->Args({1, 64, 1, 0, 0})
    ->Args({1, 64, 1, 0, 3})
    ->Args({1, 4096, 1, 0, 3})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_TrainIteration)
    ->ArgNames({"market", "envs", "train", "fact"})
    ->Args({0, 8, 1, 0})
    ->Args({0, 8, 0, 0})
    ->Args({0, 256, 1, 0})
    ->Args({1, 64, 1, 0})
    ->Args({1, 64, 0, 0})
    ->Args({1, 4096, 1, 0})
    ->Args({0, 8, 1, 1})
    ->Args({0, 8, 0, 1})
    ->Args({0, 256, 1, 1})
    ->Args({1, 64, 1, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
