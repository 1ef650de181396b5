// The zero-sync watch: a blocking copy, an allocation or a fence planted in a recorded graph body
// is caught on every backend, with a message naming it; kernels (flat, reductions into device
// Views, teams) pass; the watch coexists with other Kokkos tools hooks and leaves nothing behind.
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "backends/graph.hpp"
#include "backends/host_copy.hpp"
#include "backends/stream.hpp"
#include "backends/sync_watch.hpp"
#include "sync_watch_kernels.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

namespace kt = Kokkos::Tools::Experimental;

namespace {

constexpr int kN = 1000;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using zs::test::Iota;
using zs::test::joined;
using zs::test::Sum;

// One team per row of `rows` (kN / rows columns each), its sum into out(row).
struct TeamRowSums {
  using Member = Kokkos::TeamPolicy<zs::ExecSpace>::member_type;
  zs::DeviceFloats x, out;
  int cols;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int row = team.league_rank();
    float s = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, cols), [&](const int c, float& acc) { acc += x(row * cols + c); }, s);
    Kokkos::single(Kokkos::PerTeam(team), [&] { out(row) = s; });
  }
};

// Runs `body` the way zs::Graph::run does (once directly, then recorded) and replays it
// `replays` times; the message of what it threw, or "" if nothing did.
std::string recorded_error(zs::Stream& stream, const std::function<void()>& body, int replays = 1) {
  body();
  stream.synchronize();
  zs::Graph graph;
  try {
    graph.capture(stream, body);
    for (int r = 0; r < replays; ++r) graph.replay(stream);
    stream.synchronize();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool watch_hooks_installed() {
  const auto now = kt::get_callbacks();
  return now.begin_deep_copy || now.allocate_data || now.deallocate_data || now.begin_fence;
}

// Another tool: counts launches and deep copies, like the launch logs of other tests. Hooking
// launches makes Kokkos fence before each of its callbacks.
class OtherTool {
 public:
  OtherTool() : saved_(kt::get_callbacks()) {
    launches() = copies() = 0;
    kt::set_begin_parallel_for_callback(&launch);
    kt::set_begin_parallel_reduce_callback(&launch);
    kt::set_begin_deep_copy_callback(&copy);
  }
  ~OtherTool() { kt::set_callbacks(saved_); }
  OtherTool(const OtherTool&) = delete;
  OtherTool& operator=(const OtherTool&) = delete;
  static int& launches() {
    static int n = 0;
    return n;
  }
  static int& copies() {
    static int n = 0;
    return n;
  }
  static void launch(const char*, std::uint32_t, std::uint64_t* id) {
    ++launches();
    *id = 0;
  }
  static void copy(Kokkos::Tools::SpaceHandle, const char*, const void*, Kokkos::Tools::SpaceHandle, const char*,
                   const void*, std::uint64_t) {
    ++copies();
  }

 private:
  kt::EventSet saved_;
};

}  // namespace

TEST(SyncWatch, ADeepCopyToAHostMirrorInAGraphBodyIsCaughtByName) {
  zs::Stream stream;
  zs::DeviceFloats dev("zs::test::device", kN);
  Kokkos::View<float*, Kokkos::HostSpace> host("zs::test::host", kN);
  const auto msg = recorded_error(stream, [&] {
    Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{dev});
    Kokkos::deep_copy(host, dev);
  });
  EXPECT_TRUE(has(msg, "Graph::")) << msg;
  EXPECT_TRUE(has(msg, "deep copy of 4000 bytes from 'zs::test::device'")) << msg;
  EXPECT_TRUE(has(msg, "to 'zs::test::host'")) << msg;
  EXPECT_FALSE(watch_hooks_installed());
}

TEST(SyncWatch, AViewAllocatedInAGraphBodyIsCaughtByName) {
  zs::Stream stream;
  const auto msg = recorded_error(stream, [&] {
    zs::DeviceFloats tmp("zs::test::planted", kN);
    Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{tmp});
  });
  EXPECT_TRUE(has(msg, "zs::test::planted")) << msg;
  EXPECT_FALSE(watch_hooks_installed());
}

TEST(SyncWatch, AGlobalFenceInAGraphBodyIsCaught) {
  zs::Stream stream;
  zs::DeviceFloats x("zs::test::x", kN);
  const auto msg = recorded_error(stream, [&] {
    Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{x});
    Kokkos::fence();
  });
  EXPECT_TRUE(has(msg, "Graph::")) << msg;
  EXPECT_TRUE(has(msg, "fence 'Kokkos::fence()'")) << msg;
}

TEST(SyncWatch, AnInstanceFenceInAGraphBodyIsCaught) {
  zs::Stream stream;
  zs::DeviceFloats x("zs::test::x", kN);
  for (const bool through_stream : {false, true}) {
    SCOPED_TRACE(through_stream ? "stream.synchronize()" : "exec.fence()");
    const auto msg = recorded_error(stream, [&] {
      Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{x});
      if (through_stream)
        stream.synchronize();
      else
        stream.exec().fence();
    });
    EXPECT_TRUE(has(msg, "Graph::")) << msg;
    EXPECT_TRUE(has(msg, "fence 'Kokkos::")) << msg;
  }
}

TEST(SyncWatch, KernelsAloneReplayCleanlyWithRightResults) {
  zs::Stream stream;
  constexpr int kRows = 10;
  zs::DeviceFloats x("zs::test::x", kN), rows("zs::test::rows", kRows);
  zs::DeviceScalar<float> total("zs::test::total");
  const auto body = [&] {
    const zs::ExecSpace& exec = stream.exec();
    Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(exec, 0, kN), Iota{x});
    Kokkos::parallel_reduce("zs::test::sum", Sum::policy(exec, kN), Sum{x}, total);
    Kokkos::parallel_for("zs::test::row_sums", Kokkos::TeamPolicy<zs::ExecSpace>(exec, kRows, Kokkos::AUTO),
                         TeamRowSums{x, rows, kN / kRows});
  };
  EXPECT_EQ(recorded_error(stream, body, 5), "");
  float sum = 0;
  Kokkos::deep_copy(sum, total);
  EXPECT_EQ(sum, kN * (kN - 1) / 2.f);
  const auto r = zs::download(rows);
  for (int i = 0; i < kRows; ++i) {
    const int c = kN / kRows, first = i * c;
    EXPECT_EQ(r[i], float(c) * first + float(c) * (c - 1) / 2) << "row " << i;
  }
  EXPECT_FALSE(watch_hooks_installed());
}

TEST(SyncWatch, EveryReplayOfAHostRecordingIsWatched) {
  zs::Stream stream;
  zs::DeviceFloats x("zs::test::x", kN);
  zs::Graph graph;
  int runs = 0;
  const auto body = [&] {
    Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{x});
    if (++runs == 4) Kokkos::fence();  // only the third replay fences
  };
  body();
  graph.capture(stream, body);
  if (graph.node_count() > 0) GTEST_SKIP() << "a CUDA graph's replays run no host code; its capture is watched";
  EXPECT_NO_THROW(graph.replay(stream));
  EXPECT_NO_THROW(graph.replay(stream));
  const auto msg = zs::test::error_of([&] { graph.replay(stream); });
  EXPECT_TRUE(has(msg, "fence 'Kokkos::fence()'")) << msg;
  EXPECT_NO_THROW(graph.replay(stream)) << "a finding belongs to one replay only";
}

TEST(SyncWatch, NamesTheAllocationsLabelAndSizeAndCountsRepeats) {
  std::vector<std::string> found;
  {
    zs::SyncWatch watch;
    for (int i = 0; i < 3; ++i) zs::DeviceFloats tmp("zs::test::planted", kN);
    found = watch.findings();
    EXPECT_THROW(watch.require_clean("here"), zs::Error);
  }
  ASSERT_FALSE(found.empty());
  EXPECT_TRUE(has(found[0], "allocation of 'zs::test::planted' (4000 bytes in ")) << found[0];
  EXPECT_TRUE(has(found[0], "(3 times)")) << found[0];
  // Kokkos also fences after filling a new View with zeros.
  EXPECT_TRUE(has(joined(found), "deallocation of 'zs::test::planted' (4000 bytes in ")) << joined(found);
}

TEST(SyncWatch, AReductionIntoAHostScalarFencesAndIntoADeviceViewDoesNot) {
  zs::Stream stream;
  zs::DeviceFloats x("zs::test::x", kN);
  zs::DeviceScalar<float> on_device("zs::test::sum");
  float on_host = 0;
  const auto policy = Sum::policy(stream.exec(), kN);
  Kokkos::parallel_reduce("zs::test::sum", policy, Sum{x}, on_device);  // first use sizes scratch
  Kokkos::parallel_reduce("zs::test::sum", policy, Sum{x}, on_host);
  stream.synchronize();
  {
    zs::SyncWatch watch;
    Kokkos::parallel_reduce("zs::test::sum", policy, Sum{x}, on_device);
    EXPECT_EQ(joined(watch.findings()), "");
  }
  {
    zs::SyncWatch watch;
    Kokkos::parallel_reduce("zs::test::sum", policy, Sum{x}, on_host);
    const auto found = watch.findings();
    ASSERT_FALSE(found.empty());
    EXPECT_TRUE(has(found.back(), "fence 'Kokkos::")) << found.back();
  }
}

TEST(SyncWatch, ChainsToAnotherToolAndPutsItsHooksBack) {
  zs::Stream stream;
  zs::DeviceFloats x("zs::test::x", kN);
  Kokkos::View<float*, Kokkos::HostSpace> host("zs::test::host", kN);
  OtherTool tool;
  const auto before = kt::get_callbacks();
  {
    zs::SyncWatch watch;
    Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{x});
    // A tool set through the API gets no fence from Kokkos (sync_watch.cpp), and the
    // watch hands the launch on to it; tests/tool/sync_watch_tool_test.cpp covers a loaded tool.
    EXPECT_EQ(joined(watch.findings()), "");
    EXPECT_EQ(OtherTool::launches(), 1);
    Kokkos::deep_copy(host, x);
    EXPECT_EQ(OtherTool::copies(), 1) << "the watch passes events on to the tool";
    EXPECT_TRUE(has(joined(watch.findings()), "deep copy of 4000 bytes from 'zs::test::x'"));
  }
  const auto after = kt::get_callbacks();
  EXPECT_EQ(after.begin_parallel_for, before.begin_parallel_for);
  EXPECT_EQ(after.begin_parallel_reduce, before.begin_parallel_reduce);
  EXPECT_EQ(after.begin_deep_copy, before.begin_deep_copy);
  EXPECT_EQ(after.allocate_data, before.allocate_data);
  EXPECT_EQ(after.begin_fence, before.begin_fence);
}

TEST(SyncWatch, AFenceJustBeforeAnotherToolsLaunchIsStillTheBodys) {
  zs::Stream stream;
  zs::DeviceFloats x("zs::test::x", kN);
  OtherTool tool;
  zs::SyncWatch watch;
  stream.exec().fence();
  Kokkos::parallel_for("zs::test::iota", Kokkos::RangePolicy<zs::ExecSpace>(stream.exec(), 0, kN), Iota{x});
  const auto found = watch.findings();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(has(found[0], "fence 'Kokkos::")) << found[0];
}

TEST(SyncWatch, NestedWatchesReportToTheInnermostOnly) {
  zs::SyncWatch outer;
  {
    zs::SyncWatch inner;
    Kokkos::fence();
    EXPECT_EQ(inner.findings().size(), 1u);
  }
  EXPECT_EQ(joined(outer.findings()), "");
  Kokkos::fence();
  EXPECT_EQ(outer.findings().size(), 1u);
}
