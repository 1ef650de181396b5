// Epsilon-greedy action selection per branch on the device, from Q values [B, A_total] (a C51
// head's: kernels/c51_q.hpp), with the counter-based RNG.
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
#include "kernels/branch_table.hpp"
#include "kernels/c51_q.hpp"
#include "kernels/counter_rng.hpp"

namespace zs::kernels {

// Fixed per run: the seed, and a stream id that keeps independent users of one seed (e.g.
// several actors) on independent draws.
struct ActingRng {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
};

template <class Exec>
struct EpsilonGreedyQ {
  using Mem = typename Exec::memory_space;
  Kokkos::View<const float**, Kokkos::LayoutRight, Mem> q;
  Kokkos::View<const float, Mem> epsilon;
  Kokkos::View<const std::uint64_t, Mem> counter;
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Mem> actions;
  BranchTable branches;
  ActingRng rng;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t b = i / branches.branches;
    const int k = static_cast<int>(i % branches.branches);
    const int lo = branches.cum(k), n = branches.size(k);
    const std::uint64_t bits =
        counter_rng_bits(rng.seed, rng.stream, counter(), static_cast<std::uint64_t>(b), k);
    if (counter_rng_uniform(bits) < epsilon()) {
      actions(b, k) = counter_rng_index(bits, n);
    } else {
      actions(b, k) = greedy_action([&](const int a) { return q(b, lo + a); }, n);
    }
  }
};

namespace acting_impl {

template <class Exec, class Actions>
void check_actions(const char* who, const Actions& actions, std::size_t batch, const BranchTable& br) {
  require(batch >= 1, who, ": batch B = 0; expected at least 1 sample");
  require(actions.extent(0) == batch && actions.extent(1) == static_cast<std::size_t>(br.branches),
          who, ": actions is [", actions.extent(0), ", ", actions.extent(1), "]; expected [", batch,
          ", ", br.branches, "] (B x branches)");
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
  const BranchTable br = BranchTable::of(branches, who);
  acting_impl::check_actions<Exec>(who, actions, q.extent(0), br);
  require(q.extent(1) == static_cast<std::size_t>(br.actions), who,
          ": Q has A_total = ", q.extent(1), " columns; expected ", br.actions,
          " (the sum of the branch sizes)");
  Kokkos::parallel_for("zs::epsilon_greedy",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(
                           exec, 0, static_cast<std::int64_t>(q.extent(0)) * br.branches),
                       EpsilonGreedyQ<Exec>{q, epsilon, counter, actions, br, rng});
  advance_counter(exec, counter);
}

}  // namespace zs::kernels
