// How many bytes a cycle one multiprocessor pulls from L2, by load pattern: the ceiling of any
// design in which a team streams weights that sit in L2 (the row blocks: each block reads every
// weight of the network, and on an H100 their clocks showed about 12 bytes a cycle). Each team of
// 256 threads reads the whole buffer (1 MB: in L2 after the first call) once; its first thread's
// cycle counter before and after gives the team's bytes a cycle (counter b_per_cycle, the median
// over the teams). Args: teams, loads in flight a thread, pattern:
//   0  16-byte loads, a warp's 32 lanes on 512 contiguous bytes;
//   1  4-byte loads, a warp on 128 contiguous bytes;
//   2  4-byte loads as an MMA B fragment of W row-major [n, k]: lane → row n = lane / 4, column
//      k = lane % 4, a warp on 8 rows 16 bytes each (how the row blocks load W).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.hpp"
#include "kernels/tile_clocks.hpp"

namespace {

constexpr std::int64_t kBufferBytes = std::int64_t{1} << 20;
constexpr int kThreads = 256;
// Pattern 2's row length in floats: a weight row of a 256-wide layer.
constexpr int kRow = 256;

struct alignas(16) Quad {
  float v[4];
};

template <int InFlight, int Pattern>
struct StreamTeam {
  using Member = typename Kokkos::TeamPolicy<zs::ExecSpace>::member_type;
  const float* buf = nullptr;
  float* sink = nullptr;
  std::uint64_t* clocks = nullptr;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int t = team.team_rank(), threads = team.team_size();
    zs::kernels::stamp_cycles(team, clocks, 2 * team.league_rank());
    float acc = 0.f;
    if (Pattern == 0) {
      const Quad* q = reinterpret_cast<const Quad*>(buf);
      const std::int64_t n = kBufferBytes / 16;
      for (std::int64_t i = t; i < n; i += static_cast<std::int64_t>(threads) * InFlight) {
        Quad r[InFlight];
        for (int u = 0; u < InFlight; ++u) {
          const std::int64_t j = i + static_cast<std::int64_t>(u) * threads;
          r[u] = j < n ? q[j] : Quad{};
        }
        for (int u = 0; u < InFlight; ++u) acc += r[u].v[0] + r[u].v[1] + r[u].v[2] + r[u].v[3];
      }
    } else if (Pattern == 1) {
      const std::int64_t n = kBufferBytes / 4;
      for (std::int64_t i = t; i < n; i += static_cast<std::int64_t>(threads) * InFlight) {
        float r[InFlight];
        for (int u = 0; u < InFlight; ++u) {
          const std::int64_t j = i + static_cast<std::int64_t>(u) * threads;
          r[u] = j < n ? buf[j] : 0.f;
        }
        for (int u = 0; u < InFlight; ++u) acc += r[u];
      }
    } else {
      // A warp's lane l reads row (8·g + l / 4), column (4·s + l % 4) for fragment (g, s): the
      // team's warps take fragments in turn, 8 rows × 4 columns each.
      // The host's one thread plays all 32 lanes.
      const bool warps_of_32 = threads >= 32;
      const int warp = warps_of_32 ? t / 32 : 0, warps = warps_of_32 ? threads / 32 : 1;
      const int lane0 = warps_of_32 ? t % 32 : 0, lane1 = warps_of_32 ? lane0 + 1 : 32;
      const std::int64_t fragments = kBufferBytes / 4 / 32;  // 32 floats each
      const std::int64_t per_row_block = kRow / 4;          // fragments along a block of 8 rows
      for (std::int64_t f = warp; f < fragments; f += static_cast<std::int64_t>(warps) * InFlight)
        for (int lane = lane0; lane < lane1; ++lane) {
          float r[InFlight];
          for (int u = 0; u < InFlight; ++u) {
            const std::int64_t g = f + static_cast<std::int64_t>(u) * warps;
            const std::int64_t row = (g / per_row_block) * 8 + lane / 4, col = (g % per_row_block) * 4 + lane % 4;
            r[u] = g < fragments ? buf[row * kRow + col] : 0.f;
          }
          for (int u = 0; u < InFlight; ++u) acc += r[u];
        }
    }
    sink[static_cast<std::int64_t>(team.league_rank()) * threads + t] = acc;  // keeps the loads
    team.team_barrier();
    zs::kernels::stamp_cycles(team, clocks, 2 * team.league_rank() + 1);
  }
};

template <int InFlight, int Pattern>
void stream_l2(benchmark::State& state, int teams) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, zs::MemSpace>::accessible;
  const int threads = host ? 1 : kThreads;
  Kokkos::View<float*, zs::MemSpace> buf("zs::bench::l2_stream", kBufferBytes / 4);
  Kokkos::deep_copy(buf, 1.f);
  Kokkos::View<float*, zs::MemSpace> sink("zs::bench::l2_sink", std::size_t(teams) * threads);
  Kokkos::View<std::uint64_t*, zs::MemSpace> clocks("zs::bench::l2_clocks", 2 * std::size_t(teams));
  zs::Stream stream;
  auto launch = [&](std::uint64_t* c) {
    Kokkos::parallel_for("zs::bench::l2_stream", Kokkos::TeamPolicy<zs::ExecSpace>(stream.exec(), teams, threads),
                         StreamTeam<InFlight, Pattern>{buf.data(), sink.data(), c});
  };
  zs::bench::time_on_stream(state, stream, [&] { launch(nullptr); }, 10);
  launch(clocks.data());
  stream.synchronize();
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), clocks);
  std::vector<double> rate;
  for (int b = 0; b < teams; ++b) rate.push_back(double(kBufferBytes) / double(h(2 * b + 1) - h(2 * b)));
  std::nth_element(rate.begin(), rate.begin() + rate.size() / 2, rate.end());
  state.counters["b_per_cycle"] = rate[rate.size() / 2];  // host: bytes a nanosecond
  state.counters["teams"] = teams;
}

void BM_L2Stream(benchmark::State& state) {
  const int teams = static_cast<int>(state.range(0));
  const int key = static_cast<int>(state.range(1) * 10 + state.range(2));
  switch (key) {
    case 10: return stream_l2<1, 0>(state, teams);
    case 40: return stream_l2<4, 0>(state, teams);
    case 80: return stream_l2<8, 0>(state, teams);
    case 11: return stream_l2<1, 1>(state, teams);
    case 41: return stream_l2<4, 1>(state, teams);
    case 81: return stream_l2<8, 1>(state, teams);
    case 161: return stream_l2<16, 1>(state, teams);
    case 12: return stream_l2<1, 2>(state, teams);
    case 42: return stream_l2<4, 2>(state, teams);
    case 82: return stream_l2<8, 2>(state, teams);
    case 162: return stream_l2<16, 2>(state, teams);
    default: state.SkipWithError("no such (in flight, pattern)");
  }
}
BENCHMARK(BM_L2Stream)
    ->ArgNames({"teams", "inflight", "pattern"})
    ->Args({1, 1, 0})->Args({1, 4, 0})->Args({1, 8, 0})->Args({48, 8, 0})->Args({132, 8, 0})
    ->Args({1, 4, 1})->Args({1, 8, 1})->Args({1, 16, 1})->Args({48, 16, 1})
    ->Args({1, 4, 2})->Args({1, 8, 2})->Args({1, 16, 2})->Args({48, 16, 2})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
