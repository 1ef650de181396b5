// µs per product of the step's output layers at large batches: a head's outputs are n·atoms
// wide (51, 153, 255 for the default atoms and branches), an odd row width, so every row after the
// first starts off a 16-byte boundary and cuBLAS can only take its one-element-aligned kernels.
// The same products with rows padded to a multiple of 4 floats say what a padded layout would
// give (docs/performance.md). Kinds, as BackwardPlan and ForwardPlan enqueue them: 0 the forward
// (out [R, w] = hidden [R, H] · W [w, H]ᵀ over `count` passes), 1 the weight gradient
// (dW [w, H] = d_out [R, w]ᵀ · hidden [R, H]), 2 the input gradient (d_hidden [R, H] = d_out [R, w] · W).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/gemm.hpp"
#include "bench_util.hpp"
#include "nn/network.hpp"

namespace {

using zs::bench::normal_floats;

// Args: rows a pass, output width, padded (1: rows of round_up(width, 4) floats), kind, products.
void BM_OutputLayerGemm(benchmark::State& state) {
  const int R = static_cast<int>(state.range(0)), w = static_cast<int>(state.range(1));
  const int wp = state.range(2) != 0 ? (w + 3) / 4 * 4 : w;
  const int kind = static_cast<int>(state.range(3)), count = static_cast<int>(state.range(4));
  constexpr int H = 256;
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::tf32);
  std::vector<zs::DeviceFloats> keep;
  std::vector<zs::GemmEntry> entries;
  for (int e = 0; e < count; ++e) {
    keep.push_back(normal_floats(static_cast<std::size_t>(R) * H, 10 * e + 1));   // hidden / d_hidden
    keep.push_back(normal_floats(static_cast<std::size_t>(R) * wp, 10 * e + 2));  // out / d_out
    keep.push_back(normal_floats(static_cast<std::size_t>(wp) * H, 10 * e + 3));  // W / dW
    const float* hidden = keep[keep.size() - 3].data();
    float* out = keep[keep.size() - 2].data();
    float* weight = keep.back().data();
    if (kind == 0) entries.push_back({hidden, weight, out});
    if (kind == 1) entries.push_back({out, hidden, weight});
    if (kind == 2) entries.push_back({out, weight, const_cast<float*>(hidden)});
  }
  // Padded, each product computes round_up(w, 4) columns (the padding's weights are a real row):
  // a little more work than the odd width, so the comparison is not flattered.
  zs::GemmBatch batch = kind == 0   ? zs::GemmBatch(zs::Trans::N, zs::Trans::T, R, wp, H, 1.f, 0.f, entries)
                        : kind == 1 ? zs::GemmBatch(zs::Trans::T, zs::Trans::N, wp, H, R, 1.f, 0.f, entries)
                                    : zs::GemmBatch(zs::Trans::N, zs::Trans::N, R, H, wp, 1.f, 0.f, entries);
  zs::bench::time_on_stream(state, stream, [&] { gemm(batch); }, 20);
  state.counters["gflop"] = 2.0 * R * wp * H * count / 1e9;
}
BENCHMARK(BM_OutputLayerGemm)
    ->ArgNames({"rows", "width", "padded", "kind", "count"})
    ->ArgsProduct({{4096}, {51, 153, 255}, {0, 1}, {0, 1, 2}, {1, 3}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
