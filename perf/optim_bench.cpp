// µs per call of the optimizer tail at the reference flat buffer (288,896 floats): the budgeted
// sum of C51's gradient and one auxiliary's, Adam (prepare with the clip scale + the update with
// the Polyak target update fused in), the hard target update; and the whole tail as one graph
// replay.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "bench_util.hpp"
#include "kernels/adam.hpp"
#include "kernels/budget_sum.hpp"
#include "kernels/target_update.hpp"
#include "core/param_layout.hpp"

namespace {

std::size_t flat_size() { return zs::ParamLayout(zs::Config{}).size(); }

template <class T>
zs::DeviceScalar<T> device_scalar(T value, const std::string& label) {
  zs::DeviceScalar<T> d(label);
  Kokkos::deep_copy(d, value);
  return d;
}

// C51's gradient at its clip scale plus one clipped auxiliary over the whole buffer: the pass
// the step adds when an auxiliary is on.
void BM_BudgetSumOneAuxiliary(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats applied("applied", flat_size()), c51("c51", flat_size()), aux("aux", flat_size());
  Kokkos::deep_copy(c51, 0.5f);
  Kokkos::deep_copy(aux, 1e-3f);
  auto scale = device_scalar<float>(0.9f, "scale");
  auto aux_norm = device_scalar<double>(5.0, "aux_norm");  // over a 1.0 limit: clipped
  const std::vector<zs::kernels::BudgetTerm> terms{{aux.data(), aux_norm.data(), 1.0}};
  zs::bench::time_on_stream(state, stream, [&] {
    zs::kernels::budget_sum(stream.exec(), applied, zs::ConstDeviceFloats(c51), zs::DeviceScalar<const float>(scale),
                            terms);
  });
}
BENCHMARK(BM_BudgetSumOneAuxiliary)->UseManualTime()->Unit(benchmark::kMicrosecond);

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

// Adam's t a multiple of K on every call: the copying case, the dearer one.
void BM_HardUpdateCopying(benchmark::State& state) {
  zs::Stream stream;
  zs::DeviceFloats target("target", flat_size()), online("online", flat_size());
  Kokkos::View<double*, zs::MemSpace> step = zs::kernels::make_adam_state();
  Kokkos::deep_copy(Kokkos::subview(step, static_cast<int>(zs::kernels::kAdamT)), 1000.0);
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
