// µs per launch of the element-wise pieces around the launch plans' products at the B = 4096 /
// 512 / 256 step (branches {5, 3, 3}, 51 atoms: four heads): the backward's three column-sum
// launches (bias gradients through the ReLU masks) and the forward's bias + ReLU over every
// head's hidden rows of the three passes, each lane loading 1 or 8 columns before it stores.
// Fresh buffers each: what a launch pulls from memory, where the step finds much of it in L2
// (docs/performance.md, thirty-sixth session: what ran faster here ran slower in the step).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.hpp"
#include "kernels/dense_batch.hpp"
#include "nn/network.hpp"

namespace {

constexpr int kRows = 4096, kWidth = 512, kHidden = 256;
const std::vector<int> kHeadWidths{51, 255, 153, 153};

using zs::bench::normal_floats;

// Args: shape (0: the top trunk layer, four heads' shares summed and masked into dz; 1: the
// heads' output biases and their hidden layers masked in place; 2: a lower trunk layer masked in
// place).
void BM_ColumnSumBatch(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0));
  const int heads = static_cast<int>(kHeadWidths.size());
  zs::Stream stream;
  std::vector<zs::DeviceFloats> keep;
  auto floats = [&](std::size_t n) -> float* {
    keep.push_back(normal_floats(n, keep.size() + 1));
    return keep.back().data();
  };
  const std::size_t trunk = static_cast<std::size_t>(kRows) * kWidth, hidden = static_cast<std::size_t>(kRows) * kHidden;
  std::vector<zs::kernels::ColumnSumEntry> e;
  if (shape == 0) {
    e.push_back({floats(heads * trunk), static_cast<std::int64_t>(trunk), heads, floats(trunk), floats(trunk),
                 floats(kWidth), kWidth});
  } else if (shape == 1) {
    for (int w : kHeadWidths) e.push_back({floats(static_cast<std::size_t>(kRows) * w), 0, 1, nullptr, nullptr, floats(w), w});
    for (int h = 0; h < heads; ++h) {
      float* d = floats(hidden);
      e.push_back({d, 0, 1, floats(hidden), d, floats(kHidden), kHidden});
    }
  } else {
    float* d = floats(trunk);
    e.push_back({d, 0, 1, floats(trunk), d, floats(kWidth), kWidth});
  }
  const zs::kernels::ColumnSumLaunch<zs::ExecSpace> sums(e, kRows);
  zs::bench::time_on_stream(state, stream, [&] { sums(stream.exec()); });
}
BENCHMARK(BM_ColumnSumBatch)
    ->ArgNames({"shape"})
    ->DenseRange(0, 2)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Args: columns in flight. Three passes' four heads' hidden layers, bias + ReLU in place.
void BM_BiasActBatch(benchmark::State& state) {
  const int in_flight = static_cast<int>(state.range(0));
  zs::Stream stream;
  std::vector<zs::DeviceFloats> keep;
  std::vector<zs::kernels::BiasActEntry> e;
  for (int p = 0; p < 3 * static_cast<int>(kHeadWidths.size()); ++p) {
    keep.push_back(normal_floats(static_cast<std::size_t>(kRows) * kHidden, 2 * p + 1));
    keep.push_back(normal_floats(kHidden, 2 * p + 2));
    e.push_back({keep[keep.size() - 2].data(), keep.back().data(), kHidden, 1});
  }
  const zs::kernels::BiasActLaunch<zs::ExecSpace> bias(e, kRows, in_flight);
  zs::bench::time_on_stream(state, stream, [&] { bias(stream.exec()); });
}
BENCHMARK(BM_BiasActBatch)
    ->ArgNames({"in_flight"})
    ->Arg(1)
    ->Arg(zs::kernels::kBiasColsInFlight)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
