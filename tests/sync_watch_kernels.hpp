// What the SyncWatch tests record in a graph body: a flat kernel and a reduction over device
// floats (both legal inside a step), and the watch's findings as one printable text.
#pragma once
#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace zs::test {

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

struct Iota {
  DeviceFloats x;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const { x(i) = static_cast<float>(i); }
};

// A team per chunk of 256 elements, each thread adding its own into its own `s`. A team
// reduction because Kokkos 3.4's RangePolicy reduction trips racecheck (param_checksum.hpp says
// why); what the tests check (a reduction into a device View is legal in a step, into a host
// scalar it fences) holds for both.
struct Sum {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  static constexpr int kChunk = 256;
  DeviceFloats x;
  static Kokkos::TeamPolicy<ExecSpace> policy(const ExecSpace& exec, int n) {
    return Kokkos::TeamPolicy<ExecSpace>(exec, (n + kChunk - 1) / kChunk, Kokkos::AUTO);
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& s) const {
    const int n = static_cast<int>(x.extent(0));
    const int begin = team.league_rank() * kChunk;
    const int end = begin + kChunk < n ? begin + kChunk : n;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, begin, end), [&](const int i) { s += x(i); });
  }
};

}  // namespace zs::test
