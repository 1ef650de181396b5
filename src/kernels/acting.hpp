// Epsilon-greedy action selection per branch on the device, from Q values [B, A_total] or from
// C51 distributions [B, A_total, atoms] (Q = Σ_j p_j·z_j), with a counter-based RNG.
//
// Per (sample b, branch k), with n_k actions at columns offset_k .. offset_k + n_k − 1:
//   draw = hash(seed, stream, call counter, b, k); u = its top 24 bits / 2^24 in [0, 1)
//   u < ε  → uniform over the branch's n_k actions (the greedy one included, so the greedy
//            action's frequency is (1 − ε) + ε/n_k), index from the low 32 bits
//   else   → greedy: argmax of Q, lowest index on ties; NaN never wins, all-NaN → action 0
// ε is read from device memory on every call (schedules): ε ≤ 0 or NaN → always greedy,
// ε ≥ 1 → always uniform. The call counter lives in device memory; the launcher enqueues a
// one-thread kernel after the selection that adds 1 to it, so every graph replay draws fresh
// numbers and a run is reproducible from (seed, stream, starting counter).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::kernels {

inline constexpr int kMaxActionBranches = 32;

// Which columns belong to which branch; fixed for a run, so it travels by value in the launch.
struct ActionBranches {
  int count = 0;
  int offset[kMaxActionBranches + 1] = {};  // branch k: [offset[k], offset[k + 1])
  int total() const { return offset[count]; }
};

inline ActionBranches make_action_branches(const std::vector<int>& sizes, const char* who) {
  require(!sizes.empty() && sizes.size() <= static_cast<std::size_t>(kMaxActionBranches), who, ": ",
          sizes.size(), " branches given; expected 1..", kMaxActionBranches);
  ActionBranches b;
  b.count = static_cast<int>(sizes.size());
  for (int k = 0; k < b.count; ++k) {
    require(sizes[k] >= 1, who, ": branch ", k, " has ", sizes[k], " actions; expected at least 1");
    b.offset[k + 1] = b.offset[k] + sizes[k];
  }
  return b;
}

// Fixed per run: the seed, and a stream id that keeps independent users of one seed (e.g.
// several actors) on independent draws.
struct ActingRng {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
};

// SplitMix64's finaliser: a bijection on 64 bits with full avalanche.
KOKKOS_INLINE_FUNCTION std::uint64_t counter_rng_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stateless: 64 random bits as a pure function of the inputs (each absorbed through a full
// mix), so any draw can be recomputed on the host and no per-thread state is kept.
KOKKOS_INLINE_FUNCTION std::uint64_t counter_rng_bits(std::uint64_t seed, std::uint64_t stream,
                                                      std::uint64_t call, std::uint64_t sample,
                                                      std::uint64_t branch) {
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  std::uint64_t h = counter_rng_mix(seed + kGolden);
  h = counter_rng_mix((h ^ stream) + kGolden);
  h = counter_rng_mix((h ^ call) + kGolden);
  h = counter_rng_mix((h ^ sample) + kGolden);
  return counter_rng_mix((h ^ branch) + kGolden);
}

// Top 24 bits → a float in [0, 1), exactly representable.
KOKKOS_INLINE_FUNCTION float counter_rng_uniform(std::uint64_t bits) {
  return static_cast<float>(bits >> 40) * 0x1.0p-24f;
}

// Low 32 bits → 0..n−1 by multiply-shift (bias ≤ n/2^32: nothing a test or an agent sees).
KOKKOS_INLINE_FUNCTION int counter_rng_index(std::uint64_t bits, int n) {
  return static_cast<int>(((bits & 0xFFFFFFFFull) * static_cast<std::uint64_t>(n)) >> 32);
}

namespace acting_impl {

KOKKOS_INLINE_FUNCTION bool is_nan(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
}

// Lowest index among the maxima; NaN never wins; all NaN → 0.
template <class QOf>
KOKKOS_INLINE_FUNCTION int greedy(const QOf& q_of, const int n) {
  int best = 0;
  double best_q = q_of(0);
  bool best_nan = is_nan(best_q);
  for (int a = 1; a < n; ++a) {
    const double x = q_of(a);
    if (is_nan(x)) continue;
    if (best_nan || x > best_q) {
      best = a;
      best_q = x;
      best_nan = false;
    }
  }
  return best;
}

}  // namespace acting_impl

template <class Exec>
struct EpsilonGreedyQ {
  using Mem = typename Exec::memory_space;
  Kokkos::View<const float**, Kokkos::LayoutRight, Mem> q;
  Kokkos::View<const float, Mem> epsilon;
  Kokkos::View<const std::uint64_t, Mem> counter;
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Mem> actions;
  ActionBranches branches;
  ActingRng rng;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t b = i / branches.count;
    const int k = static_cast<int>(i % branches.count);
    const int lo = branches.offset[k], n = branches.offset[k + 1] - lo;
    const std::uint64_t bits =
        counter_rng_bits(rng.seed, rng.stream, counter(), static_cast<std::uint64_t>(b), k);
    if (counter_rng_uniform(bits) < epsilon()) {
      actions(b, k) = counter_rng_index(bits, n);
    } else {
      actions(b, k) = acting_impl::greedy([&](const int a) { return double(q(b, lo + a)); }, n);
    }
  }
};

template <class Exec>
struct EpsilonGreedyC51 {
  using Mem = typename Exec::memory_space;
  Kokkos::View<const float***, Kokkos::LayoutRight, Mem> probs;
  Kokkos::View<const float*, Mem> support;
  Kokkos::View<const float, Mem> epsilon;
  Kokkos::View<const std::uint64_t, Mem> counter;
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Mem> actions;
  ActionBranches branches;
  ActingRng rng;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t b = i / branches.count;
    const int k = static_cast<int>(i % branches.count);
    const int lo = branches.offset[k], n = branches.offset[k + 1] - lo;
    const std::uint64_t bits =
        counter_rng_bits(rng.seed, rng.stream, counter(), static_cast<std::uint64_t>(b), k);
    if (counter_rng_uniform(bits) < epsilon()) {
      actions(b, k) = counter_rng_index(bits, n);
      return;  // exploring: the expectations are not needed
    }
    const int atoms = static_cast<int>(support.extent(0));
    // Expected values in double: near-ties between actions are decided the same way as by
    // a double reference, not by float rounding of a 51-term sum.
    actions(b, k) = acting_impl::greedy(
        [&](const int a) {
          // Four partial sums: independent adds rather than one 51-long dependency chain.
          const float* const p = &probs(b, lo + a, 0);
          double part[4] = {0.0, 0.0, 0.0, 0.0};
          int j = 0;
          for (; j + 4 <= atoms; j += 4)
            for (int t = 0; t < 4; ++t)
              part[t] += static_cast<double>(p[j + t]) * static_cast<double>(support(j + t));
          for (; j < atoms; ++j)
            part[0] += static_cast<double>(p[j]) * static_cast<double>(support(j));
          return (part[0] + part[1]) + (part[2] + part[3]);
        },
        n);
  }
};

template <class Exec>
struct AdvanceActingCounter {
  Kokkos::View<std::uint64_t, typename Exec::memory_space> counter;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const { counter() += 1; }
};

namespace acting_impl {

template <class Exec, class Actions>
void check_actions(const char* who, const Actions& actions, std::size_t batch,
                   const ActionBranches& br) {
  require(batch >= 1, who, ": batch B = 0; expected at least 1 sample");
  require(actions.extent(0) == batch && actions.extent(1) == static_cast<std::size_t>(br.count),
          who, ": actions is [", actions.extent(0), ", ", actions.extent(1), "]; expected [", batch,
          ", ", br.count, "] (B x branches)");
}

template <class Exec>
void advance(const Exec& exec,
             const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter) {
  Kokkos::parallel_for("zs::acting_counter", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       AdvanceActingCounter<Exec>{counter});
}

}  // namespace acting_impl

// Enqueues epsilon-greedy selection from Q [B, A_total] into actions [B, branches] (int32),
// then the counter's increment, on `exec`. `branches` lists each branch's action count
// (A_total = their sum). Throws zs::Error on a shape mismatch.
template <class Exec>
void epsilon_greedy(
    const Exec& exec,
    Kokkos::View<const float**, Kokkos::LayoutRight, typename Exec::memory_space> q,
    const std::vector<int>& branches,
    Kokkos::View<const float, typename Exec::memory_space> epsilon,
    Kokkos::View<std::uint64_t, typename Exec::memory_space> counter, const ActingRng& rng,
    Kokkos::View<std::int32_t**, Kokkos::LayoutRight, typename Exec::memory_space> actions) {
  constexpr const char* who = "epsilon_greedy";
  const ActionBranches br = make_action_branches(branches, who);
  acting_impl::check_actions<Exec>(who, actions, q.extent(0), br);
  require(q.extent(1) == static_cast<std::size_t>(br.total()), who,
          ": Q has A_total = ", q.extent(1), " columns; expected ", br.total(),
          " (the sum of the branch sizes)");
  Kokkos::parallel_for("zs::epsilon_greedy",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(q.extent(0)) * br.count),
                       EpsilonGreedyQ<Exec>{q, epsilon, counter, actions, br, rng});
  acting_impl::advance(exec, counter);
}

// The same from C51 probabilities [B, A_total, atoms] and the support z [atoms]: greedy on
// Q = Σ_j p·z_j, computed in the kernel. NaN in a distribution makes that action's Q NaN (it
// never wins). Throws zs::Error on a shape mismatch.
template <class Exec>
void epsilon_greedy_c51(
    const Exec& exec,
    Kokkos::View<const float***, Kokkos::LayoutRight, typename Exec::memory_space> probs,
    Kokkos::View<const float*, typename Exec::memory_space> support,
    const std::vector<int>& branches,
    Kokkos::View<const float, typename Exec::memory_space> epsilon,
    Kokkos::View<std::uint64_t, typename Exec::memory_space> counter, const ActingRng& rng,
    Kokkos::View<std::int32_t**, Kokkos::LayoutRight, typename Exec::memory_space> actions) {
  constexpr const char* who = "epsilon_greedy_c51";
  const ActionBranches br = make_action_branches(branches, who);
  acting_impl::check_actions<Exec>(who, actions, probs.extent(0), br);
  require(probs.extent(1) == static_cast<std::size_t>(br.total()), who,
          ": probabilities have A_total = ", probs.extent(1), " actions; expected ", br.total(),
          " (the sum of the branch sizes)");
  require(support.extent(0) >= 1, who, ": the support has 0 atoms; expected at least 1");
  require(probs.extent(2) == support.extent(0), who, ": probabilities have ", probs.extent(2),
          " atoms; expected ", support.extent(0), " (the support's size)");
  Kokkos::parallel_for("zs::epsilon_greedy_c51",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(probs.extent(0)) * br.count),
                       EpsilonGreedyC51<Exec>{probs, support, epsilon, counter, actions, br, rng});
  acting_impl::advance(exec, counter);
}

}  // namespace zs::kernels
