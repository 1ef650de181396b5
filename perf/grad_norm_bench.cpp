// µs per global-gradient-norm call over a flat buffer, directly launched and as graph replays.
#include <benchmark/benchmark.h>

#include <cstddef>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/grad_norm.hpp"
#include "nn/param_buffer.hpp"

namespace {

std::size_t buffer_size(int64_t arg) {
  // 0 = the reference config's flat buffer; otherwise that many floats.
  return arg == 0 ? zs::ParamLayout(zs::Config{}).size() : static_cast<std::size_t>(arg);
}

void BM_GradNorm(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats grad("grad", buffer_size(state.range(0)));
  Kokkos::deep_copy(grad, 0.5f);
  zs::DeviceScalar<double> norm("norm");
  const auto scratch = zs::kernels::make_grad_norms_scratch(stream.exec());
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), norm, scratch);
  });
  state.SetBytesProcessed(state.iterations() * 100 * grad.extent(0) * sizeof(float));
}
BENCHMARK(BM_GradNorm)->Arg(0)->Arg(1 << 20)->Arg(16 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_GradNormGraphReplay(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats grad("grad", buffer_size(state.range(0)));
  Kokkos::deep_copy(grad, 0.5f);
  zs::DeviceScalar<double> norm("norm");
  const auto scratch = zs::kernels::make_grad_norms_scratch(stream.exec());
  auto body = [&] { zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), norm, scratch); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
  state.SetBytesProcessed(state.iterations() * 100 * grad.extent(0) * sizeof(float));
}
BENCHMARK(BM_GradNormGraphReplay)->Arg(0)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
