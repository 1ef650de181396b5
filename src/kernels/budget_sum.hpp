// The gradient Adam applies when auxiliaries are on, in one pass: C51's gradient at its clip
// scale plus each auxiliary's gradient clipped to its own budget,
//   applied = s·g_c51 + Σ_b min(1, limit_b / (‖g_b‖ + 1e-6))·g_b,
// C51's term first, then the auxiliaries in the trainer's order, each product added to the sum
// in that order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/grad_clip.hpp"
#include "kernels/term_limits.hpp"

namespace zs::kernels {

// Every term but C51, whose gradient comes apart (it is scaled by adam_prepare's clip scale).
inline constexpr int kMaxAuxiliaries = kMaxTerms - 1;

struct BudgetTerm {
  const float* grad = nullptr;  // the auxiliary's whole-layout gradient
  const double* norm = nullptr;  // its ‖grad‖₂ on the device
  double limit = 0;              // budget fraction × max_grad_norm
  // Where grad may be nonzero (LossTerm::gradient_spans): [begin[s], end[s]) for s = 0, 1; zeros
  // elsewhere, which the sum then does not read. end[0] = −1: the whole buffer.
  std::int64_t begin[2] = {0, 0}, end[2] = {-1, 0};
};

// Also a gradient source of Adam's step (kernels/adam.hpp: factors, at, store): Adam then forms
// the sum element by element, keeping it in dst, with no pass of its own.
template <class Exec>
struct BudgetSum {
  using MS = typename Exec::memory_space;
  Kokkos::View<float*, MS> dst;
  Kokkos::View<const float*, MS> c51;
  Kokkos::View<const float, MS> scale;
  BudgetTerm aux[kMaxAuxiliaries];
  int n_aux = 0;

  static constexpr bool kStores = true;
  struct Factors {
    float s;
    float sa[kMaxAuxiliaries];
  };

  KOKKOS_INLINE_FUNCTION static bool holds(const BudgetTerm& t, std::int64_t i) {
    return t.end[0] < 0 || (i >= t.begin[0] && i < t.end[0]) || (i >= t.begin[1] && i < t.end[1]);
  }

  KOKKOS_INLINE_FUNCTION Factors factors() const {
    Factors f;
    f.s = scale();
    for (int b = 0; b < n_aux; ++b) f.sa[b] = static_cast<float>(clip_coefficient(*aux[b].norm, aux[b].limit));
    return f;
  }
  // A zero coefficient (poisoned auxiliary, or a zero budget) adds nothing at all.
  KOKKOS_INLINE_FUNCTION float at(const Factors& f, const std::int64_t i) const {
    float v = f.s == 0.f ? 0.f : f.s * c51(i);  // 0 × NaN would be NaN
    for (int b = 0; b < n_aux; ++b)
      if (f.sa[b] != 0.f && holds(aux[b], i)) v += f.sa[b] * aux[b].grad[i];
    return v;
  }
  KOKKOS_INLINE_FUNCTION void store(const std::int64_t i, const float v) const { dst(i) = v; }
  std::size_t size() const { return dst.extent(0); }

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    const Factors f = factors();
    std::int64_t begin, end;
    detail::flat_range<Exec>(item, dst.extent(0), begin, end);
    for (std::int64_t i = begin; i < end; ++i) store(i, at(f, i));
  }
};

// The sum's functor, its arguments checked: dst = scale·c51 + the clipped auxiliaries. Every
// buffer has dst's length.
template <class Exec>
BudgetSum<Exec> make_budget_sum(Kokkos::View<float*, typename Exec::memory_space> dst,
                                Kokkos::View<const float*, typename Exec::memory_space> c51,
                                Kokkos::View<const float, typename Exec::memory_space> scale,
                                const std::vector<BudgetTerm>& aux) {
  require(dst.extent(0) == c51.extent(0) && dst.extent(0) > 0, "budget_sum: dst has ", dst.extent(0),
          " elements and the C51 gradient ", c51.extent(0), "; expected the same length, at least 1");
  require(aux.size() <= static_cast<std::size_t>(kMaxAuxiliaries), "budget_sum: ", aux.size(),
          " auxiliaries; expected at most ", kMaxAuxiliaries);
  BudgetSum<Exec> f{dst, c51, scale, {}, static_cast<int>(aux.size())};
  for (std::size_t b = 0; b < aux.size(); ++b) {
    require(aux[b].grad && aux[b].norm, "budget_sum: auxiliary ", b, " has a null gradient or norm; expected both");
    const std::int64_t n = static_cast<std::int64_t>(dst.extent(0));
    const bool whole = aux[b].end[0] < 0;
    for (int s = 0; s < 2 && !whole; ++s)
      require(aux[b].begin[s] >= 0 && aux[b].begin[s] <= aux[b].end[s] && aux[b].end[s] <= n, "budget_sum: auxiliary ",
              b, "'s span ", s, " is [", aux[b].begin[s], ", ", aux[b].end[s], "); expected a piece of the ", n,
              " floats");
    detail::check_limit("budget_sum", static_cast<float>(aux[b].limit));
    f.aux[b] = aux[b];
  }
  return f;
}

// Enqueues the sum (a make_budget_sum functor) as a launch of its own.
template <class Exec>
void budget_sum(const Exec& exec, const BudgetSum<Exec>& sum) {
  Kokkos::parallel_for("zs::budget_sum", detail::flat_policy(exec, sum.dst.extent(0)), sum);
}

// Enqueues dst = scale·c51 + the clipped auxiliaries.
template <class Exec>
void budget_sum(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> dst,
                Kokkos::View<const float*, typename Exec::memory_space> c51,
                Kokkos::View<const float, typename Exec::memory_space> scale, const std::vector<BudgetTerm>& aux) {
  budget_sum(exec, make_budget_sum<Exec>(dst, c51, scale, aux));
}

}  // namespace zs::kernels
