// µs per call of the optimizer tail at the reference flat buffer (288,896 floats): the in-place
// clip scale, an auxiliary's clipped SAXPY into the trunk range, Adam (prepare with the clip
// scale + the update with the Polyak target update fused in), the hard target update; and the
// whole tail as one graph replay.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/adam.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/target_update.hpp"
#include "core/param_layout.hpp"

namespace {

std::size_t flat_size() { return zs::ParamLayout(zs::Config{}).size(); }

// The trunk's share of the flat buffer: everything before the value stream's first layer.
std::size_t trunk_size() { return zs::ParamLayout(zs::Config{}).layer("value.0").weight_offset; }

template <class T>
zs::DeviceScalar<T> device_scalar(T value, const std::string& label) {
  zs::DeviceScalar<T> d(label);
  Kokkos::deep_copy(d, value);
  return d;
}

// Arg 1: a scale just under 1, so every element is scaled (by 0.9999, which stays far from
// denormals over the run); arg 0: a scale of 1, the common unclipped case that writes nothing.
void BM_ScaleInPlace(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats grad("grad", flat_size());
  Kokkos::deep_copy(grad, 0.5f);
  auto scale = device_scalar<float>(state.range(0) ? 0.9999f : 1.f, "scale");
  zs::bench::time_on_stream(state, stream, [&] { zs::kernels::scale_in_place(stream.exec(), grad, scale); });
  state.SetLabel(state.range(0) ? "clipped" : "unclipped");
}
BENCHMARK(BM_ScaleInPlace)->Arg(1)->Arg(0)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_ClippedSaxpyTrunk(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats grad("grad", flat_size());
  const std::size_t n = trunk_size();
  zs::DeviceFloats aux("aux", n);
  Kokkos::deep_copy(aux, 1e-3f);
  auto aux_norm = device_scalar<double>(5.0, "aux_norm");  // over a 1.0 limit: clipped
  auto trunk = Kokkos::subview(grad, std::make_pair(std::size_t{0}, n));
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::clipped_saxpy(stream.exec(), trunk, aux, aux_norm, 1.f);
  });
  state.counters["floats"] = benchmark::Counter(static_cast<double>(n));
}
BENCHMARK(BM_ClippedSaxpyTrunk)->UseManualTime()->Unit(benchmark::kMicrosecond);

struct AdamBuffers {
  zs::DeviceFloats params{"params", flat_size()}, grads{"grads", flat_size()}, m{"m", flat_size()},
      v{"v", flat_size()}, target{"target", flat_size()};
  Kokkos::View<double*, zs::MemSpace> state = zs::kernels::make_adam_state();
  zs::DeviceScalar<int> skip = device_scalar<int>(0, "skip");
  zs::DeviceScalar<float> lr = device_scalar<float>(1e-4f, "lr");
  zs::DeviceScalar<double> norm = device_scalar<double>(20.0, "norm");  // over the limit: clipped
  zs::DeviceScalar<float> scale{std::string("scale")};
  zs::kernels::AdamHyper hyper;

  AdamBuffers() { Kokkos::deep_copy(grads, 0.5f); }

  void enqueue(const zs::Stream& stream) const {
    zs::kernels::adam_prepare(stream.exec(), state, skip, norm, scale, 10.f, hyper);
    zs::kernels::adam_polyak_update(stream.exec(), params, grads, m, v, state, skip, lr, scale, hyper, target,
                                    zs::Config{}.tau);
  }
};

void BM_AdamPrepareAndPolyakUpdate(benchmark::State& state) {
  zs::Stream stream;
  AdamBuffers adam;
  zs::bench::time_on_stream(state, stream, [&] { adam.enqueue(stream); });
}
BENCHMARK(BM_AdamPrepareAndPolyakUpdate)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A step counter that is a multiple of K on every call: the copying case, the dearer one.
void BM_HardUpdateCopying(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats target("target", flat_size()), online("online", flat_size());
  auto step = device_scalar<std::int64_t>(1000, "step");
  auto skip = device_scalar<int>(0, "skip");
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::hard_update(stream.exec(), target, online, step, skip, 1000);
  });
}
BENCHMARK(BM_HardUpdateCopying)->UseManualTime()->Unit(benchmark::kMicrosecond);

// adam_prepare (clip scale) → Adam with the Polyak update fused in, as one graph: the tail of a
// step after the gradient norm and the guard.
void BM_OptimTailGraphReplay(benchmark::State& state) {
  zs::Stream stream;
  AdamBuffers adam;
  auto body = [&] { adam.enqueue(stream); };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
}
BENCHMARK(BM_OptimTailGraphReplay)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
