// The zero-sync proof for what exists so far: grad norm + mailbox post recorded as a graph (on
// CUDA a stream capture in global mode, which fails on any hidden sync, allocation or blocking
// copy) and replayed with correct results that reach the host through the mailbox.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/grad_norm.hpp"
#include "backends/mailbox.hpp"
#include "test_util.hpp"

TEST(Graph, GradNormAndMailboxReplayWithFreshInputs) {
  const std::size_t n = 100003;
  zs::Stream stream;
  zs::DeviceFloats grad("grad", n);
  Kokkos::View<double*, zs::MemSpace> record("record", 1);
  zs::Mailbox box(1);
  const auto scratch = zs::kernels::make_grad_norms_scratch(stream.exec());
  auto step = [&] {
    zs::kernels::global_grad_norm(stream.exec(), zs::ConstDeviceFloats(grad), Kokkos::subview(record, 0), scratch);
    box.post(stream.exec(), record);
  };
  step();  // first use sizes Kokkos' reduction scratch outside capture
  stream.synchronize();
  zs::Graph graph;
  graph.capture(stream, step);
  ASSERT_TRUE(graph.captured());

  auto host = Kokkos::create_mirror_view(grad);
  for (int replay = 0; replay < 5; ++replay) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "replay " << replay << ", seed " << seed);
    const auto g = zs::test::random_normal(n, seed, 1.f + replay);
    double ref = 0;
    for (std::size_t i = 0; i < n; ++i) {
      host(i) = g[i];
      ref += double(g[i]) * g[i];
    }
    ref = std::sqrt(ref);
    Kokkos::deep_copy(grad, host);
    graph.replay(stream);
    stream.synchronize();
    const auto rec = box.read();
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->seq, replay + 2);  // the direct run posted once before capture
    EXPECT_NEAR(rec->values[0], ref, 1e-10 * ref);
  }
}

TEST(Graph, MisuseIsAClearError) {
  zs::Stream stream;
  zs::Graph graph;
  EXPECT_THROW(graph.replay(stream), zs::Error);
  graph.capture(stream, [] {});
  EXPECT_THROW(graph.capture(stream, [] {}), zs::Error);
}
