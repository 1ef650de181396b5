// A bit-exact fingerprint of float buffers for comparing the ranks of a data-parallel run: the
// sum, mod 2^64, of a 64-bit mix of each element's position and bits. Integer addition is
// associative, so the reduction order (teams, threads, backend) never changes it; any changed
// bit or moved value does (but for a 2^-64 chance).
#pragma once
#include <cstdint>
#include <cstring>

#include "backends/backend.hpp"
#include "kernels/counter_rng.hpp"

namespace zs::kernels {

// The record the host reads, lagged, through a mailbox: the fingerprint in two exact halves and
// the training step it was taken after.
struct ParamChecksum {
  double step = -1;  // steps the parameters had taken; −1: none taken yet
  double high = 0, low = 0;  // the 64-bit fingerprint's upper and lower 32 bits
};

KOKKOS_INLINE_FUNCTION std::uint64_t fingerprint_term(std::uint64_t position, float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return counter_rng_mix((position << 32) ^ bits ^ 0x5bd1e9955bd1e995ull);
}

// Elements [0, a.size) of a, then b, as one sequence of positions; a team per chunk of
// positions. A team reduction, not a RangePolicy one: Kokkos 3.4's RangePolicy reduction on CUDA
// shares partial sums between a warp's lanes through shared memory without a warp barrier
// between each read and the next write, which compute-sanitizer's racecheck reports as hazards
// (docs/gpu.md); the team reduction combines lanes with shuffles.
template <class Exec>
struct Fingerprint {
  using value_type = std::uint64_t;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  static constexpr std::int64_t kChunk = 4096;
  Kokkos::View<const float*, typename Exec::memory_space> a, b;
  std::int64_t size() const { return static_cast<std::int64_t>(a.extent(0) + b.extent(0)); }
  int league() const { return static_cast<int>(size() / kChunk + 1); }
  // Every thread adds its own positions to its own `sum`; Kokkos adds the threads' sums.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, std::uint64_t& sum) const {
    const auto na = static_cast<std::int64_t>(a.extent(0));
    const std::int64_t n = na + static_cast<std::int64_t>(b.extent(0));
    const std::int64_t begin = team.league_rank() * kChunk;
    const std::int64_t end = begin + kChunk < n ? begin + kChunk : n;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, begin, end < begin ? begin : end), [&](const std::int64_t i) {
      sum += fingerprint_term(static_cast<std::uint64_t>(i), i < na ? a(i) : b(i - na));
    });
  }
};

template <class Exec>
struct WriteChecksum {
  Kokkos::View<const std::uint64_t, typename Exec::memory_space> sum;
  Kokkos::View<const std::int64_t, typename Exec::memory_space> step;
  Kokkos::View<ParamChecksum, typename Exec::memory_space> record;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    const std::uint64_t s = sum();
    record().step = static_cast<double>(step());
    record().high = static_cast<double>(s >> 32);
    record().low = static_cast<double>(s & 0xFFFFFFFFull);
  }
};

// Enqueues the fingerprint of a then b into `sum` (device memory; no fence).
template <class Exec>
void fingerprint(const Exec& exec, const Kokkos::View<const float*, typename Exec::memory_space>& a,
                 const Kokkos::View<const float*, typename Exec::memory_space>& b,
                 const Kokkos::View<std::uint64_t, typename Exec::memory_space>& sum) {
  const Fingerprint<Exec> f{a, b};
  Kokkos::parallel_reduce("zs::param_fingerprint", Kokkos::TeamPolicy<Exec>(exec, f.league(), Kokkos::AUTO), f, sum);
}

}  // namespace zs::kernels
