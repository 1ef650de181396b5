// The IQN head's device pieces: τ samples and their cosine features from the
// counter-based RNG, the trunk-feature modulation φ(τ) ⊙ f and its backward, and the quantile
// Huber loss against the target net's quantiles at the double-DQN action.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/branch_table.hpp"
#include "kernels/counter_rng.hpp"
#include "kernels/c51_head.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

// Independent draws for the online τ and the target τ′ (the RNG's stream argument).
enum IqnStream : std::uint64_t { kIqnOnlineStream = 0x1a0, kIqnTargetStream = 0x1a1 };

// τ of row r (= sample·N + n) of one side at RNG call `call`: the top 24 bits + ½, so τ ∈ (0, 1)
// is never exactly 0 or 1. Host-callable: tests recompute τ from the seed.
KOKKOS_INLINE_FUNCTION float iqn_tau(std::uint64_t seed, std::uint64_t stream, std::uint64_t call, std::uint64_t row) {
  const std::uint64_t bits = counter_rng_bits(seed, stream, call, row, 0);
  return (static_cast<float>(bits >> 40) + 0.5f) * 0x1.0p-24f;
}

// Rows [0, R) are the online side, [R, 2R) the target side. Reads the call counter from the device.
// Row r draws as global row first_row + r, so that the ranks of a data-parallel run, each with
// its slice of the global batch, draw what one process with the whole batch would.
template <class Exec>
struct IqnSample {
  using MS = typename Exec::memory_space;
  Kokkos::View<const std::uint64_t, MS> counter;
  Kokkos::View<float*, MS> tau;                              // [2R]
  Kokkos::View<float**, Kokkos::LayoutRight, MS> cosines;    // [2R, E]: cos(π·e·τ)
  std::uint64_t seed;
  int rows;  // R = B·N
  std::uint64_t first_row = 0;

  KOKKOS_INLINE_FUNCTION float draw(const int r) const {
    const bool target = r >= rows;
    return iqn_tau(seed, target ? kIqnTargetStream : kIqnOnlineStream, counter(),
                   first_row + static_cast<std::uint64_t>(target ? r - rows : r));
  }
  KOKKOS_INLINE_FUNCTION static float cosine(int e, float t) {
    return ::cosf(3.14159265358979f * static_cast<float>(e) * t);
  }
  // A device thread per (feature e, row r), so that a warp writes consecutive floats of a row (a
  // thread per row wrote E floats a row apart); each draws its row's τ (a few integer rounds).
  KOKKOS_INLINE_FUNCTION void operator()(const int e, const int r) const {
    const float t = draw(r);
    if (e == 0) tau(r) = t;
    cosines(r, e) = cosine(e, t);
  }
  // A host thread per row: it draws τ once.
  KOKKOS_INLINE_FUNCTION void operator()(const int r) const {
    const float t = draw(r);
    tau(r) = t;
    for (int e = 0; e < static_cast<int>(cosines.extent(1)); ++e) cosines(r, e) = cosine(e, t);
  }
};

template <class Exec>
struct IqnAdvance {
  Kokkos::View<std::uint64_t, typename Exec::memory_space> counter;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const { counter() += 1; }
};

// Draws τ for both sides and their cosine features, then advances the counter (one thread,
// after the draws), so every graph replay samples afresh and a run is reproducible from the seed.
// advance false: the caller advances it later in the step (IqnLoss::advance).
template <class Exec>
void iqn_sample(const Exec& exec, const Kokkos::View<std::uint64_t, typename Exec::memory_space>& counter,
                const Kokkos::View<float*, typename Exec::memory_space>& tau,
                const Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space>& cosines,
                std::uint64_t seed, int rows, std::uint64_t first_row = 0, bool advance = true) {
  require(rows >= 1 && tau.extent(0) == 2 * static_cast<std::size_t>(rows) && cosines.extent(0) == tau.extent(0) &&
              cosines.extent(1) >= 1,
          "iqn_sample: ", rows, " rows per side, tau [", tau.extent(0), "], cosines [", cosines.extent(0), ", ",
          cosines.extent(1), "]; expected rows >= 1, tau [2·rows] and cosines [2·rows, >= 1]");
  const IqnSample<Exec> f{counter, tau, cosines, seed, rows, first_row};
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  if (host) {
    Kokkos::parallel_for("zs::iqn_sample", Kokkos::RangePolicy<Exec>(exec, 0, 2 * rows), f);
  } else {
    // Blocks of 32 features × 4 rows (Kokkos 3.4's CUDA MDRange puts threadIdx.x on index 0).
    using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2, Kokkos::Iterate::Left, Kokkos::Iterate::Left>>;
    const typename Policy::point_type begin{0, 0},
        end{static_cast<std::int64_t>(cosines.extent(1)), static_cast<std::int64_t>(2) * rows};
    Kokkos::parallel_for("zs::iqn_sample", Policy(exec, begin, end, typename Policy::tile_type{32, 4}), f);
  }
  if (advance)
    Kokkos::parallel_for("zs::iqn_advance", Kokkos::RangePolicy<Exec>(exec, 0, 1), IqnAdvance<Exec>{counter});
}

template <class Exec>
using IqnMat = Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space, Kokkos::MemoryUnmanaged>;
template <class Exec>
using IqnConstMat = Kokkos::View<const float**, Kokkos::LayoutRight, typename Exec::memory_space, Kokkos::MemoryUnmanaged>;

// phi holds W_emb·cos on entry: φ = ReLU(phi + b) in place, h = f(sample) ⊙ φ.
// The index order is (f, n, i), fastest-varying memory first: Kokkos 3.4's CUDA MDRange puts
// threadIdx.x on index 0 whatever the Iterate order, so a warp then reads 32 consecutive floats
// of one row, and Iterate::Left makes the host's innermost loop run along that row too.
template <class Exec>
struct IqnModulate {
  IqnMat<Exec> phi, h;              // [B·N, F]
  IqnConstMat<Exec> features;       // [B, F]
  Kokkos::View<const float*, typename Exec::memory_space, Kokkos::MemoryUnmanaged> bias;  // [F]
  int n_tau;
  KOKKOS_INLINE_FUNCTION void operator()(const int f, const int n, const int i) const {
    const int r = i * n_tau + n;
    const float v = phi(r, f) + bias(f);
    const float p = v < 0.f ? 0.f : v;  // NaN stays NaN
    phi(r, f) = p;
    h(r, f) = features(i, f) * p;
  }
};

// Two modulations of one shape (the online net's on s and the target's on s′) in one launch:
// samples [0, B) are the first's, [B, 2B) the second's.
template <class Exec>
struct IqnModulatePair {
  IqnModulate<Exec> first, second;
  int batch;
  KOKKOS_INLINE_FUNCTION void operator()(const int f, const int n, const int i) const {
    if (i < batch)
      first(f, n, i);
    else
      second(f, n, i - batch);
  }
};

namespace iqn_detail {
template <class Exec>
void check(const IqnModulate<Exec>& m, std::size_t B, std::size_t F, int n_tau) {
  require(m.n_tau == n_tau && n_tau >= 1 && m.features.extent(0) == B && m.features.extent(1) == F &&
              m.phi.extent(0) == B * m.n_tau && m.phi.extent(1) == F && m.h.extent(0) == B * m.n_tau &&
              m.h.extent(1) == F && m.bias.extent(0) == F,
          "iqn_modulate: features [", m.features.extent(0), ", ", m.features.extent(1), "], n_tau ", m.n_tau,
          ", phi [", m.phi.extent(0), ", ", m.phi.extent(1), "], h [", m.h.extent(0), ", ", m.h.extent(1),
          "], bias [", m.bias.extent(0), "]; expected features [", B, ", ", F, "], n_tau ", n_tau,
          ", phi and h [B·n_tau, F] and bias [F]");
}

// The modulation over `samples` samples of n_tau rows of F features each.
template <class Exec, class Functor>
void launch(const Exec& exec, const Functor& f, std::size_t samples, std::size_t F, int n_tau) {
  using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<3, Kokkos::Iterate::Left, Kokkos::Iterate::Left>>;
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const typename Policy::point_type begin{0, 0, 0},
      end{static_cast<std::int64_t>(F), static_cast<std::int64_t>(n_tau), static_cast<std::int64_t>(samples)};
  // Device: blocks of 32 features × 8 samples at one n, a warp along a row; the host keeps
  // Kokkos' tiles (a whole row innermost).
  const Policy policy =
      host ? Policy(exec, begin, end) : Policy(exec, begin, end, typename Policy::tile_type{32, 1, 8});
  Kokkos::parallel_for("zs::iqn_modulate", policy, f);
}
}  // namespace iqn_detail

template <class Exec>
void iqn_modulate(const Exec& exec, const IqnModulate<Exec>& m) {
  const std::size_t B = m.features.extent(0), F = m.features.extent(1);
  iqn_detail::check(m, B, F, m.n_tau);
  iqn_detail::launch(exec, m, B, F, m.n_tau);
}

// Both in one launch; they must have the same shape.
template <class Exec>
void iqn_modulate(const Exec& exec, const IqnModulate<Exec>& first, const IqnModulate<Exec>& second) {
  const std::size_t B = first.features.extent(0), F = first.features.extent(1);
  iqn_detail::check(first, B, F, first.n_tau);
  iqn_detail::check(second, B, F, first.n_tau);
  iqn_detail::launch(exec, IqnModulatePair<Exec>{first, second, static_cast<int>(B)}, 2 * B, F, first.n_tau);
}

// Backward of the modulation: d_h [B·N, F] → d_phi (pre-ReLU, in place of nothing else) and
// d_features[i, f] = Σ_n d_h·φ (summed over n in order: deterministic). Indexed (f, i), the
// contiguous dimension first, for the reason IqnModulate gives.
template <class Exec>
struct IqnModulateBackward {
  IqnConstMat<Exec> d_h, phi, features;
  IqnMat<Exec> d_phi, d_features;
  int n_tau;
  // d_features through the ReLU that made `features` too (zero where a feature is <= 0; a NaN
  // keeps its gradient), as the trunk's backward would take it (FusedRider::features_given).
  int through_relu = 0;
  KOKKOS_INLINE_FUNCTION void operator()(const int f, const int i) const {
    float acc = 0.f;
    const float x = features(i, f);
    for (int n = 0; n < n_tau; ++n) {
      const int r = i * n_tau + n;
      const float g = d_h(r, f), p = phi(r, f);
      acc += g * p;
      d_phi(r, f) = p <= 0.f ? 0.f : g * x;  // a NaN φ keeps its gradient, like relu_backward
    }
    d_features(i, f) = through_relu && x <= 0.f ? 0.f : acc;
  }
};

template <class Exec>
void iqn_modulate_backward(const Exec& exec, const IqnModulateBackward<Exec>& m) {
  const std::size_t B = m.features.extent(0), F = m.features.extent(1), R = B * static_cast<std::size_t>(m.n_tau);
  require(m.n_tau >= 1 && m.d_h.extent(0) == R && m.d_h.extent(1) == F && m.phi.extent(0) == R &&
              m.phi.extent(1) == F && m.d_phi.extent(0) == R && m.d_phi.extent(1) == F &&
              m.d_features.extent(0) == B && m.d_features.extent(1) == F,
          "iqn_modulate_backward: features [", B, ", ", F, "], n_tau ", m.n_tau, "; expected d_h, phi, d_phi [", R,
          ", ", F, "] and d_features [", B, ", ", F, "], got [", m.d_h.extent(0), ", ", m.d_h.extent(1), "], [",
          m.phi.extent(0), ", ", m.phi.extent(1), "], [", m.d_phi.extent(0), ", ", m.d_phi.extent(1), "], [",
          m.d_features.extent(0), ", ", m.d_features.extent(1), "]");
  using Policy = Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2, Kokkos::Iterate::Left, Kokkos::Iterate::Left>>;
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const typename Policy::point_type begin{0, 0}, end{static_cast<std::int64_t>(F), static_cast<std::int64_t>(B)};
  // Device: blocks of 32 features × 8 samples, a warp along a row.
  const Policy policy = host ? Policy(exec, begin, end) : Policy(exec, begin, end, typename Policy::tile_type{32, 8});
  Kokkos::parallel_for("zs::iqn_modulate_backward", policy, m);
}

// Quantile Huber loss. Per branch k, with θ_n = Z(s, a_k, τ_n) (online) and
// T_m = r + γⁿ(1 − done)·Z′(s′, a*_k, τ′_m) (target net, a* the C51 double-DQN action):
//   δ_nm = T_m − θ_n, L_κ(δ) = ½δ² if |δ| ≤ κ else κ(|δ| − ½κ),
//   ρ_nm = |τ_n − [δ_nm < 0]|·L_κ(δ_nm)/κ,  loss_ik = Σ_n (1/N′)·Σ_m ρ_nm,
//   L_i = (1/K)·Σ_k loss_ik,  loss = (1/B)·Σ_i w_i·L_i.
template <class Exec>
struct IqnLoss {
  using MS = typename Exec::memory_space;
  using value_type = float;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  IqnConstMat<Exec> quantiles, target_quantiles;  // [B·N, A], [B·N′, A]
  Kokkos::View<const float*, MS> tau;             // [≥ B·N]: the online τ (first rows)
  Kokkos::View<const int**, Kokkos::LayoutRight, MS> actions, best;  // [B, K]
  Kokkos::View<const float*, MS> rewards, dones, weights;            // [B]
  IqnMat<Exec> d_quantiles;                       // [B·N, A] out
  BranchTable table;                              // the branches partition the A actions
  float gamma_n, kappa;
  int n_tau, n_tau_target;
  // When given, the τ counter iqn_sample drew at (advance false) gains 1 here, after every draw of
  // the step has been read: one launch fewer than iqn_sample's own advance.
  Kokkos::View<std::uint64_t, MS> advance;

  // One team per sample, a team thread per (branch k, online quantile n) pair summing over the
  // N′ target quantiles. Each pair writes its own row segment of d_quantiles (the branch's
  // columns), so no zeroing pass and no barrier come before it. The pairs' losses meet in a
  // team reduction, whose order is fixed for a fixed launch shape: the same inputs always give
  // the same bits (graph replay equals direct launch), where float atomics would not.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, float& loss_sum) const {
    const int B = static_cast<int>(rewards.extent(0));
    const int K = table.branches, N = n_tau, M = n_tau_target;
    const int i = team.league_rank();
    const float w = weights(i);
    const float coef = w / static_cast<float>(B * K * M);
    const float discount = gamma_n * (1.f - dones(i));
    float L = 0.f;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, K * N),
        [&](const int kn, float& acc) {
          const int k = kn / N, n = kn % N;
          const int c0 = table.cum(k), width = table.size(k), taken = actions(i, k), star = best(i, k);
          const bool valid = taken >= 0 && taken < width && star >= 0 && star < width;
          const int t = valid ? taken : 0, a2 = c0 + (valid ? star : 0);
          const float theta = quantiles(i * N + n, c0 + t), tn = tau(i * N + n);
          float lk = 0.f, g = 0.f;
          for (int m = 0; m < M; ++m) {
            const float d = rewards(i) + discount * target_quantiles(i * M + m, a2) - theta;
            const float ad = ::fabsf(d), wt = ::fabsf(tn - (d < 0.f ? 1.f : 0.f));
            const bool quad = ad <= kappa;
            lk += wt * (quad ? 0.5f * d * d : kappa * (ad - 0.5f * kappa)) / kappa;
            g -= wt * (quad ? d : (d < 0.f ? -kappa : kappa)) / kappa;  // ∂ρ/∂θ = −∂ρ/∂δ
          }
          for (int a = 0; a < width; ++a) d_quantiles(i * N + n, c0 + a) = a != t ? 0.f : valid ? coef * g : NAN;
          acc += valid ? lk / static_cast<float>(M * K) : NAN;
        },
        L);
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      loss_sum += w * L / static_cast<float>(B);
      if (i == 0 && advance.data() != nullptr) advance() += 1;
    });
  }
};

template <class Exec>
void iqn_loss(const Exec& exec, const IqnLoss<Exec>& f, const Kokkos::View<float, typename Exec::memory_space>& loss) {
  const std::size_t B = f.rewards.extent(0), K = static_cast<std::size_t>(f.table.branches);
  require(B > 0, "iqn_loss: empty batch (B = 0); expected at least 1 sample");
  require(f.n_tau >= 1 && f.n_tau_target >= 1, "iqn_loss: n_tau = ", f.n_tau, ", n_tau_target = ", f.n_tau_target,
          "; expected at least 1 each");
  require(f.kappa > 0.f && std::isfinite(f.kappa), "iqn_loss: kappa = ", f.kappa, "; expected a positive number");
  require(f.quantiles.extent(0) == B * f.n_tau && f.target_quantiles.extent(0) == B * f.n_tau_target &&
              f.target_quantiles.extent(1) == f.quantiles.extent(1) && f.d_quantiles.extent(0) == f.quantiles.extent(0) &&
              f.d_quantiles.extent(1) == f.quantiles.extent(1) && f.tau.extent(0) >= B * f.n_tau,
          "iqn_loss: quantiles [", f.quantiles.extent(0), ", ", f.quantiles.extent(1), "], target [",
          f.target_quantiles.extent(0), ", ", f.target_quantiles.extent(1), "], d_quantiles [", f.d_quantiles.extent(0),
          ", ", f.d_quantiles.extent(1), "], tau [", f.tau.extent(0), "]; expected [B·n_tau, A], [B·n_tau_target, A], [B·n_tau, A] and >= B·n_tau τ");
  require(f.quantiles.extent(1) == static_cast<std::size_t>(f.table.actions), "iqn_loss: quantiles have ",
          f.quantiles.extent(1), " actions; expected ", f.table.actions, " (the branch table's)");
  require(f.actions.extent(0) == B && f.best.extent(0) == B && f.actions.extent(1) == K && f.best.extent(1) == K &&
              f.dones.extent(0) == B && f.weights.extent(0) == B,
          "iqn_loss: actions [", f.actions.extent(0), ", ", f.actions.extent(1), "], best [", f.best.extent(0), ", ",
          f.best.extent(1), "], dones ", f.dones.extent(0), ", weights ", f.weights.extent(0), "; expected [", B, ", ", K,
          "] and ", B);
  // Device: whole warps covering the (branch, n) pairs, up to 8 (more pairs take turns); the
  // reference config's 3 × 8 fit one. Host: one thread per sample.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int pairs = static_cast<int>(K) * f.n_tau, warps = pairs <= 32 ? 1 : pairs >= 256 ? 8 : (pairs + 31) / 32;
  Kokkos::parallel_reduce("zs::iqn_loss", Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(B), host ? 1 : 32 * warps),
                          f, loss);
}

}  // namespace zs::kernels
