// Where a fused step's time goes, tile by tile: the step with FusedOptions::timeline on, timed
// like BM_StepFused* (so the stamps' own cost shows against BM_Step), then one table of its last
// step's phases on stderr: when each phase's first tile began and its last ended (the global
// timer, µs from the step's first tile), the gap after the phase before, and its tiles' longest
// and median time past their wait for the grids before them (the multiprocessor's cycles).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "step_setup.hpp"
#include "train/trainer.hpp"

namespace {

// What a tile was: a product's job (its m × n, k chunks, splits) or the kind of tile.
std::string what(const zs::TileTimes& t) {
  static const char* const kinds[] = {"product", "dueling", "loss", "loss totals", "dueling and loss"};
  if (t.job < 0) return kinds[t.kind < 5 ? t.kind : 0];
  char s[128];
  std::snprintf(s, sizeof s, "job %d, %d × %d, %d chunks%s", t.job, t.m, t.n, t.chunks,
                t.splits > 1 ? (", split " + std::to_string(t.splits)).c_str() : "");
  return s;
}

double median(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[v.size() / 2]);
}

std::string phase_table(const std::vector<zs::TileTimes>& tiles) {
  std::uint64_t t0 = UINT64_MAX;
  int phases = 0;
  for (const auto& t : tiles) {
    t0 = std::min(t0, t.begin_ns);
    phases = std::max(phases, t.phase + 1);
  }
  std::string out =
      "| phase | tiles | SMs | first begins (µs) | last begins | last ends | gap after the phase before | "
      "longest tile (kcycles, tile) | median tile | longest wait (kcycles) | "
      "parts' medians (kcycles): a product's first chunk / chunk loop / epilogue / tail, the loss's head / a* / projection / tail |\n"
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  double prev_end = 0;
  char line[512];
  for (int p = 0; p < phases; ++p) {
    std::vector<zs::TileTimes> mine;
    for (const auto& t : tiles)
      if (t.phase == p) mine.push_back(t);
    if (mine.empty()) continue;
    std::uint64_t first = UINT64_MAX, last_begin = 0, last_end = 0, wait = 0;
    std::set<int> sms;
    std::vector<std::uint64_t> work, part1, part2, part3, tail;
    zs::TileTimes longest = mine.front();
    for (const auto& t : mine) {
      first = std::min(first, t.begin_ns);
      last_begin = std::max(last_begin, t.begin_ns);
      last_end = std::max(last_end, t.end_ns);
      wait = std::max(wait, t.wait_cycles);
      sms.insert(t.sm);
      if (t.work_cycles > longest.work_cycles) longest = t;
      work.push_back(t.work_cycles);
      if (t.parts[0] + t.parts[1] + t.parts[2] > 0) {
        part1.push_back(t.parts[0]);
        part2.push_back(t.parts[1]);
        part3.push_back(t.parts[2]);
        tail.push_back(t.work_cycles - t.parts[0] - t.parts[1] - t.parts[2]);
      }
    }
    std::sort(work.begin(), work.end());
    char parts[128] = "—";
    if (!part1.empty())
      std::snprintf(parts, sizeof parts, "%.1f / %.1f / %.1f / %.1f", median(part1) * 1e-3, median(part2) * 1e-3,
                    median(part3) * 1e-3, median(tail) * 1e-3);
    const double begins = (first - t0) * 1e-3, ends = (last_end - t0) * 1e-3;
    std::snprintf(line, sizeof line,
                  "| %d | %zu | %zu | %.2f | %.2f | %.2f | %.2f | %.1f (tile %d: %s) | %.1f | %.1f | %s |\n", p,
                  mine.size(), sms.size(), begins, (last_begin - t0) * 1e-3, ends, p == 0 ? 0.0 : begins - prev_end,
                  work.back() * 1e-3, longest.tile, what(longest).c_str(), work[work.size() / 2] * 1e-3, wait * 1e-3,
                  parts);
    out += line;
    prev_end = ends;
  }
  return out;
}

// The step's variants the timeline compares (arg 1 of BM_StepTimeline): the defaults, then each
// with one FusedOptions switch changed.
struct Variant {
  const char* name;
  void (*set)(zs::FusedOptions&);
};
const Variant kVariants[] = {
    {"the defaults", [](zs::FusedOptions&) {}},
    {"dependents_early 0", [](zs::FusedOptions& o) { o.dependents_early = 0; }},
    {"one persistent launch", [](zs::FusedOptions& o) { o.mode = zs::PhasedMode::persistent; }},
    {"tables_before_wait off", [](zs::FusedOptions& o) { o.tables_before_wait = false; }},
    {"the forward as row blocks of 32", [](zs::FusedOptions& o) { o.row_block_forward = 32; }},
    {"the forward as row blocks of 16", [](zs::FusedOptions& o) { o.row_block_forward = 16; }},
    {"the input-gradient chain as row blocks of 32", [](zs::FusedOptions& o) { o.row_block_backward = 32; }},
    {"the forward and the chain as row blocks of 32",
     [](zs::FusedOptions& o) { o.row_block_forward = o.row_block_backward = 32; }},
    {"the forward and the chain as row blocks of 16",
     [](zs::FusedOptions& o) { o.row_block_forward = o.row_block_backward = 16; }},
    {"the forward as clusters", [](zs::FusedOptions& o) { o.cluster_forward = true; }},
};
constexpr int kVariantCount = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));

// The default trainer at batch B (trunk 256, heads 128) in one of kVariants, the timeline on (1;
// its table printed) or off (0: the same step's time without the stamps). Args: batch, variant,
// timeline.
void BM_StepTimeline(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), variant = static_cast<int>(state.range(1));
  const bool timeline = state.range(2) != 0;
  zs::TrainerOptions opt = zs::bench::fused_options_at(B);
  kVariants[variant].set(opt.fused);
  opt.fused.timeline = timeline;
  zs::Trainer t(zs::bench::fused_config_at(B), opt);
  if (!t.fused()) {
    state.SkipWithError(("the fused step is off: " + t.fused_off_reason()).c_str());
    return;
  }
  zs::bench::fill_batch(t);
  zs::bench::time_on_stream(state, t.stream(), [&] { t.step(); }, 20);
  t.synchronize();
  state.SetLabel(kVariants[variant].name);
  // Google Benchmark may call this more than once for the same arguments: one table each.
  static std::set<std::pair<int, int>> printed;
  if (!timeline || !printed.insert({B, variant}).second) return;
  std::fprintf(stderr, "\nBM_StepTimeline B = %d, %s, the last step's phases:\n%s\n", B, kVariants[variant].name,
               phase_table(t.fused_kernel()->timeline()).c_str());
}
BENCHMARK(BM_StepTimeline)
    ->ArgNames({"B", "variant", "timeline"})
    ->ArgsProduct({{64, 256}, benchmark::CreateDenseRange(0, kVariantCount - 1, 1), {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
