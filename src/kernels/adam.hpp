// Adam over the flat parameter buffer, with torch.optim.Adam's semantics (no weight decay,
// bias-corrected, t starting at 1), and the Polyak target update fused into the same pass. t and
// the bias corrections live on the device and advance only on steps the guard let through, so a
// captured graph replays correctly and a skipped step leaves no trace. The optimizer is two
// launches (a one-thread prepare and one elementwise pass): in a step of ~95 small graph nodes
// each launch removed saves a few microseconds.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/after_prior_grids.hpp"
#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/grad_clip.hpp"  // clip_coefficient, and detail::flat_block: the flat kernels' work split

namespace zs::kernels {

// Fixed for a run, so passed by value. Defaults are torch's.
struct AdamHyper {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Slots of the device state (a View<double*> of kAdamStateSize): t, 1 − β1^t, 1 − β2^t.
// Doubles: t is exact to 2^53 steps, and the corrections are computed as torch does.
enum AdamSlot : int { kAdamT = 0, kAdamBc1 = 1, kAdamBc2 = 2, kAdamStateSize = 3 };

// A zeroed state (t = 0: no step taken yet). Set-up only: it allocates.
template <class Mem = MemSpace>
Kokkos::View<double*, Mem> make_adam_state(const std::string& label = "zs::adam_state") {
  return Kokkos::View<double*, Mem>(label, kAdamStateSize);
}

template <class Exec>
struct AdamPrepare {
  Kokkos::View<double*, typename Exec::memory_space> state;
  Kokkos::View<const int, typename Exec::memory_space> skip;
  Kokkos::View<const double, typename Exec::memory_space> norm;
  Kokkos::View<float, typename Exec::memory_space> scale;
  double beta1, beta2, limit;

  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    // Every load before the first store (as GuardCheck's).
    const double n = norm();
    const int skipped = skip();
    const double t = state(kAdamT) + 1.0;
    // The clip scale rides in this thread rather than a launch of its own. It is written on
    // skipped steps too: the auxiliaries' budgeted sum reads it whether or not Adam applies it.
    scale() = static_cast<float>(clip_coefficient(n, limit));
    if (skipped != 0) return;
    state(kAdamT) = t;
    state(kAdamBc1) = 1.0 - ::pow(beta1, t);
    state(kAdamBc2) = 1.0 - ::pow(beta2, t);
  }
};

// How the elementwise step shares its elements among work items: runs of flat_block (the host's
// default: 2,048 contiguous elements; one on a device), or kAdamPerThread elements a grid apart
// (a device's default: coalesced, with every element's loads in flight before the first store).
// Either gives the same bits.
enum class AdamWork { runs, strided };
inline constexpr int kAdamPerThread = 4;
template <class Exec>
constexpr AdamWork adam_default_work() {
  return detail::flat_block<Exec>() > 1 ? AdamWork::runs : AdamWork::strided;
}
KOKKOS_INLINE_FUNCTION std::int64_t adam_strided_items(const std::size_t n) {
  return (static_cast<std::int64_t>(n) + kAdamPerThread - 1) / kAdamPerThread;
}

// The gradient Adam applies, element by element: grads × grad_scale (the clip scale, read on the
// device). A source gives its per-launch factors once a work item (factors), each element's
// gradient from them (at), and, where it also keeps what it gave (kStores), stores it (store).
template <class Exec>
struct ScaledGrad {
  Kokkos::View<const float*, typename Exec::memory_space> grads;
  Kokkos::View<const float, typename Exec::memory_space> grad_scale;
  static constexpr bool kStores = false;
  struct Factors {
    float s;
  };
  KOKKOS_INLINE_FUNCTION Factors factors() const { return {grad_scale()}; }
  // A zero scale (poisoned norm) means a zero gradient, not 0 × NaN.
  KOKKOS_INLINE_FUNCTION float at(const Factors& f, const std::int64_t i) const {
    return f.s == 0.f ? 0.f : grads(i) * f.s;
  }
  KOKKOS_INLINE_FUNCTION void store(std::int64_t, float) const {}
  std::size_t size() const { return grads.extent(0); }
};

template <class Exec, class Grad = ScaledGrad<Exec>>
struct AdamPolyakUpdate {
  Kokkos::View<float*, typename Exec::memory_space> params;
  Grad grad;
  Kokkos::View<float*, typename Exec::memory_space> m, v, target;
  Kokkos::View<const double*, typename Exec::memory_space> state;
  Kokkos::View<const int, typename Exec::memory_space> skip;
  Kokkos::View<const float, typename Exec::memory_space> lr;
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, tau, one_minus_tau;
  bool polyak = true;  // false: the target is left alone (a hard update copies it every N steps)
  AdamWork work = adam_default_work<Exec>();

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t item) const {
    // bc1 is 0 only before the first adam_prepare; updating then would divide by zero. A source
    // that keeps its gradient (the budgeted sum) stores it on those steps too.
    const bool apply = skip() == 0 && state(kAdamBc1) != 0.0;
    if (!apply && !Grad::kStores) return;
    const typename Grad::Factors f = grad.factors();
    const std::int64_t n = static_cast<std::int64_t>(params.extent(0));
    if (!apply) {
      store_only(item, f, n);
      return;
    }
    // As torch: step_size and sqrt(bc2) are scalars in double, the elementwise work in float.
    const float step_size = static_cast<float>(static_cast<double>(lr()) / state(kAdamBc1));
    const float bc2_sqrt = static_cast<float>(::sqrt(state(kAdamBc2)));
    if (work == AdamWork::runs) {
      std::int64_t begin, end;
      detail::flat_range<Exec>(item, params.extent(0), begin, end);
      for (std::int64_t i = begin; i < end; ++i) {
        const float g = grad.at(f, i);
        float mi = m(i), vi = v(i), p = params(i), t = polyak ? target(i) : 0.f;
        update(g, step_size, bc2_sqrt, mi, vi, p, t);
        grad.store(i, g);
        m(i) = mi;
        v(i) = vi;
        params(i) = p;
        if (polyak) target(i) = t;
      }
      return;
    }
    // The item's kAdamPerThread elements lie a grid apart (coalesced on a device), and every one's
    // loads are issued before the first store: the compiler cannot tell the buffers apart, so
    // loads after a store would each wait a memory latency.
    const std::int64_t items = adam_strided_items(params.extent(0));
    float g[kAdamPerThread], mi[kAdamPerThread], vi[kAdamPerThread], p[kAdamPerThread], t[kAdamPerThread];
    for (int u = 0; u < kAdamPerThread; ++u) {
      const std::int64_t i = item + u * items;
      const bool in = i < n;
      g[u] = in ? grad.at(f, i) : 0.f;
      mi[u] = in ? m(i) : 0.f;
      vi[u] = in ? v(i) : 0.f;
      p[u] = in ? params(i) : 0.f;
      t[u] = in && polyak ? target(i) : 0.f;
    }
    for (int u = 0; u < kAdamPerThread; ++u) {
      const std::int64_t i = item + u * items;
      if (i >= n) break;
      update(g[u], step_size, bc2_sqrt, mi[u], vi[u], p[u], t[u]);
      grad.store(i, g[u]);
      m(i) = mi[u];
      v(i) = vi[u];
      params(i) = p[u];
      if (polyak) target(i) = t[u];
    }
  }

  // The item's elements' gradients alone, where no update applies.
  KOKKOS_INLINE_FUNCTION void store_only(const std::int64_t item, const typename Grad::Factors& f,
                                         const std::int64_t n) const {
    if (work == AdamWork::runs) {
      std::int64_t begin, end;
      detail::flat_range<Exec>(item, params.extent(0), begin, end);
      for (std::int64_t i = begin; i < end; ++i) grad.store(i, grad.at(f, i));
      return;
    }
    const std::int64_t items = adam_strided_items(params.extent(0));
    float g[kAdamPerThread];
    for (int u = 0; u < kAdamPerThread; ++u) {
      const std::int64_t i = item + u * items;
      g[u] = i < n ? grad.at(f, i) : 0.f;
    }
    for (int u = 0; u < kAdamPerThread; ++u) {
      const std::int64_t i = item + u * items;
      if (i < n) grad.store(i, g[u]);
    }
  }

  // One element: torch's arithmetic on the scaled gradient g, then the target's move.
  KOKKOS_INLINE_FUNCTION void update(const float g, const float step_size, const float bc2_sqrt, float& mi, float& vi,
                                     float& p, float& t) const {
    mi = beta1 * mi + one_minus_beta1 * g;
    vi = beta2 * vi + one_minus_beta2 * g * g;
    const float denom = ::sqrtf(vi) / bc2_sqrt + eps;
    p = p - step_size * mi / denom;
    // The target moves toward the freshly updated online value, as a separate pass after
    // Adam would. (1 − τ)·target + τ·online rather than target + τ·(online − target): exact
    // at both ends, τ = 0 keeps the target and τ = 1 copies the online value bit for bit.
    if (polyak) t = one_minus_tau * t + tau * p;
  }
};

// The elementwise step's work items over n elements, shared as `work` says.
template <class Exec>
Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>> adam_policy(const Exec& exec, const std::size_t n,
                                                                       const AdamWork work) {
  if (work == AdamWork::runs) return detail::flat_policy(exec, n);
  return Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, adam_strided_items(n));
}

namespace detail {

inline void check_adam_hyper(const char* who, const AdamHyper& h) {
  require(std::isfinite(h.beta1) && h.beta1 >= 0.f && h.beta1 < 1.f, who, ": beta1 = ", h.beta1,
          " is invalid; expected a value in [0, 1)");
  require(std::isfinite(h.beta2) && h.beta2 >= 0.f && h.beta2 < 1.f, who, ": beta2 = ", h.beta2,
          " is invalid; expected a value in [0, 1)");
  require(std::isfinite(h.eps) && h.eps > 0.f, who, ": eps = ", h.eps,
          " is invalid; expected a finite value > 0");
}

template <class StateView>
void check_adam_state(const char* who, const StateView& state) {
  require(state.extent(0) == static_cast<std::size_t>(kAdamStateSize), who, ": the Adam state has ",
          state.extent(0), " slots; expected ", static_cast<int>(kAdamStateSize),
          " (t, bias correction 1, bias correction 2; see make_adam_state)");
}

}  // namespace detail

// Enqueues one thread: the clip scale min(1, limit / (norm + 1e-6)) into `scale` (0 for a
// NaN/Inf norm), and unless `skip` is set, t += 1 and the bias corrections for the new t. Run it
// once per step, before adam_polyak_update. `limit` is fixed for a run (budget fraction ×
// max_grad_norm), so it is passed by value.
// The same thread's work as a functor, its arguments checked, for a caller that runs it inside a
// launch of its own (grad_norms' tail).
template <class Exec>
AdamPrepare<Exec> make_adam_prepare(Kokkos::View<double*, typename Exec::memory_space> state,
                                    Kokkos::View<const int, typename Exec::memory_space> skip,
                                    Kokkos::View<const double, typename Exec::memory_space> norm,
                                    Kokkos::View<float, typename Exec::memory_space> scale, const float limit,
                                    const AdamHyper& hyper) {
  detail::check_adam_state("adam_prepare", state);
  detail::check_adam_hyper("adam_prepare", hyper);
  detail::check_limit("adam_prepare", limit);
  return AdamPrepare<Exec>{state, skip, norm, scale, hyper.beta1, hyper.beta2, static_cast<double>(limit)};
}

template <class Exec>
void adam_prepare(const Exec& exec, Kokkos::View<double*, typename Exec::memory_space> state,
                  Kokkos::View<const int, typename Exec::memory_space> skip,
                  Kokkos::View<const double, typename Exec::memory_space> norm,
                  Kokkos::View<float, typename Exec::memory_space> scale, const float limit,
                  const AdamHyper& hyper) {
  Kokkos::parallel_for("zs::adam_prepare", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                       make_adam_prepare<Exec>(state, skip, norm, scale, limit, hyper));
}

// The elementwise step's functor over `grad` (a gradient source: ScaledGrad, or BudgetSum for the
// auxiliaries' budgeted sum), its arguments checked; `who` names the caller in errors. With
// polyak false the target is neither read nor written (it may be empty).
template <class Exec, class Grad>
AdamPolyakUpdate<Exec, Grad> make_adam_step(const char* who, Kokkos::View<float*, typename Exec::memory_space> params,
                                            const Grad& grad, Kokkos::View<float*, typename Exec::memory_space> m,
                                            Kokkos::View<float*, typename Exec::memory_space> v,
                                            Kokkos::View<const double*, typename Exec::memory_space> state,
                                            Kokkos::View<const int, typename Exec::memory_space> skip,
                                            Kokkos::View<const float, typename Exec::memory_space> lr,
                                            const AdamHyper& hyper, Kokkos::View<float*, typename Exec::memory_space> target,
                                            const float tau, const bool polyak, const AdamWork work) {
  const std::size_t n = params.extent(0);
  require(n > 0, who, ": the parameter buffer is empty (0 elements); expected at least 1");
  const std::size_t t_n = polyak ? target.extent(0) : n;
  require(grad.size() == n && m.extent(0) == n && v.extent(0) == n && t_n == n, who, ": params has ", n,
          " elements but grads has ", grad.size(), ", m has ", m.extent(0), ", v has ", v.extent(0),
          polyak ? str(" and target has ", target.extent(0)) : std::string(), "; expected all of them to have ", n);
  detail::check_adam_state(who, state);
  detail::check_adam_hyper(who, hyper);
  require(!polyak || (std::isfinite(tau) && tau >= 0.f && tau <= 1.f), who, ": tau = ", tau,
          " is invalid; expected a value in [0, 1]");
  // 1 − β and 1 − τ computed in double then rounded once, as torch passes β.
  const auto one_minus = [](float b) { return static_cast<float>(1.0 - static_cast<double>(b)); };
  return AdamPolyakUpdate<Exec, Grad>{params,       grad,        m,           v,
                                      target,       state,       skip,        lr,
                                      hyper.beta1,  one_minus(hyper.beta1),   hyper.beta2,
                                      one_minus(hyper.beta2),    hyper.eps,   polyak ? tau : 0.f,
                                      polyak ? one_minus(tau) : 1.f,          polyak,
                                      work};
}

// Enqueues the elementwise Adam step on the flat buffers with g = grads × grad_scale (the clip
// scale), then target = (1 − τ)·target + τ·params with the updated params. With `skip` set
// nothing is written, target included. lr and grad_scale are read on the device, so a schedule
// can change lr without recapturing a graph. Before the first adam_prepare (t = 0) it writes
// nothing. τ is fixed for a run (passed by value) and must lie in [0, 1].
template <class Exec>
void adam_polyak_update(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> params,
                        Kokkos::View<const float*, typename Exec::memory_space> grads,
                        Kokkos::View<float*, typename Exec::memory_space> m,
                        Kokkos::View<float*, typename Exec::memory_space> v,
                        Kokkos::View<const double*, typename Exec::memory_space> state,
                        Kokkos::View<const int, typename Exec::memory_space> skip,
                        Kokkos::View<const float, typename Exec::memory_space> lr,
                        Kokkos::View<const float, typename Exec::memory_space> grad_scale,
                        const AdamHyper& hyper, Kokkos::View<float*, typename Exec::memory_space> target,
                        const float tau, const AdamWork work = adam_default_work<Exec>()) {
  const auto f = make_adam_step<Exec>("adam_polyak_update", params, ScaledGrad<Exec>{grads, grad_scale}, m, v, state,
                                      skip, lr, hyper, target, tau, true, work);
  Kokkos::parallel_for("zs::adam_polyak_update", adam_policy(exec, params.extent(0), work),
                       AfterPriorGrids<AdamPolyakUpdate<Exec>>(f));
}

// The same Adam step without a target update (the target then moves by hard_update).
template <class Exec>
void adam_update(const Exec& exec, Kokkos::View<float*, typename Exec::memory_space> params,
                 Kokkos::View<const float*, typename Exec::memory_space> grads,
                 Kokkos::View<float*, typename Exec::memory_space> m, Kokkos::View<float*, typename Exec::memory_space> v,
                 Kokkos::View<const double*, typename Exec::memory_space> state,
                 Kokkos::View<const int, typename Exec::memory_space> skip,
                 Kokkos::View<const float, typename Exec::memory_space> lr,
                 Kokkos::View<const float, typename Exec::memory_space> grad_scale, const AdamHyper& hyper,
                 const AdamWork work = adam_default_work<Exec>()) {
  Kokkos::parallel_for("zs::adam_update", adam_policy(exec, params.extent(0), work),
                       make_adam_step<Exec>("adam_update", params, ScaledGrad<Exec>{grads, grad_scale}, m, v, state,
                                            skip, lr, hyper, Kokkos::View<float*, typename Exec::memory_space>(),
                                            0.f, false, work));
}

}  // namespace zs::kernels
