// The counter-based RNG every device draw uses (acting, environments, replay sampling, IQN's τ):
// 64 random bits as a pure function of (seed, stream, call counter, sample, slot), so a draw keeps
// no per-thread state, any draw can be recomputed on the host, and a captured graph draws fresh
// numbers by reading its call counter from device memory.
#pragma once
#include <cstdint>

#include "backends/backend.hpp"

namespace zs::kernels {

// SplitMix64's finaliser: a bijection on 64 bits with full avalanche.
KOKKOS_INLINE_FUNCTION std::uint64_t counter_rng_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Each input absorbed through a full mix.
KOKKOS_INLINE_FUNCTION std::uint64_t counter_rng_bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t call,
                                                      std::uint64_t sample, std::uint64_t slot) {
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  std::uint64_t h = counter_rng_mix(seed + kGolden);
  h = counter_rng_mix((h ^ stream) + kGolden);
  h = counter_rng_mix((h ^ call) + kGolden);
  h = counter_rng_mix((h ^ sample) + kGolden);
  return counter_rng_mix((h ^ slot) + kGolden);
}

// Top 24 bits → a float in [0, 1), exactly representable.
KOKKOS_INLINE_FUNCTION float counter_rng_uniform(std::uint64_t bits) {
  return static_cast<float>(bits >> 40) * 0x1.0p-24f;
}

// Low 32 bits → 0..n−1 by multiply-shift (bias ≤ n/2^32: nothing a test or an agent sees).
KOKKOS_INLINE_FUNCTION int counter_rng_index(std::uint64_t bits, int n) {
  return static_cast<int>(((bits & 0xFFFFFFFFull) * static_cast<std::uint64_t>(n)) >> 32);
}

template <class Exec>
struct AdvanceCounter {
  Kokkos::View<std::uint64_t, typename Exec::memory_space> counter;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const { counter() += 1; }
};

// Enqueues call counter += 1: a launcher that draws enqueues it after its draws, so every graph
// replay draws fresh numbers.
template <class Exec>
void advance_counter(const Exec& exec, const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter) {
  Kokkos::parallel_for("zs::rng_counter", Kokkos::RangePolicy<Exec>(exec, 0, 1), AdvanceCounter<Exec>{counter});
}

}  // namespace zs::kernels
