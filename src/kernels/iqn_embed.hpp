// IQN's τ, its cosine embedding and the modulation of the trunk's features in one launch, both
// sides: per row r (= sample·N + n) of a side, τ_r from the counter-based RNG, c_r = cos(π·e·τ_r),
// φ_r = ReLU(W_emb·c_r + b) and h_r = f(sample) ⊙ φ_r. What iqn_sample, the embedding's product
// and iqn_modulate leave, in FP32 on the CUDA cores: the embedding is short (k = E, 64 in the
// reference config), so as 32 × 32 tensor-core tiles of the fused kernel it was two thousand tiles
// of mostly latency (docs/performance.md, thirty-second session). Its first form (τ drawn for every
// (row, e), a cosine a scratch load, each thread's W_emb row read 64 floats from its neighbour's)
// made the H200's step 20 µs slower than those tiles (thirty-third session); this one draws τ once
// a row, reads four rows' cosines a load and stages W_emb through scratch in coalesced rows.
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
  // A team's rows: each thread keeps a sum a row, and reads the rows' cosines four at a time.
  static constexpr int kRows = 16;
  static_assert(kRows % 4 == 0, "the cosines are read four rows a load");
  // W_emb's columns staged at once: [F][kCols + 1] floats (the pad puts each thread's row in
  // its own bank).
  static constexpr int kCols = 8;
  // Four rows' cosines of one e: one 16-byte load of scratch, the same for every thread.
  struct alignas(16) Four {
    float v[4];
  };
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
  // The rows' cosines [E][kRows], their τ and a stage of W_emb's columns, and room to align.
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_bytes(int embed, int features) {
    return alignof(Four) + sizeof(Four) * (kRows / 4) * static_cast<std::size_t>(embed) +
           sizeof(float) * (kRows + static_cast<std::size_t>(features) * (kCols + 1));
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int per_side = teams_per_side();
    const int s = team.league_rank() / per_side;
    const int r0 = (team.league_rank() % per_side) * kRows;
    const int rows = sample.rows - r0 < kRows ? sample.rows - r0 : kRows;
    const int E = static_cast<int>(sample.cosines.extent(1));
    const Side& side = sides[s];
    const int F = static_cast<int>(side.weight.extent(0));
    constexpr int kFours = kRows / 4;
    Four* const cos = static_cast<Four*>(
        team.team_scratch(0).get_shmem_aligned(scratch_bytes(E, F) - alignof(Four), alignof(Four)));
    float* const taus = reinterpret_cast<float*>(cos + kFours * E);  // row i's c_e: cos[e·kFours + i/4].v[i % 4]
    float* const w = taus + kRows;                                    // [F][kCols + 1]
    // τ once a row, as iqn_sample draws it.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int i) {
      const int r = s * sample.rows + r0 + i;
      const float t = sample.draw(r);
      sample.tau(r) = t;
      taus[i] = t;
    });
    team.team_barrier();
    // The cosines, a thread per (row, e); rows past the side's end are zeros that nothing stores.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows * E), [&](const int x) {
      const int i = x / E, e = x % E;
      const float c = i < rows ? IqnSample<Exec>::cosine(e, taus[i]) : 0.f;
      if (i < rows) sample.cosines(s * sample.rows + r0 + i, e) = c;
      cos[e * kFours + i / 4].v[i % 4] = c;
    });
    // A thread per feature f (every thread runs the loop: the stages' barriers), a sum per row
    // over e in order.
    const int threads = team.team_size();
    const int per_thread = (F + threads - 1) / threads;
    for (int round = 0; round < per_thread; ++round) {
      const int f = round * threads + team.team_rank();
      float acc[kRows];
      for (int i = 0; i < kRows; ++i) acc[i] = 0.f;
      for (int e0 = 0; e0 < E; e0 += kCols) {
        const int cols = E - e0 < kCols ? E - e0 : kCols;
        team.team_barrier();  // the stage before is read; the cosines are written
        // Consecutive threads load consecutive columns of a row: kCols floats of each of F rows.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, F * kCols), [&](const int x) {
          const int row = x / kCols, j = x % kCols;
          w[row * (kCols + 1) + j] = j < cols ? side.weight(row, e0 + j) : 0.f;
        });
        team.team_barrier();
        if (f < F)
          for (int j = 0; j < cols; ++j) {
            const float wf = w[f * (kCols + 1) + j];
            for (int q = 0; q < kFours; ++q) {
              const Four c = cos[(e0 + j) * kFours + q];
              for (int u = 0; u < 4; ++u) acc[4 * q + u] += wf * c.v[u];
            }
          }
      }
      if (f >= F) continue;
      const float b = side.bias(f);
      for (int i = 0; i < rows; ++i) {
        const int r = r0 + i;
        const float v = acc[i] + b;
        const float p = v < 0.f ? 0.f : v;  // NaN stays NaN
        side.phi(r, f) = p;
        side.h(r, f) = side.features(r / n_tau, f) * p;
      }
    }
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
  const std::size_t F = f.sides[0].weight.extent(0);
  const std::size_t bytes = IqnEmbedModulate<Exec>::scratch_bytes(static_cast<int>(E), static_cast<int>(F));
  require(f.sides[1].weight.extent(0) == F && E >= 1 && bytes <= IqnEmbedModulate<Exec>::kScratchBudget,
          "iqn_embed_modulate: sides of ", F, " and ", f.sides[1].weight.extent(0), " features, embedding of ", E,
          "; expected the same features and an embedding and features whose team scratch (", bytes,
          " bytes: the cosines of ", IqnEmbedModulate<Exec>::kRows, " rows and ", IqnEmbedModulate<Exec>::kCols,
          " columns of W_emb) fits ", IqnEmbedModulate<Exec>::kScratchBudget, " bytes");
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int threads = host ? 1 : F >= 256 ? 256 : static_cast<int>((F + 31) / 32 * 32);
  Kokkos::TeamPolicy<Exec> policy(exec, 2 * f.teams_per_side(), threads);
  policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
  Kokkos::parallel_for("zs::iqn_embed_modulate", policy, f);
}

}  // namespace zs::kernels
