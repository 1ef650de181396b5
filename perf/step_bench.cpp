// µs per training step: graph replay and direct launch over a grid of batch sizes and trunk
// widths, plus the per-phase breakdown at the reference config (docs/performance.md).
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "bench_util.hpp"
#include "step_setup.hpp"
#include "nn/fused_kernel.hpp"
#include "train/trainer.hpp"

namespace {

using zs::bench::bench_config;
using zs::bench::fill_batch;
using zs::bench::fused_config_at;
using zs::bench::fused_options_at;

// bench_config with, when `aux` is not 0, every auxiliary on (IQN, a 2-member ensemble, CQL).
zs::Config aux_config(int width, int heads, long aux) {
  zs::Config c = bench_config(width, heads);
  if (aux != 0) {
    c.iqn.on = c.cql.on = true;
    c.ensemble.k = 2;
  }
  return c;
}

// µs per step of a trainer made from c and opt on a random batch, `calls` steps per timing, and
// its graph's node count (and, with programmatic launch, the edges the capture made programmatic).
void time_steps(benchmark::State& state, const zs::Config& c, const zs::TrainerOptions& opt, int calls) {
  zs::Trainer t(c, opt);
  fill_batch(t);
  zs::bench::time_on_stream(state, t.stream(), [&] { t.step(); }, calls);
  state.counters["graph_nodes"] = static_cast<double>(t.graph_nodes());
  state.counters["fused"] = t.fused() ? 1 : 0;
  if (opt.programmatic_launch) state.counters["programmatic_edges"] = static_cast<double>(t.graph_programmatic_edges());
}

// time_steps for a trainer that must take the fused step (opt.fused_step), 20 steps per timing,
// with the fused kernel's launches per step; an error, not a timing, when the trainer declines it.
void time_fused_steps(benchmark::State& state, const zs::Config& c, const zs::TrainerOptions& opt) {
  zs::Trainer t(c, opt);
  if (!t.fused()) {
    state.SkipWithError(("the fused step is off: " + t.fused_off_reason()).c_str());
    return;
  }
  fill_batch(t);
  zs::bench::time_on_stream(state, t.stream(), [&] { t.step(); }, 20);
  state.counters["graph_nodes"] = static_cast<double>(t.graph_nodes());
  state.counters["fused_launches"] = t.fused_kernel()->launches();
  state.counters["norm_in_step"] = t.norm_in_step() ? 1 : 0;
  // Each phase's tiles: what a phase's waves are made of (a wave is 4 teams a multiprocessor).
  const zs::FusedKernel& k = *t.fused_kernel();
  std::string tiles = "tiles";
  for (int p = 0; p < k.phases(); ++p) tiles += (p == 0 ? " " : "/") + std::to_string(k.tiles(p));
  state.SetLabel(tiles);
}

// Args: batch, trunk width, head width, graph (1) or direct (0).
void BM_Step(benchmark::State& state) {
  zs::TrainerOptions opt;
  opt.batch_size = static_cast<int>(state.range(0));
  opt.use_graph = state.range(3) != 0;
  time_steps(state, bench_config(static_cast<int>(state.range(1)), static_cast<int>(state.range(2))), opt, 20);
}
BENCHMARK(BM_Step)
    ->ArgNames({"B", "width", "heads", "graph"})
    ->ArgsProduct({{64, 256, 1024, 4096}, {256, 512, 1024}, {128}, {1, 0}})
    ->Args({4096, 512, 256, 1})
    ->Args({4096, 512, 256, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fused step (a launch per phase) with the dueling head's and the loss's own kernels on teams
// of threads × lanes (FusedOptions::dueling_threads, dueling_lanes, loss_threads, loss_lanes) and
// dueling tiles of drows rows. Args: dueling threads, lanes and rows, loss threads and lanes,
// batch (trunk 256, heads 128).
void BM_StepFusedSmallTeams(benchmark::State& state) {
  zs::TrainerOptions opt = fused_options_at(static_cast<int>(state.range(5)));
  opt.fused.dueling_threads = static_cast<int>(state.range(0));
  opt.fused.dueling_lanes = static_cast<int>(state.range(1));
  opt.fused.dueling_rows = static_cast<int>(state.range(2));
  opt.fused.loss_threads = static_cast<int>(state.range(3));
  opt.fused.loss_lanes = static_cast<int>(state.range(4));
  time_fused_steps(state, bench_config(256, 128), opt);
}
BENCHMARK(BM_StepFusedSmallTeams)
    ->ArgNames({"dthreads", "dlanes", "drows", "lthreads", "llanes", "B"})
    ->Args({4, 32, 1, 4, 32, 256})
    ->Args({8, 16, 1, 4, 32, 256})
    ->Args({16, 8, 1, 4, 32, 256})
    ->Args({32, 4, 1, 4, 32, 256})
    ->Args({16, 4, 1, 4, 32, 256})
    ->Args({32, 8, 2, 4, 32, 256})
    ->Args({32, 4, 3, 4, 32, 256})
    ->Args({64, 4, 4, 4, 32, 256})
    ->Args({4, 32, 1, 8, 16, 256})
    ->Args({4, 32, 1, 16, 8, 256})
    ->Args({4, 32, 1, 32, 4, 256})
    ->Args({4, 32, 1, 8, 8, 256})
    ->Args({4, 32, 1, 2, 32, 256})
    ->Args({8, 16, 1, 8, 16, 256})
    ->Args({16, 8, 1, 16, 8, 256})
    ->Args({16, 8, 1, 8, 16, 256})
    ->Args({8, 16, 1, 16, 8, 256})
    ->Args({4, 32, 1, 4, 32, 64})
    ->Args({16, 8, 1, 8, 16, 64})
    ->Args({16, 8, 1, 16, 8, 64})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fused step (a launch per phase) with one FusedOptions switch set by `on` from arg 0, the
// loss's teams of arg 1 threads × arg 2 lanes, at batch arg 3 (trunk 256, heads 128, or with
// B = 4096 trunk 512, heads 256).
void time_fused_switch(benchmark::State& state, void (*set)(zs::FusedOptions&, bool on)) {
  const int B = static_cast<int>(state.range(3));
  zs::TrainerOptions opt = fused_options_at(B);
  set(opt.fused, state.range(0) != 0);
  opt.fused.loss_threads = static_cast<int>(state.range(1));
  opt.fused.loss_lanes = static_cast<int>(state.range(2));
  time_fused_steps(state, fused_config_at(B), opt);
}

// The fused step (a launch per phase) with the dueling head inside the loss's phase (fuse 1:
// FusedOptions::fuse_head_loss) or as a phase of its own (0, on 16 × 8 teams), the loss's teams
// of threads × lanes. Args: fuse, loss threads and lanes, batch (trunk 256, heads 128, or with
// B = 4096 trunk 512, heads 256).
void BM_StepFusedHeadLoss(benchmark::State& state) {
  time_fused_switch(state, [](zs::FusedOptions& o, bool on) { o.fuse_head_loss = on; });
}
BENCHMARK(BM_StepFusedHeadLoss)
    ->ArgNames({"fuse", "lthreads", "llanes", "B"})
    ->Args({0, 4, 32, 256})
    ->Args({1, 4, 32, 256})
    ->Args({1, 2, 32, 256})
    ->Args({1, 8, 16, 256})
    ->Args({1, 16, 8, 256})
    ->Args({1, 32, 4, 256})
    ->Args({1, 8, 32, 256})
    ->Args({1, 16, 16, 256})
    ->Args({1, 1, 32, 256})
    ->Args({1, 2, 16, 256})
    ->Args({1, 4, 8, 256})
    ->Args({1, 1, 32, 64})
    ->Args({1, 1, 32, 1024})
    ->Args({0, 4, 32, 64})
    ->Args({1, 4, 32, 64})
    ->Args({1, 16, 8, 64})
    ->Args({0, 4, 32, 1024})
    ->Args({1, 4, 32, 1024})
    ->Args({1, 16, 8, 1024})
    ->Args({0, 4, 32, 4096})
    ->Args({1, 4, 32, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fused step (a launch per phase) with the gradient's norm, the guard and Adam's prepare in
// its last backward phase (norm 1: FusedOptions::norm_in_backward) or in the norms' launch of
// their own (0), the loss's teams of threads × lanes. Args: norm, loss threads and lanes, batch
// (trunk 256, heads 128, or with B = 4096 trunk 512, heads 256).
void BM_StepFusedNorm(benchmark::State& state) {
  time_fused_switch(state, [](zs::FusedOptions& o, bool on) { o.norm_in_backward = on; });
}
BENCHMARK(BM_StepFusedNorm)
    ->ArgNames({"norm", "lthreads", "llanes", "B"})
    ->ArgsProduct({{0, 1}, {4}, {32}, {64, 256, 1024, 4096}})
    ->Args({0, 16, 8, 256})
    ->Args({1, 16, 8, 256})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fused step (a launch per phase) with its product tiles reading their tables before they wait
// for the launch before theirs (1: FusedOptions::tables_before_wait) or after (0), the loss's
// teams of threads × lanes. Args: early, loss threads and lanes, batch.
void BM_StepFusedEarlyTables(benchmark::State& state) {
  time_fused_switch(state, [](zs::FusedOptions& o, bool on) { o.tables_before_wait = on; });
}
BENCHMARK(BM_StepFusedEarlyTables)
    ->ArgNames({"early", "lthreads", "llanes", "B"})
    ->ArgsProduct({{0, 1}, {16}, {8}, {64, 256, 1024, 4096}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fused step (a launch per phase) with its products' tiles of 32 × cols in `stages` stages
// (FusedOptions::tile_stages): how much of a tile's chain is its chunks waiting on their copies.
// Args: stages, cols, batch (trunk 256, heads 128, or with B = 4096 trunk 512, heads 256).
void BM_StepFusedStages(benchmark::State& state) {
  const int B = static_cast<int>(state.range(2));
  zs::TrainerOptions opt = fused_options_at(B);
  opt.fused.tile_rows = 32;
  opt.fused.tile_stages = static_cast<int>(state.range(0));
  opt.fused.tile_cols = static_cast<int>(state.range(1));
  time_fused_steps(state, fused_config_at(B), opt);
}
BENCHMARK(BM_StepFusedStages)
    ->ArgNames({"stages", "cols", "B"})
    ->ArgsProduct({{3, 4}, {32, 16}, {64, 256, 1024}})
    ->Args({3, 32, 4096})
    ->Args({4, 32, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The launch plans' graph-replayed step with the side lane (1, the default) and without (0): what
// running the weight gradients beside the input gradients buys. Args: side, batch, trunk width, head width,
// auxiliaries (7: IQN, ensemble and CQL on; 0: plain).
void BM_StepSideLane(benchmark::State& state) {
  const zs::Config c = aux_config(static_cast<int>(state.range(2)), static_cast<int>(state.range(3)), state.range(4));
  zs::TrainerOptions opt;
  opt.fused_step = false;  // the launch plans' option
  opt.side_lane = state.range(0) != 0;
  opt.batch_size = static_cast<int>(state.range(1));
  time_steps(state, c, opt, 20);
}
BENCHMARK(BM_StepSideLane)
    ->ArgNames({"side", "B", "width", "heads", "aux"})
    ->ArgsProduct({{0, 1}, {256}, {256}, {128}, {0, 7}})
    ->Args({0, 4096, 512, 256, 0})
    ->Args({1, 4096, 512, 256, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The graph-replayed step with each trunk layer's bias and ReLU inside its products (1: cuBLASLt
// epilogues on CUDA) and as a pass of their own (0). Args: fused, batch, trunk width, head width.
void BM_StepFusedBias(benchmark::State& state) {
  const zs::Config c = bench_config(static_cast<int>(state.range(2)), static_cast<int>(state.range(3)));
  zs::TrainerOptions opt;
  opt.fused_step = false;  // the launch plans' option
  opt.fused_bias = state.range(0) != 0;
  opt.batch_size = static_cast<int>(state.range(1));
  time_steps(state, c, opt, 20);
}
BENCHMARK(BM_StepFusedBias)
    ->ArgNames({"fused", "B", "width", "heads"})
    ->Args({0, 256, 256, 128})
    ->Args({1, 256, 256, 128})
    ->Args({0, 4096, 512, 256})
    ->Args({1, 4096, 512, 256})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The graph-replayed step of the launch plans with options the H200 has yet to judge, one bit
// each: 1 the heads' hidden layers' bias and ReLU in their products (heads_bias), 4 the output
// layers computing rows padded to 16 bytes from padded weights (padded_outputs), 8 the backward's
// heads as one stacked layer (stacked_heads), 16 the forward's too (stacked_forward), 32 the C51
// loss under a launch bound of 10 teams an SM (c51_min_blocks). (2, the heads' shares of ∂loss/∂features
// added by their products one after another, lost and is gone: docs/performance.md.) The trunk's bias
// is in its products in every case (fused_bias, the CUDA default). Args: options, batch, trunk
// width, head width.
void BM_StepPlanOptions(benchmark::State& state) {
  const zs::Config c = bench_config(static_cast<int>(state.range(2)), static_cast<int>(state.range(3)));
  zs::TrainerOptions opt;
  opt.fused_step = false;
  opt.fused_bias = true;
  opt.heads_bias = (state.range(0) & 1) != 0;
  opt.padded_outputs = (state.range(0) & 4) != 0;
  opt.stacked_heads = (state.range(0) & 8) != 0;
  opt.stacked_forward = (state.range(0) & 16) != 0;
  opt.c51_min_blocks = (state.range(0) & 32) != 0 ? 10 : 0;
  opt.wide_heads_from = 1 << 30;
  opt.batch_size = static_cast<int>(state.range(1));
  time_steps(state, c, opt, 20);
}
BENCHMARK(BM_StepPlanOptions)
    ->ArgNames({"options", "B", "width", "heads"})
    ->ArgsProduct({{0, 1, 4, 5, 8, 12, 13, 28, 29, 45, 61}, {1024, 2048, 4096}, {512}, {256}})
    ->ArgsProduct({{0, 1, 4, 8, 13}, {512}, {256}, {128}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The graph-replayed step with the guard's and the terms' mailbox posts beside the update (1) or
// between the gradient norm and the update (0), and with posts so rare that none is timed (2:
// what the posts cost at all). Args: posts, batch, trunk width, head width, auxiliaries (7 or 0).
void BM_StepPostsBeside(benchmark::State& state) {
  const zs::Config c = aux_config(static_cast<int>(state.range(2)), static_cast<int>(state.range(3)), state.range(4));
  zs::TrainerOptions opt;
  opt.posts_beside = state.range(0) == 1;
  if (state.range(0) == 2) opt.guard.post_every = std::int64_t{1} << 40;
  opt.batch_size = static_cast<int>(state.range(1));
  time_steps(state, c, opt, 20);
}
BENCHMARK(BM_StepPostsBeside)
    ->ArgNames({"posts", "B", "width", "heads", "aux"})
    ->ArgsProduct({{0, 1, 2}, {256}, {256}, {128}, {0, 7}})
    ->Args({0, 4096, 512, 256, 0})
    ->Args({1, 4096, 512, 256, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The graph-replayed step with programmatic dependent launch (1) and without (0): each of our
// kernels that follows a kernel starts while it drains. Args: programmatic, fused step (0: the
// launch plans; 1: the fused step, a launch per phase, at any batch), batch, trunk width, head
// width, auxiliaries (7 or 0). Counter: the edges the capture made programmatic.
void BM_StepProgrammatic(benchmark::State& state) {
  const zs::Config c = aux_config(static_cast<int>(state.range(3)), static_cast<int>(state.range(4)), state.range(5));
  zs::TrainerOptions opt;
  opt.programmatic_launch = state.range(0) != 0;
  opt.fused_step = state.range(1) != 0;
  opt.fused_max_batch = 1 << 30;
  opt.batch_size = static_cast<int>(state.range(2));
  time_steps(state, c, opt, 20);
}
BENCHMARK(BM_StepProgrammatic)
    ->ArgNames({"programmatic", "fused", "B", "width", "heads", "aux"})
    ->ArgsProduct({{0, 1}, {0, 1}, {256}, {256}, {128}, {0, 7}})
    ->ArgsProduct({{0, 1}, {1}, {64, 512, 1024}, {256}, {128}, {0}})
    ->Args({0, 0, 4096, 512, 256, 0})
    ->Args({1, 0, 4096, 512, 256, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One phase of the direct-launch step, spectral norm on: arg 0 is the phase, arg 1 picks the
// reference config (0: B = 256) or the large one (1: B = 4096, trunk 512 × 512, heads 256).
void BM_StepPhase(benchmark::State& state) {
  zs::Config c;
  c.spectral_norm = 1.f;
  zs::TrainerOptions opt;
  opt.fused_step = false;  // the launch plans' phases (fused, the forward is inside the loss terms' phase)
  if (state.range(1) == 1) {
    opt.batch_size = 4096;
    c.trunk = {512, 512};
    c.head_hidden = 256;
  }
  zs::Trainer t(c, opt);
  fill_batch(t);
  t.step_direct();
  const auto phase = zs::Trainer::kPhases[state.range(0)];
  state.SetLabel(std::string(zs::Trainer::phase_name(phase)) + (state.range(1) == 1 ? " B=4096/512/256" : " B=256"));
  zs::bench::time_on_stream(state, t.stream(), [&] { t.enqueue_phase(phase); }, 20);
}
BENCHMARK(BM_StepPhase)
    ->ArgsProduct({benchmark::CreateDenseRange(
                       0, static_cast<int>(sizeof(zs::Trainer::kPhases) / sizeof(zs::Trainer::kPhases[0])) - 1, 1),
                   {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The reference config with the auxiliaries of `mask`: 1 = IQN (n_tau 8, embed 64), 2 = the
// ensemble (k = 2), 4 = CQL; 0 none.
zs::Config with_auxiliaries(int mask) {
  zs::Config c;
  c.iqn.on = (mask & 1) != 0;
  c.ensemble.k = (mask & 2) ? 2 : 0;
  c.cql.on = (mask & 4) != 0;
  return c;
}

// The graph-replayed step at the reference config (B = 256) with auxiliaries: arg is
// with_auxiliaries' mask; 0 is the plain step.
void BM_StepAux(benchmark::State& state) {
  const int mask = static_cast<int>(state.range(0));
  const zs::Config c = with_auxiliaries(mask);
  state.SetLabel(mask == 0 ? "plain" : mask == 1 ? "iqn" : mask == 2 ? "ensemble" : mask == 4 ? "cql" : "all");
  time_steps(state, c, zs::TrainerOptions{}, 10);
}
BENCHMARK(BM_StepAux)->Arg(0)->Arg(1)->Arg(2)->Arg(4)->Arg(7)->UseManualTime()->Unit(benchmark::kMicrosecond);

// BM_StepAux's step with the auxiliaries riding the fused kernel's phases: ride 2
// (FusedOptions::auxiliaries_ride with the thirty-first session's shape: IQN's own layers products
// of the forward's and the backward's phases, riders_forward); 1 as 2 with IQN's forward in the
// riders' launch (cuBLAS; the thirtieth session's default); 3 every rider but IQN; 4 as 2 with every
// rider's loss on the main stream (losses_beside off; on by default since the thirty-first
// session); 5 as 2 with IQN's weight gradients in the backward's last phase, 6 every rider's
// (rider_weight_grads_last 1, 2); 8 as 2 with the ensemble's spread beside the backward
// (monitors_beside); 10 as 2 with 5's and 8's options (the thirty-third session's winners); 11 as 2
// with the budgeted sum formed in Adam's pass (TrainerOptions::budget_in_adam); 12 as 10 with 11's;
// 13 as 10 with IQN's modulation backward in the ∂h product's epilogue (rider_modulation_in_product:
// the default since the thirty-fourth session); 0 none (each term's own launch plans after the
// kernel). Rides 7, 9, 14 and 15 measured shapes that lost and are gone (docs/performance.md);
// their numbers are not reused. aux: BM_StepAux's mask. The label gives each phase's tiles.
void BM_StepAuxRide(benchmark::State& state) {
  const zs::Config c = with_auxiliaries(static_cast<int>(state.range(0)));
  zs::TrainerOptions opt;
  opt.fused_step = true;
  const int ride = static_cast<int>(state.range(1));
  opt.fused.auxiliaries_ride = ride != 0;
  opt.fused.riders_forward = ride != 1;
  if (ride == 3) opt.fused.ride_except = {"iqn"};
  opt.fused.losses_beside = ride != 4;
  opt.fused.rider_weight_grads_last = ride == 5 || ride == 6 ? ride - 4 : ride == 10 || ride >= 12 ? 1 : 0;
  opt.fused.monitors_beside = ride == 8 || ride == 10 || ride >= 12;
  opt.fused.rider_modulation_in_product = ride == 13;
  opt.budget_in_adam = ride == 11 || ride == 12;
  time_fused_steps(state, c, opt);
}
BENCHMARK(BM_StepAuxRide)
    ->ArgNames({"aux", "ride"})
    ->ArgsProduct({{1, 2, 4, 7}, {0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The step with the C51 loss's projection gathering from every source atom (0) or only from
// those near each target atom (1: TrainerOptions::narrow_gather; the same bits): the fused step
// at B = 256 (aux: BM_StepAux's mask) and the launch plans at B = 4096 / 512 / 256. Args: aux,
// batch, gather.
void BM_StepNarrowGather(benchmark::State& state) {
  const int B = static_cast<int>(state.range(1));
  zs::Config c = B > 256 ? bench_config(512, 256) : with_auxiliaries(static_cast<int>(state.range(0)));
  zs::TrainerOptions opt;
  opt.batch_size = B;
  opt.narrow_gather = state.range(2) != 0;
  time_steps(state, c, opt, B > 256 ? 20 : 10);
}
BENCHMARK(BM_StepNarrowGather)
    ->ArgNames({"aux", "B", "gather"})
    ->ArgsProduct({{0, 7}, {256}, {0, 1}})
    ->ArgsProduct({{0}, {4096}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The graph-replayed step without (reduce 0) and with (1) the all-reduce of the terms' gradients
// and losses, at B = 256 per rank and the reference net (aux 7: every auxiliary on) and at the
// large config (B = 4096 per rank, trunk 512, heads 256). Alone, the all-reduce runs over a group
// of one (NCCL with one rank on CUDA; nothing on the host); under
// `mpiexec -n N zerosync_bench --benchmark_filter=BM_StepAllReduce` over the N ranks
// (scripts/scale_run.sh). A fixed iteration count keeps the ranks' all-reduces in step.
void BM_StepAllReduce(benchmark::State& state) {
  const bool aux = state.range(0) != 0, reduce = state.range(1) != 0;
  zs::Config c = bench_config(static_cast<int>(state.range(3)), static_cast<int>(state.range(4)));
  c.iqn.on = c.cql.on = aux;
  c.ensemble.k = aux ? 2 : 0;
  zs::TrainerOptions opt;
  opt.batch_size = static_cast<int>(state.range(2));
  if (reduce) {
    opt.group = zs::bench::group();
    opt.always_reduce = true;
  }
  zs::Trainer t(c, opt);
  fill_batch(t);
  state.SetLabel(std::string(aux ? "all auxiliaries" : "plain") + (reduce ? ", all-reduce over " : ", alone") +
                 (reduce ? std::to_string(t.ranks()) + " rank(s)" : std::string()));
  zs::bench::time_on_stream(state, t.stream(), [&] { t.step(); }, 10);
  state.counters["ranks"] = t.ranks();
  state.counters["all_reduce_bytes"] = static_cast<double>(t.term_buffers().all().extent(0) * sizeof(float));
}
BENCHMARK(BM_StepAllReduce)
    ->ArgNames({"aux", "reduce", "B", "width", "heads"})
    ->ArgsProduct({{0, 7}, {0, 1}, {256}, {256}, {128}})
    ->Args({0, 0, 4096, 512, 256})
    ->Args({0, 1, 4096, 512, 256})
    ->Iterations(50)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The graph-replayed step with the C51 term as one fused kernel (losses/c51_fused.hpp) against
// the launch plans. Args: fused (0: plans; 1: a launch per phase, each of a kernel compiled for
// its kinds of tile; 2: one persistent launch; 3: a launch per phase, all of the one kernel),
// teams per multiprocessor of the persistent launch, split-K's chunks per split (0: no split;
// FusedOptions::split_chunks), batch, trunk width, head width, auxiliaries (7 or 0), the
// products' tile rows and columns (FusedOptions::tile_rows, tile_cols). Counters:
// graph nodes, the fused kernel's launches, phases and split products.
void BM_StepFused(benchmark::State& state) {
  const zs::Config c = aux_config(static_cast<int>(state.range(4)), static_cast<int>(state.range(5)), state.range(6));
  zs::TrainerOptions opt;
  opt.fused_step = state.range(0) != 0;
  opt.fused_max_batch = 1 << 30;  // measured at every batch, whichever the default picks
  opt.fused.mode = state.range(0) == 2 ? zs::PhasedMode::persistent : zs::PhasedMode::launches;
  opt.fused.kernel_per_kind = state.range(0) != 3;
  opt.fused.teams_per_sm = static_cast<int>(state.range(1));
  opt.fused.split_chunks = static_cast<int>(state.range(2));
  opt.fused.tile_rows = static_cast<int>(state.range(7));
  opt.fused.tile_cols = static_cast<int>(state.range(8));
  opt.batch_size = static_cast<int>(state.range(3));
  zs::Trainer t(c, opt);
  if (opt.fused_step && !t.fused()) {
    state.SkipWithError(("the fused step is off: " + t.fused_off_reason()).c_str());
    return;
  }
  fill_batch(t);
  zs::bench::time_on_stream(state, t.stream(), [&] { t.step(); }, 20);
  state.counters["graph_nodes"] = static_cast<double>(t.graph_nodes());
  if (t.fused()) {
    state.counters["fused_launches"] = t.fused_kernel()->launches();
    state.counters["fused_phases"] = t.fused_kernel()->phases();
    state.counters["fused_teams"] = t.fused_kernel()->teams();
    state.counters["split_jobs"] = t.fused_kernel()->split_jobs();
  }
}
BENCHMARK(BM_StepFused)
    ->ArgNames({"fused", "tpsm", "split", "B", "width", "heads", "aux", "rows", "cols"})
    ->Args({0, 1, 0, 256, 256, 128, 0, 64, 32})
    ->Args({1, 1, 0, 256, 256, 128, 0, 64, 32})
    ->Args({3, 1, 0, 256, 256, 128, 0, 64, 32})
    ->Args({1, 1, 1, 256, 256, 128, 0, 64, 32})
    ->Args({1, 1, 2, 256, 256, 128, 0, 64, 32})
    ->Args({1, 1, 4, 256, 256, 128, 0, 64, 32})
    ->Args({1, 1, 8, 256, 256, 128, 0, 64, 32})
    ->Args({2, 2, 0, 256, 256, 128, 0, 64, 32})
    ->Args({2, 2, 4, 256, 256, 128, 0, 64, 32})
    ->Args({0, 1, 0, 256, 256, 128, 7, 64, 32})
    ->Args({1, 1, 4, 256, 256, 128, 7, 64, 32})
    ->Args({0, 1, 0, 4096, 512, 256, 0, 64, 32})
    ->Args({1, 1, 0, 4096, 512, 256, 0, 64, 32})
    ->Args({3, 1, 0, 4096, 512, 256, 0, 64, 32})
    ->Args({1, 1, 2, 4096, 512, 256, 0, 64, 32})
    ->Args({1, 1, 4, 4096, 512, 256, 0, 64, 32})
    ->Args({2, 2, 2, 4096, 512, 256, 0, 64, 32})
    ->Args({1, 1, 0, 256, 256, 128, 0, 32, 32})
    ->Args({3, 1, 0, 256, 256, 128, 0, 32, 32})
    ->Args({1, 1, 4, 256, 256, 128, 0, 32, 32})
    ->Args({1, 1, 8, 256, 256, 128, 0, 32, 32})
    ->Args({2, 2, 0, 256, 256, 128, 0, 32, 32})
    ->Args({1, 1, 4, 256, 256, 128, 7, 32, 32})
    ->Args({1, 1, 0, 4096, 512, 256, 0, 32, 32})
    ->Args({1, 1, 2, 4096, 512, 256, 0, 32, 32})
    ->Args({0, 1, 0, 512, 256, 128, 0, 32, 32})
    ->Args({1, 1, 0, 512, 256, 128, 0, 32, 32})
    ->Args({0, 1, 0, 1024, 256, 128, 0, 32, 32})
    ->Args({1, 1, 0, 1024, 256, 128, 0, 32, 32})
    ->Args({1, 1, 2, 1024, 256, 128, 0, 32, 32})
    ->Args({0, 1, 0, 2048, 256, 128, 0, 32, 32})
    ->Args({1, 1, 0, 2048, 256, 128, 0, 32, 32})
    ->Args({1, 1, 2, 2048, 256, 128, 0, 32, 32})
    ->Args({0, 1, 0, 1024, 512, 256, 0, 32, 32})
    ->Args({1, 1, 0, 1024, 512, 256, 0, 32, 32})
    ->Args({1, 1, 0, 256, 256, 128, 0, 32, 16})
    ->Args({3, 1, 0, 256, 256, 128, 0, 32, 16})
    ->Args({1, 1, 8, 256, 256, 128, 0, 32, 16})
    ->Args({1, 1, 0, 1024, 256, 128, 0, 32, 16})
    ->Args({1, 1, 0, 4096, 512, 256, 0, 32, 16})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
