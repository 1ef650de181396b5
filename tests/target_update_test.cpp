// The hard target update (a copy every K applied updates). The Polyak update is fused into
// Adam's pass and tested with it (adam_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/target_update.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Stands in for adam_prepare, which advances Adam's t (the applied-update counter the hard update
// reads) on the device in a real step: it stays still on a skipped step.
struct Increment {
  Kokkos::View<double*, zs::MemSpace> counter;
  Kokkos::View<const int, zs::MemSpace> skip;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    if (skip() == 0) counter(zs::kernels::kAdamT) += 1.0;
  }
};

using AdamState = Kokkos::View<double*, zs::MemSpace>;

void set_t(const AdamState& state, double t) {
  Kokkos::deep_copy(Kokkos::subview(state, static_cast<int>(zs::kernels::kAdamT)), t);
}

void increment(const zs::Stream& stream, const AdamState& counter, const Kokkos::View<const int, zs::MemSpace>& skip) {
  Kokkos::parallel_for("zs::test::increment", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, 1),
                       Increment{counter, skip});
}

using zs::test::same_bits;

using zs::test::error_of;

zs::DeviceScalar<int> skip_flag(int value) {
  zs::DeviceScalar<int> s("skip");
  Kokkos::deep_copy(s, value);
  return s;
}

}  // namespace

TEST(TargetUpdate, SkipFlagLeavesTargetUntouched) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const std::size_t n = 1031;
  const auto target = zs::test::random_normal(n, seed);
  auto online = zs::test::random_normal(n, seed + 1);
  online[seed % n] = kNaN;  // what a poisoned step could have left: must not leak through
  zs::Stream stream;
  AdamState step = zs::kernels::make_adam_state();
  set_t(step, 4);  // a copy step for K = 2
  for (int flag : {1, -1, 7}) {
    SCOPED_TRACE(testing::Message() << "skip " << flag);
    auto skip = skip_flag(flag);
    auto dt = zs::test::to_device(target);
    auto dn = zs::test::to_device(online);
    zs::kernels::hard_update(stream.exec(), dt, dn, step, skip, 2);
    stream.synchronize();
    EXPECT_TRUE(same_bits(zs::test::to_host(dt), target));
  }
}

TEST(TargetUpdate, HardCopiesEveryKAppliedUpdates) {
  const std::size_t n = 1031;
  zs::Stream stream;
  auto skip = skip_flag(0);
  AdamState step = zs::kernels::make_adam_state();
  for (std::int64_t K : {1, 3, 7}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "K = " << K << ", seed " << seed);
    set_t(step, 0);
    std::vector<float> ref_target = zs::test::random_normal(n, seed);
    auto dt = zs::test::to_device(ref_target);
    zs::DeviceFloats dn("online", n);
    int copies = 0;
    // step 0: nothing applied yet, so no copy even though 0 % K == 0.
    for (std::int64_t s = 0; s <= 4 * K + 1; ++s) {
      SCOPED_TRACE(testing::Message() << "step " << s);
      const auto online = zs::test::random_normal(n, seed + 1 + s);
      Kokkos::deep_copy(dn, zs::test::to_device(online));
      zs::kernels::hard_update(stream.exec(), dt, dn, step, skip, K);
      increment(stream, step, skip);
      stream.synchronize();
      if (s > 0 && s % K == 0) {
        ref_target = online;
        ++copies;
      }
      ASSERT_TRUE(same_bits(zs::test::to_host(dt), ref_target));
    }
    EXPECT_EQ(copies, (4 * K + 1) / K);
  }
}

TEST(TargetUpdate, GraphReplayHard) {
  const std::size_t n = 100003;
  const std::int64_t K = 3;
  zs::Stream stream;
  zs::DeviceFloats hard("hard", n), online("online", n);
  AdamState step = zs::kernels::make_adam_state();
  auto skip = skip_flag(0);
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::vector<float> ref_hard = zs::test::random_normal(n, seed);
  Kokkos::deep_copy(hard, zs::test::to_device(ref_hard));
  auto body = [&] {
    increment(stream, step, skip);  // the update this step applied
    zs::kernels::hard_update(stream.exec(), hard, online, step, skip, K);
  };
  std::int64_t applied = 0;
  auto check = [&](const std::vector<float>& on, bool skipped) {
    if (skipped) return;
    ++applied;
    if (applied % K == 0) ref_hard = on;
    EXPECT_TRUE(same_bits(zs::test::to_host(hard), ref_hard)) << "applied " << applied;
  };
  auto on = zs::test::random_normal(n, seed + 1);
  Kokkos::deep_copy(online, zs::test::to_device(on));
  body();
  stream.synchronize();
  check(on, false);
  zs::Graph graph;
  graph.capture(stream, body);
  ASSERT_TRUE(graph.captured());
  for (int replay = 0; replay < 10; ++replay) {
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    // Two guard trips, one of them where a hard copy would have been due.
    const bool skipped = replay == 1 || replay == 5;
    on = zs::test::random_normal(n, seed + 2 + replay);
    Kokkos::deep_copy(online, zs::test::to_device(on));
    Kokkos::deep_copy(skip, skipped ? 1 : 0);
    const auto hard_before = zs::test::to_host(hard);
    graph.replay(stream);
    stream.synchronize();
    if (skipped) {
      EXPECT_TRUE(same_bits(zs::test::to_host(hard), hard_before));
    }
    check(on, skipped);
  }
  EXPECT_EQ(applied, 9);
  double h_step = 0;
  Kokkos::deep_copy(h_step, Kokkos::subview(step, static_cast<int>(zs::kernels::kAdamT)));
  EXPECT_EQ(h_step, 9.0);
}

TEST(TargetUpdate, BadShapesAndPeriodAreClearErrors) {
  zs::Stream stream;
  zs::DeviceFloats a("a", 10), b("b", 11), empty("empty", 0);
  AdamState step = zs::kernels::make_adam_state();
  auto skip = skip_flag(0);
  std::string msg = error_of([&] { zs::kernels::hard_update(stream.exec(), b, a, step, skip, 2); });
  EXPECT_NE(msg.find("target has 11"), std::string::npos) << msg;
  EXPECT_NE(msg.find("online has 10"), std::string::npos) << msg;
  msg = error_of([&] { zs::kernels::hard_update(stream.exec(), empty, empty, step, skip, 2); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  for (std::int64_t K : {0, -3}) {
    msg = error_of([&] { zs::kernels::hard_update(stream.exec(), a, a, step, skip, K); });
    EXPECT_NE(msg.find("period K = " + std::to_string(K)), std::string::npos) << msg;
  }
}
