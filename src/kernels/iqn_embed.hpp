// IQN's τ, its cosine embedding and the modulation of the trunk's features in one launch, both
// sides: per row r (= sample·N + n) of a side, τ_r from the counter-based RNG, c_r = cos(π·e·τ_r),
// φ_r = ReLU(W_emb·c_r + b) and h_r = f(sample) ⊙ φ_r. What iqn_sample, the embedding's product
// and iqn_modulate leave, in FP32 on the CUDA cores: the embedding is short (k = E, 64 in the
// reference config), so as 32 × 32 tensor-core tiles of the fused kernel it was two thousand tiles
// of mostly latency (docs/performance.md, thirty-second session).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/iqn_quantiles.hpp"

namespace zs::kernels {

template <class Exec>
struct IqnEmbedModulate {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  // A team's rows: their cosines in scratch are read by every feature's thread, and each thread
  // keeps a sum a row.
  static constexpr int kRows = 16;
  // What a CUDA block gets without opting in to more, less Kokkos' own (as the C51 loss's).
  static constexpr std::size_t kScratchBudget = 46 * 1024;
  struct Side {
    IqnConstMat<Exec> weight;    // [F, E]: W_emb
    Kokkos::View<const float*, typename Exec::memory_space, Kokkos::MemoryUnmanaged> bias;  // [F]
    IqnConstMat<Exec> features;  // [B, F]
    IqnMat<Exec> phi, h;         // [B·N, F]
  };
  IqnSample<Exec> sample;  // τ and the cosines of both sides' rows ([0, R) online, [R, 2R) target)
  Side sides[2];
  int n_tau;

  KOKKOS_INLINE_FUNCTION int teams_per_side() const { return (sample.rows + kRows - 1) / kRows; }
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes(int embed) { return sizeof(float) * kRows * static_cast<std::size_t>(embed); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int per_side = teams_per_side();
    const int s = team.league_rank() / per_side;
    const int r0 = (team.league_rank() % per_side) * kRows;
    const int rows = sample.rows - r0 < kRows ? sample.rows - r0 : kRows;
    const int E = static_cast<int>(sample.cosines.extent(1));
    const Side& side = sides[s];
    const int F = static_cast<int>(side.weight.extent(0));
    float* cos = static_cast<float*>(team.team_scratch(0).get_shmem(scratch_bytes(E)));
    // τ and the cosines: a thread per (row, feature e), as iqn_sample draws them.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * E), [&](const int x) {
      const int i = x / E, e = x % E, r = s * sample.rows + r0 + i;
      const float t = sample.draw(r);
      if (e == 0) sample.tau(r) = t;
      const float c = IqnSample<Exec>::cosine(e, t);
      sample.cosines(r, e) = c;
      cos[i * E + e] = c;
    });
    team.team_barrier();
    // A thread per feature f, a sum per row over e in order.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, F), [&](const int f) {
      float acc[kRows];
      for (int i = 0; i < kRows; ++i) acc[i] = 0.f;
      for (int e = 0; e < E; ++e) {
        const float w = side.weight(f, e);
        for (int i = 0; i < kRows; ++i) acc[i] += w * cos[(i < rows ? i : 0) * E + e];
      }
      const float b = side.bias(f);
      for (int i = 0; i < rows; ++i) {
        const int r = r0 + i;
        const float v = acc[i] + b;
        const float p = v < 0.f ? 0.f : v;  // NaN stays NaN
        side.phi(r, f) = p;
        side.h(r, f) = side.features(r / n_tau, f) * p;
      }
    });
  }
};

// Draws τ for both sides (at the counter's call; the caller advances it later: IqnLoss::advance),
// their cosines, and both sides' φ and h. sides[0] is the online net's on s, sides[1] the
// target's on s′; rows B·N a side.
template <class Exec>
void iqn_embed_modulate(const Exec& exec, const IqnEmbedModulate<Exec>& f) {
  const std::size_t R = static_cast<std::size_t>(f.sample.rows), E = f.sample.cosines.extent(1);
  for (const auto& s : f.sides) {
    const std::size_t F = s.weight.extent(0), B = s.features.extent(0);
    require(f.n_tau >= 1 && R == B * f.n_tau && s.weight.extent(1) == E && s.bias.extent(0) == F &&
                s.features.extent(1) == F && s.phi.extent(0) == R && s.phi.extent(1) == F && s.h.extent(0) == R &&
                s.h.extent(1) == F && f.sample.tau.extent(0) == 2 * R && f.sample.cosines.extent(0) == 2 * R,
            "iqn_embed_modulate: ", R, " rows a side, n_tau ", f.n_tau, ", W_emb [", s.weight.extent(0), ", ",
            s.weight.extent(1), "], bias [", s.bias.extent(0), "], features [", B, ", ", s.features.extent(1),
            "], phi [", s.phi.extent(0), ", ", s.phi.extent(1), "], h [", s.h.extent(0), ", ", s.h.extent(1),
            "], tau [", f.sample.tau.extent(0), "], cosines [", f.sample.cosines.extent(0), ", ", E,
            "]; expected rows = B·n_tau, W_emb [F, E], bias [F], features [B, F], phi and h [rows, F], tau [2·rows] "
            "and cosines [2·rows, E]");
  }
  require(f.sides[0].weight.extent(0) == f.sides[1].weight.extent(0) && E >= 1 &&
              IqnEmbedModulate<Exec>::scratch_bytes(static_cast<int>(E)) <= IqnEmbedModulate<Exec>::kScratchBudget,
          "iqn_embed_modulate: sides of ", f.sides[0].weight.extent(0), " and ", f.sides[1].weight.extent(0),
          " features, embedding of ", E, "; expected the same features and an embedding of 1 to ",
          IqnEmbedModulate<Exec>::kScratchBudget / (sizeof(float) * IqnEmbedModulate<Exec>::kRows),
          " (a team's cosines in scratch)");
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int F = static_cast<int>(f.sides[0].weight.extent(0));
  const int threads = host ? 1 : F >= 256 ? 256 : (F + 31) / 32 * 32;
  Kokkos::TeamPolicy<Exec> policy(exec, 2 * f.teams_per_side(), threads);
  policy.set_scratch_size(0, Kokkos::PerTeam(IqnEmbedModulate<Exec>::scratch_bytes(static_cast<int>(E))));
  Kokkos::parallel_for("zs::iqn_embed_modulate", policy, f);
}

}  // namespace zs::kernels
