// µs per call of the optimizer tail at the reference flat buffer (288,896 floats): clip scale
// + in-place scale, an auxiliary's clipped SAXPY into the trunk range, Adam (prepare + update)
// and the target updates; and the whole tail as one graph replay.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/adam.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/target_update.hpp"
#include "param_layout.hpp"

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

// Arg 1: a norm just over the limit, so every element is scaled (by 0.9999, which stays far
// from denormals over the run); arg 0: under the limit, the common case that writes nothing.
void BM_ClipScaleAndScaleInPlace(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats grad("grad", flat_size());
  Kokkos::deep_copy(grad, 0.5f);
  const float limit = 10.f;
  auto norm = device_scalar<double>(state.range(0) ? limit / 0.9999 : 1.0, "norm");
  zs::DeviceScalar<float> scale("scale");
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::clip_scale(stream.exec(), norm, scale, limit);
    zs::kernels::scale_in_place(stream.exec(), grad, scale);
  });
  state.SetLabel(state.range(0) ? "clipped" : "unclipped");
}
BENCHMARK(BM_ClipScaleAndScaleInPlace)->Arg(1)->Arg(0)->UseManualTime()->Unit(benchmark::kMicrosecond);

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
      v{"v", flat_size()};
  Kokkos::View<double*, zs::MemSpace> state = zs::kernels::make_adam_state();
  zs::DeviceScalar<int> skip = device_scalar<int>(0, "skip");
  zs::DeviceScalar<float> lr = device_scalar<float>(1e-4f, "lr");
  zs::DeviceScalar<float> scale = device_scalar<float>(0.9f, "scale");
  zs::kernels::AdamHyper hyper;

  AdamBuffers() { Kokkos::deep_copy(grads, 0.5f); }

  void enqueue(const zs::Stream& stream) const {
    zs::kernels::adam_prepare(stream.exec(), state, skip, hyper);
    zs::kernels::adam_update(stream.exec(), params, grads, m, v, state, skip, lr, scale, hyper);
  }
};

void BM_AdamPrepareAndUpdate(benchmark::State& state) {
  zs::Stream stream;
  AdamBuffers adam;
  zs::bench::time_on_stream(state, stream, [&] { adam.enqueue(stream); });
}
BENCHMARK(BM_AdamPrepareAndUpdate)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_PolyakUpdate(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats target("target", flat_size()), online("online", flat_size());
  Kokkos::deep_copy(online, 1.f);
  auto skip = device_scalar<int>(0, "skip");
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::polyak_update(stream.exec(), target, online, skip, zs::Config{}.tau);
  });
}
BENCHMARK(BM_PolyakUpdate)->UseManualTime()->Unit(benchmark::kMicrosecond);

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

// clip_scale → Adam (clip scale fused in) → Polyak, as one graph: the tail of a step after the
// gradient norm, without the norm itself.
void BM_OptimTailGraphReplay(benchmark::State& state) {
  zs::Stream stream;
  AdamBuffers adam;
  zs::DeviceFloats target("target", flat_size());
  auto norm = device_scalar<double>(20.0, "norm");
  auto body = [&] {
    zs::kernels::clip_scale(stream.exec(), norm, adam.scale, 10.f);
    adam.enqueue(stream);
    zs::kernels::polyak_update(stream.exec(), target, adam.params, adam.skip, zs::Config{}.tau);
  };
  body();
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, body);
  zs::bench::time_on_stream(state, stream, [&] { graph.replay(stream); });
}
BENCHMARK(BM_OptimTailGraphReplay)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
