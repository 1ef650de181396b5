// Batched spectral normalisation of every weight matrix in the flat parameter buffer: one
// launch, one team per matrix, one power iteration on persistent u/v, W scaled by σ_max/σ.
//
// Per matrix W [rows, cols] (row-major, rows = out, cols = in), per call:
//   v = Wᵀu;  v /= (‖v‖ + 1e-12);  u = W v;  σ = ‖u‖;  u /= (σ + 1e-12);
//   σ finite and σ > σ_max       → W *= σ_max/σ
//   σ finite and 1e-6 <= σ <= σ_max → W unchanged (bit for bit)
//   σ < 1e-6 or σ not finite     → W unchanged, and u, v are reset to their initial vectors
// The reset matters: a zero matrix (e.g. weights not yet loaded) would otherwise leave u = 0,
// and a NaN in W would leave u = NaN — both fixed points that no later call escapes. Scaling
// by σ_max/Inf would zero a matrix and turn its Inf entries into NaN, hence no scaling then.
// σ (as float) is written per matrix for monitoring, NaN/Inf included.
//
// Precision: products and sums accumulate in double (entries of up to 256×256 products, and a
// host reference in double that agrees to ~1e-7); u, v and W stay float in memory.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/backend.hpp"
#include "error.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

// One matrix of the batch, as offsets into the flat parameter buffer and into the u/v buffer.
struct SpectralNormDesc {
  std::int64_t weight_offset = 0;  // W [rows, cols] row-major starts here in the parameters
  std::int64_t u_offset = 0;       // u: rows floats in the u/v buffer
  std::int64_t v_offset = 0;       // v: cols floats in the u/v buffer
  std::int32_t rows = 0;           // out
  std::int32_t cols = 0;           // in
};

inline constexpr double kSpectralNormEps = 1e-12;      // normalisation guard
inline constexpr double kSpectralNormMinSigma = 1e-6;  // below: degenerate, W left alone

template <class Exec>
struct BatchedSpectralNorm {
  using Mem = typename Exec::memory_space;
  // Columns per lane-loop step: 1 on a device (lanes already cover consecutive columns), 8
  // on the host (32 bytes of floats for the vector unit; a power of two for the pairwise sum).
  static constexpr int kColBlock =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible ? 8 : 1;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;

  Kokkos::View<const SpectralNormDesc*, Mem> descs;
  Kokkos::View<float*, Mem> params;
  Kokkos::View<float*, Mem> uv;
  Kokkos::View<const float*, Mem> uv_init;
  Kokkos::View<float*, Mem> sigmas;
  double sigma_max;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const SpectralNormDesc d = descs(team.league_rank());
    float* const W = params.data() + d.weight_offset;
    float* const u = uv.data() + d.u_offset;
    float* const v = uv.data() + d.v_offset;
    const std::int64_t rows = d.rows, cols = d.cols;

    // v = Wᵀu. Column blocks go to every lane of the team and each walks down the rows, so
    // consecutive lanes read consecutive floats of a row: coalesced on CUDA (blocks of one
    // column), cache-line sized and vectorisable on the host (blocks of kColBlock columns).
    const std::int64_t col_blocks = (cols + kColBlock - 1) / kColBlock;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, col_blocks), [&](const std::int64_t blk) {
      const std::int64_t c0 = blk * kColBlock;
      double acc[kColBlock] = {};
      if (c0 + kColBlock <= cols) {
        for (std::int64_t r = 0; r < rows; ++r) {
          const double ur = u[r];
          const float* const w = W + r * cols + c0;
          for (int j = 0; j < kColBlock; ++j) acc[j] += static_cast<double>(w[j]) * ur;
        }
        for (int j = 0; j < kColBlock; ++j) v[c0 + j] = static_cast<float>(acc[j]);
      } else {  // the ragged last block
        const int m = static_cast<int>(cols - c0);
        for (std::int64_t r = 0; r < rows; ++r) {
          const double ur = u[r];
          const float* const w = W + r * cols + c0;
          for (int j = 0; j < m; ++j) acc[j] += static_cast<double>(w[j]) * ur;
        }
        for (int j = 0; j < m; ++j) v[c0 + j] = static_cast<float>(acc[j]);
      }
    });
    team.team_barrier();
    double vv = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(team, cols),
        [&](const std::int64_t c, double& s) {
          const double x = v[c];
          s += x * x;
        },
        Kokkos::Sum<double>(vv));
    const double v_scale = 1.0 / (::sqrt(vv) + kSpectralNormEps);
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols),
                         [&](const std::int64_t c) { v[c] = static_cast<float>(v[c] * v_scale); });
    team.team_barrier();

    // u = W v. One team thread per row and its vector lanes along the row (a warp per row on
    // CUDA), so this pass reads W row-contiguously too. On the host each step of the lane loop
    // sums kColBlock products first: independent adds instead of one long dependency chain.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const std::int64_t r) {
      const float* const w_row = W + r * cols;
      double acc = 0.0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, col_blocks),
          [&](const std::int64_t blk, double& s) {
            const std::int64_t c0 = blk * kColBlock;
            const int m = c0 + kColBlock <= cols ? kColBlock : static_cast<int>(cols - c0);
            double part[kColBlock] = {};
            for (int j = 0; j < m; ++j)
              part[j] = static_cast<double>(w_row[c0 + j]) * static_cast<double>(v[c0 + j]);
            for (int width = kColBlock / 2; width > 0; width /= 2)
              for (int j = 0; j < width; ++j) part[j] += part[j + width];
            s += part[0];
          },
          Kokkos::Sum<double>(acc));
      Kokkos::single(Kokkos::PerThread(team), [&]() { u[r] = static_cast<float>(acc); });
    });
    team.team_barrier();
    double uu = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamVectorRange(team, rows),
        [&](const std::int64_t r, double& s) {
          const double x = u[r];
          s += x * x;
        },
        Kokkos::Sum<double>(uu));
    const double sigma = ::sqrt(uu);

    // Every thread holds the same reduced σ, so the branch is uniform across the team.
    if (!is_finite(sigma) || sigma < kSpectralNormMinSigma) {
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows),
                           [&](const std::int64_t r) { u[r] = uv_init(d.u_offset + r); });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols),
                           [&](const std::int64_t c) { v[c] = uv_init(d.v_offset + c); });
    } else {
      const double u_scale = 1.0 / (sigma + kSpectralNormEps);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows), [&](const std::int64_t r) {
        u[r] = static_cast<float>(u[r] * u_scale);
      });
      if (sigma > sigma_max) {
        const float w_scale = static_cast<float>(sigma_max / sigma);
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows * cols),
                             [&](const std::int64_t i) { W[i] *= w_scale; });
      }
    }
    Kokkos::single(Kokkos::PerTeam(team),
                   [&]() { sigmas(team.league_rank()) = static_cast<float>(sigma); });
  }
};

// Enqueues one power iteration + scaling for every matrix of `descs` on `exec`, one team per
// matrix. `uv_init` holds the vectors u and v are reset to when a matrix is degenerate; it
// has the layout of `uv`. Offsets in `descs` are trusted (the SpectralNorm owner checks
// them once at construction; the launcher cannot read a device table without a sync).
template <class Exec>
void batched_spectral_norm(const Exec& exec,
                           Kokkos::View<const SpectralNormDesc*, typename Exec::memory_space> descs,
                           Kokkos::View<float*, typename Exec::memory_space> params,
                           Kokkos::View<float*, typename Exec::memory_space> uv,
                           Kokkos::View<const float*, typename Exec::memory_space> uv_init,
                           Kokkos::View<float*, typename Exec::memory_space> sigmas,
                           float sigma_max) {
  const std::size_t n = descs.extent(0);
  require(n >= 1, "batched_spectral_norm: 0 matrices given; expected at least 1");
  require(sigmas.extent(0) == n, "batched_spectral_norm: sigmas has ", sigmas.extent(0),
          " entries; expected ", n, " (one per matrix)");
  require(uv_init.extent(0) == uv.extent(0), "batched_spectral_norm: uv_init has ",
          uv_init.extent(0), " floats; expected ", uv.extent(0), " (the size of uv)");
  require(is_finite(sigma_max) && sigma_max > 0.f, "batched_spectral_norm: sigma_max = ", sigma_max,
          " is invalid; expected a finite number > 0");

  // Host: one thread per matrix (no barriers to pay; dynamic so the big matrices don't queue
  // behind each other). Device: 8 warps per matrix, a warp per row in the u = W v pass.
  constexpr bool host =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int team_size = host ? 1 : 8;
  const int vector_length = host ? 1 : 32;
  Kokkos::parallel_for("zs::batched_spectral_norm",
                       Kokkos::TeamPolicy<Exec, Kokkos::Schedule<Kokkos::Dynamic>>(
                           exec, static_cast<int>(n), team_size, vector_length),
                       BatchedSpectralNorm<Exec>{descs, params, uv, uv_init, sigmas,
                                                 static_cast<double>(sigma_max)});
}

}  // namespace zs::kernels
