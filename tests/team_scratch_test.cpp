// A team may hold more team scratch than the 48 KiB a CUDA block gets without opting in: the
// seventh edit of cmake/bootstrap/patch_kokkos.py raises Kokkos 3.4's cap to what a kernel may
// opt in to (227 KiB on Hopper) and opts a kernel in before a launch that asks for more. The
// fused step's row-block design needs it (docs/performance.md, twenty-third session). Each team
// fills all of its scratch, meets at a barrier, and sums it back in another order; a team that
// got less than it asked for, or another team's memory, gives a wrong sum.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "test_util.hpp"

namespace {

// Value i of team t's scratch.
KOKKOS_INLINE_FUNCTION float value_of(std::int64_t i, int t, int salt) {
  return static_cast<float>((i * 7 + t * 13 + salt) % 1021);
}

// out(t) = Σ_i value_of(i, t, salt) · (i % 3), read from team t's scratch of `floats` floats.
void fill_and_sum(const zs::Stream& stream, Kokkos::View<double*, zs::MemSpace> out, std::int64_t floats,
                  int salt) {
  const int teams = static_cast<int>(out.extent(0));
  Kokkos::TeamPolicy<zs::ExecSpace> policy(stream.exec(), teams, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(static_cast<std::size_t>(floats) * sizeof(float)));
  using Member = Kokkos::TeamPolicy<zs::ExecSpace>::member_type;
  Kokkos::parallel_for(
      "zs::test::team_scratch", policy, KOKKOS_LAMBDA(const Member& team) {
        float* const s = static_cast<float*>(team.team_scratch(0).get_shmem(floats * sizeof(float)));
        const int t = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, floats),
                             [&](const std::int64_t i) { s[i] = value_of(i, t, salt); });
        team.team_barrier();
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, floats),
            [&](const std::int64_t i, double& acc) {
              const std::int64_t j = floats - 1 - i;  // another thread's store, most likely
              acc += static_cast<double>(s[j]) * static_cast<double>(j % 3);
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { out(t) = sum; });
      });
}

std::vector<double> expected(int teams, std::int64_t floats, int salt) {
  std::vector<double> e(static_cast<std::size_t>(teams), 0.0);
  for (int t = 0; t < teams; ++t)
    for (std::int64_t i = 0; i < floats; ++i)
      e[static_cast<std::size_t>(t)] += static_cast<double>(value_of(i, t, salt)) * static_cast<double>(i % 3);
  return e;
}

}  // namespace

TEST(TeamScratch, MoreThan48KiBATeamHoldsEveryValue) {
  zs::Stream stream;
  const int teams = 300;  // more than one wave of such teams on any GPU
  for (const std::int64_t kib : {40, 100, 160}) {
    SCOPED_TRACE(testing::Message() << kib << " KiB a team");
    const std::int64_t floats = kib * 1024 / static_cast<std::int64_t>(sizeof(float));
    Kokkos::View<double*, zs::MemSpace> out("zs::test::sums", teams);
    const int salt = static_cast<int>(zs::test::fresh_seed() % 1000);
    fill_and_sum(stream, out, floats, salt);
    stream.synchronize();
    const auto got = zs::test::to_host(out);
    const auto want = expected(teams, floats, salt);
    for (int t = 0; t < teams; ++t)
      ASSERT_EQ(got[static_cast<std::size_t>(t)], want[static_cast<std::size_t>(t)]) << "team " << t;
  }
}

TEST(TeamScratch, MoreThan48KiBATeamReplaysInAGraph) {
  // The launch that opts the kernel in runs directly first (as Graph::run does), then is
  // captured: the capture must stay free of hidden synchronisation and the replays right.
  zs::Stream stream;
  const int teams = 64;
  const std::int64_t floats = 120 * 1024 / static_cast<std::int64_t>(sizeof(float));
  Kokkos::View<double*, zs::MemSpace> out("zs::test::sums", teams);
  const int salt = static_cast<int>(zs::test::fresh_seed() % 1000);
  zs::Graph graph;
  for (int replay = 0; replay < 3; ++replay) {
    Kokkos::deep_copy(out, -1.0);
    graph.run(stream, [&] { fill_and_sum(stream, out, floats, salt); });
    stream.synchronize();
    const auto got = zs::test::to_host(out);
    const auto want = expected(teams, floats, salt);
    for (int t = 0; t < teams; ++t)
      ASSERT_EQ(got[static_cast<std::size_t>(t)], want[static_cast<std::size_t>(t)])
          << "replay " << replay << ", team " << t;
  }
  EXPECT_TRUE(graph.captured());
}
