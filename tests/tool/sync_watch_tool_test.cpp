// The SyncWatch while a Kokkos tool library is loaded (run with
// --kokkos-tools-library=<fencing_tool>): Kokkos then fences before each of the tool's launch
// callbacks, and the watch must tell those fences from the body's own.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/stream.hpp"
#include "backends/sync_watch.hpp"
#include "../sync_watch_kernels.hpp"

namespace kt = Kokkos::Tools::Experimental;

namespace {

constexpr int kN = 1000;

using zs::test::Iota;
using zs::test::joined;
using zs::test::Sum;

int fences_seen = 0;
void count_fence(const char*, std::uint32_t, std::uint64_t*) { ++fences_seen; }

class UnderATool : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(kt::get_callbacks().begin_parallel_for, nullptr)
        << "run with --kokkos-tools-library=<the fencing_tool library>";
    iota("zs::test::warm_up");
    Kokkos::parallel_reduce("zs::test::sum", Sum::policy(stream.exec(), kN), Sum{x}, sum);  // first use sizes scratch
    stream.synchronize();
  }
  Kokkos::RangePolicy<zs::ExecSpace> policy() const { return {stream.exec(), 0, kN}; }
  void iota(const char* label) { Kokkos::parallel_for(label, policy(), Iota{x}); }

  zs::Stream stream;
  zs::DeviceFloats x{"zs::test::x", kN};
  zs::DeviceScalar<float> sum{"zs::test::sum"};
};

}  // namespace

TEST_F(UnderATool, KokkosFencesBeforeTheToolsLaunchCallback) {
  // What the other tests rely on: without it they would prove nothing.
  const auto saved = kt::get_callbacks();
  kt::set_begin_fence_callback(&count_fence);
  fences_seen = 0;
  iota("zs::test::iota");
  kt::set_callbacks(saved);
  EXPECT_GE(fences_seen, 1);
}

TEST_F(UnderATool, KernelsAloneAreClean) {
  zs::SyncWatch watch;
  iota("zs::test::iota");
  Kokkos::parallel_reduce("zs::test::sum", Sum::policy(stream.exec(), kN), Sum{x}, sum);
  iota("zs::test::iota");
  EXPECT_EQ(joined(watch.findings()), "");
}

TEST_F(UnderATool, AFenceRightBeforeALaunchIsTheBodys) {
  zs::SyncWatch watch;
  stream.exec().fence();
  iota("zs::test::iota");
  const auto found = watch.findings();
  ASSERT_EQ(found.size(), 1u) << joined(found);
  EXPECT_EQ(found[0].rfind("fence 'Kokkos::", 0), 0u) << found[0];
}

TEST_F(UnderATool, AFenceAtTheEndIsTheBodys) {
  zs::SyncWatch watch;
  iota("zs::test::iota");
  Kokkos::fence();
  EXPECT_EQ(joined(watch.findings()), "fence 'Kokkos::fence()'\n");
}
