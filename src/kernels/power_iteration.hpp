// Batched spectral normalisation of every weight matrix in the flat parameter buffer: one power
// iteration on persistent u/v per matrix, W scaled by σ_max/σ.
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
// host reference in double that agrees to ~1e-7); u, v and W stay float in memory, the
// intermediate Wᵀu and W v stay double (in the plan's scratch buffers).
//
// Three launches, each spreading all matrices over many teams. One team per matrix left most
// of a GPU idle (10 teams for the reference net on 132 SMs) and made each team walk a whole
// matrix twice in series. The passes meet only through global memory, so each is split where
// its own data allows:
//   1. Wᵀu per (matrix, row slab, column chunk): per-slab partial sums in double.
//   2. per (matrix, row chunk): v = Σ slabs (staged in team scratch when there are several),
//      its norm, and u_raw = W v / (‖v‖ + eps) for those rows; the chunk at row 0 also stores
//      the normalised v. The matrix's last team to finish (kernels/last_team.hpp) then takes
//      σ = ‖u_raw‖, stores u (or resets u and v) and σ, and the factor pass 3 scales W by.
//   3. per (matrix, chunk of W's elements): scales its own elements when the factor is set.
// Every team of a matrix recomputes ‖v‖ itself (pass 2), instead of a launch more to share it:
// it is a few hundred numbers. All sums run in a fixed order and all teams of a launch have the
// same shape, so those teams agree bit for bit, and two identical calls give identical results.
// Each pass reads its tables (which nothing in a step writes) before it waits for the grids
// before it and lets the next pass be placed at once, so in a graph with programmatic edges a
// pass's start and its tables' round trip hide behind the pass before it.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/after_prior_grids.hpp"
#include "backends/backend.hpp"
#include "core/error.hpp"
#include "backends/host_copy.hpp"
#include "kernels/double_sums.hpp"
#include "kernels/last_team.hpp"
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

// How finely the passes split a matrix. Runtime values (not the backend's constants) so that
// a test can run the device's split through the host backend.
struct SpectralNormGeometry {
  std::int32_t chunk_cols = 32;         // pass 1: columns per team
  std::int32_t max_slabs = 4;           // pass 1: row slabs per matrix, at most
  std::int32_t min_slab_rows = 64;      // pass 1: rows per slab, at least (unless fewer rows)
  std::int32_t max_staged_cols = 2048;  // pass 1: no slabs for wider matrices (pass 2's scratch)
  std::int32_t chunk_rows = 16;         // pass 2: rows per team
  std::int64_t chunk_elements = 2048;   // pass 3: elements of W per team
};

// Per matrix: the descriptor and where its per-slab Wᵀu partial sums live.
struct SpectralNormMatrix {
  SpectralNormDesc desc;
  std::int64_t partial_offset = 0;  // slabs × cols doubles, slab-major, in the partials buffer
  std::int32_t slabs = 1;
  std::int32_t slab_rows = 0;
  std::int32_t row_chunks = 0;      // pass 2's teams of this matrix
};

// One team's share of a pass. Pass 1: rows [begin, end) = slab `slab`, columns [col0, col1);
// pass 2: rows [begin, end); pass 3: elements [begin, end) of the row-major W.
struct SpectralNormChunk {
  std::int32_t matrix = 0;
  std::int32_t slab = 0;
  std::int32_t col0 = 0, col1 = 0;
  std::int64_t begin = 0, end = 0;
};

// The backend's launch shape. Host: one thread per team, so no barriers are paid for and the
// dynamic schedule balances the chunks over the cores; columns in blocks of 8 (32 bytes of
// floats for the vector unit; a power of two for the pairwise sum). Device: 8 warps per team,
// lanes on consecutive columns, so a warp reads 128 contiguous bytes of a row.
template <class Mem>
struct SpectralNormShape {
  static constexpr bool kHost = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;
  static constexpr int kTeamSize = kHost ? 1 : 8;
  static constexpr int kVectorLength = kHost ? 1 : 32;
  static constexpr int kColBlock = kHost ? 8 : 1;
  // Entries per lane step of a reduction: the host's lane sums 8 blocks in registers before it
  // touches the reduction's value, which Kokkos keeps in memory (a store and reload per step).
  static constexpr int kSpan = kHost ? 64 : 1;
  // Loads a lane issues before it uses the first of them. A GPU issues in order, so a loop whose
  // every iteration loads, then adds what it loaded, waits a whole L2 round trip an iteration:
  // the passes' few loads a lane were a chain of round trips (Nsight, 2026-12-06: pass 2 active
  // 8,100 cycles of 10.7 µs). The host's lane already keeps kColBlock sums in flight.
  static constexpr int kLoadBatch = kHost ? 1 : 8;

  // Device: ~150 teams per pass for the reference net (≈ one per SM), a lane per column and 8
  // rows per lane in pass 1. Host: chunks big enough that the per-team norms cost nothing,
  // small enough that 2+ threads get a balanced share, and no slabs (nothing to combine).
  static SpectralNormGeometry geometry() {
    SpectralNormGeometry g;
    if (kHost) {
      g.chunk_cols = 64;
      g.max_slabs = 1;
      g.chunk_rows = 32;
      g.chunk_elements = 16384;
    }
    return g;
  }
};

// The host-side tables of a plan: which team does what.
struct SpectralNormTables {
  std::vector<SpectralNormMatrix> matrices;
  std::vector<SpectralNormChunk> column_chunks, row_chunks, element_chunks;
  std::int64_t partials_size = 0;  // doubles
  std::int32_t staged_cols = 0;    // pass 2's scratch: the widest v of a matrix with 2+ slabs
  std::int64_t vectors_size = 0;   // floats in the u/v buffer that `descs` describe
};

inline SpectralNormTables spectral_norm_tables(const std::vector<SpectralNormDesc>& descs,
                                               const SpectralNormGeometry& g) {
  require(!descs.empty(), "spectral_norm_tables: 0 matrices given; expected at least 1");
  require(g.chunk_cols >= 1 && g.chunk_cols <= 256,
          "spectral_norm_tables: chunk_cols = ", g.chunk_cols,
          "; expected 1 to 256 (it sizes the team's scratch)");
  require(g.max_slabs >= 1, "spectral_norm_tables: max_slabs = ", g.max_slabs,
          "; expected at least 1");
  require(g.min_slab_rows >= 1, "spectral_norm_tables: min_slab_rows = ", g.min_slab_rows,
          "; expected at least 1");
  require(g.max_staged_cols >= 0 && g.max_staged_cols <= 4096,
          "spectral_norm_tables: max_staged_cols = ", g.max_staged_cols,
          "; expected 0 to 4096 (it sizes the team's scratch in pass 2)");
  require(g.chunk_rows >= 1, "spectral_norm_tables: chunk_rows = ", g.chunk_rows,
          "; expected at least 1");
  require(g.chunk_elements >= 1, "spectral_norm_tables: chunk_elements = ", g.chunk_elements,
          "; expected at least 1");
  SpectralNormTables t;
  for (std::size_t i = 0; i < descs.size(); ++i) {
    const SpectralNormDesc& d = descs[i];
    require(d.rows >= 1 && d.cols >= 1, "spectral_norm_tables: matrix ", i, " is ", d.rows, "x",
            d.cols, "; expected at least 1x1");
    require(d.weight_offset >= 0 && d.u_offset >= 0 && d.v_offset >= 0,
            "spectral_norm_tables: matrix ", i, " has a negative offset (weights ",
            d.weight_offset, ", u ", d.u_offset, ", v ", d.v_offset, "); expected offsets >= 0");
    const auto m = static_cast<std::int32_t>(i);
    SpectralNormMatrix mat;
    mat.desc = d;
    mat.partial_offset = t.partials_size;
    // Slabs need pass 2 to stage their sum in team scratch, which is small on a GPU; a matrix
    // too wide for it has many column chunks to spread over instead.
    const std::int32_t want = (d.rows + g.min_slab_rows - 1) / g.min_slab_rows;
    const std::int32_t slabs =
        d.cols > g.max_staged_cols || want < 1 ? 1 : (want > g.max_slabs ? g.max_slabs : want);
    mat.slab_rows = (d.rows + slabs - 1) / slabs;
    mat.slabs = (d.rows + mat.slab_rows - 1) / mat.slab_rows;  // rounding can leave fewer
    if (mat.slabs > 1 && d.cols > t.staged_cols) t.staged_cols = d.cols;
    t.partials_size += static_cast<std::int64_t>(mat.slabs) * d.cols;
    t.matrices.push_back(mat);

    for (std::int32_t s = 0; s < mat.slabs; ++s)
      for (std::int32_t c = 0; c < d.cols; c += g.chunk_cols) {
        SpectralNormChunk k;
        k.matrix = m;
        k.slab = s;
        k.col0 = c;
        k.col1 = c + g.chunk_cols < d.cols ? c + g.chunk_cols : d.cols;
        k.begin = static_cast<std::int64_t>(s) * mat.slab_rows;
        k.end = k.begin + mat.slab_rows < d.rows ? k.begin + mat.slab_rows : d.rows;
        t.column_chunks.push_back(k);
      }
    for (std::int64_t r = 0; r < d.rows; r += g.chunk_rows) {
      ++t.matrices.back().row_chunks;
      SpectralNormChunk k;
      k.matrix = m;
      k.begin = r;
      k.end = r + g.chunk_rows < d.rows ? r + g.chunk_rows : d.rows;
      t.row_chunks.push_back(k);
    }
    const std::int64_t n = static_cast<std::int64_t>(d.rows) * d.cols;
    for (std::int64_t e = 0; e < n; e += g.chunk_elements) {
      SpectralNormChunk k;
      k.matrix = m;
      k.begin = e;
      k.end = e + g.chunk_elements < n ? e + g.chunk_elements : n;
      t.element_chunks.push_back(k);
    }
    const std::int64_t u_end = d.u_offset + d.rows, v_end = d.v_offset + d.cols;
    if (u_end > t.vectors_size) t.vectors_size = u_end;
    if (v_end > t.vectors_size) t.vectors_size = v_end;
  }
  return t;
}

// What the passes need besides the caller's buffers: the tables on the device and the double
// scratch between passes. Built once, outside any captured region (it allocates and copies).
template <class Mem>
struct SpectralNormPlan {
  SpectralNormGeometry geometry;
  std::int32_t staged_cols = 0;  // doubles of team scratch pass 2 needs
  Kokkos::View<const SpectralNormMatrix*, Mem> matrices;
  Kokkos::View<const SpectralNormChunk*, Mem> column_chunks, row_chunks, element_chunks;
  Kokkos::View<double*, Mem> partials;  // pass 1 → 2: per-slab Wᵀu
  Kokkos::View<double*, Mem> u_raw;     // pass 2: W v at u's offsets, the u/v buffer's layout
  Kokkos::View<int*, Mem> arrivals;     // pass 2: per matrix, its teams done (0 between calls)
  Kokkos::View<double*, Mem> w_scales;  // pass 2 → 3: per matrix, σ_max/σ, or 0: leave W alone
};


template <class Exec>
SpectralNormPlan<typename Exec::memory_space> make_spectral_norm_plan(
    const std::vector<SpectralNormDesc>& descs,
    const SpectralNormGeometry& geometry =
        SpectralNormShape<typename Exec::memory_space>::geometry()) {
  using Mem = typename Exec::memory_space;
  const SpectralNormTables t = spectral_norm_tables(descs, geometry);
  SpectralNormPlan<Mem> p;
  p.geometry = geometry;
  p.staged_cols = t.staged_cols;
  p.matrices =
      device_table<Mem>("zs::spectral_norm::matrices", t.matrices);
  p.column_chunks = device_table<Mem>("zs::spectral_norm::column_chunks", t.column_chunks);
  p.row_chunks =
      device_table<Mem>("zs::spectral_norm::row_chunks", t.row_chunks);
  p.element_chunks = device_table<Mem>("zs::spectral_norm::element_chunks", t.element_chunks);
  p.partials = Kokkos::View<double*, Mem>(std::string("zs::spectral_norm::partials"),
                                          static_cast<std::size_t>(t.partials_size));
  p.u_raw = Kokkos::View<double*, Mem>(std::string("zs::spectral_norm::u_raw"),
                                       static_cast<std::size_t>(t.vectors_size));
  p.arrivals = Kokkos::View<int*, Mem>(std::string("zs::spectral_norm::arrivals"), t.matrices.size());
  p.w_scales = Kokkos::View<double*, Mem>(std::string("zs::spectral_norm::w_scales"), t.matrices.size());
  return p;
}

// B running sums side by side, added pairwise at the end. On the host one lane walks a whole
// row or vector, and a single running sum would make every add wait for the previous one.
template <int B>
using SpectralNormSums = DoubleSums<B>;

template <int B>
KOKKOS_INLINE_FUNCTION void spectral_norm_add(SpectralNormSums<B>& acc, int j, double x) {
  acc.s[j] += x;
}
KOKKOS_INLINE_FUNCTION void spectral_norm_add(double& acc, int, double x) { acc += x; }
template <int B>
KOKKOS_INLINE_FUNCTION double spectral_norm_total(SpectralNormSums<B> acc) {
  for (int width = B / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) acc.s[j] += acc.s[j + width];
  return acc.s[0];
}
KOKKOS_INLINE_FUNCTION double spectral_norm_total(double acc) { return acc; }

// What a lane accumulates into: kColBlock sums on the host, one double on a device (whose
// lanes already are the independent sums).
template <class Mem>
using SpectralNormAcc =
    std::conditional_t<(SpectralNormShape<Mem>::kColBlock > 1),
                       SpectralNormSums<SpectralNormShape<Mem>::kColBlock>, double>;

// ‖x[0, n)‖² over the team. The order depends only on n and the team's shape, so every team of
// a launch gets the same bits.
template <class Mem, class Member>
KOKKOS_INLINE_FUNCTION double spectral_norm_squared(const Member& team, const double* x,
                                                    std::int64_t n) {
  constexpr int B = SpectralNormShape<Mem>::kColBlock;
  constexpr int kSpan = SpectralNormShape<Mem>::kSpan;
  using Acc = SpectralNormAcc<Mem>;
  Acc out{};
  Kokkos::parallel_reduce(
      Kokkos::TeamVectorRange(team, (n + kSpan - 1) / kSpan),
      [&](const std::int64_t span, Acc& s) {
        const std::int64_t i0 = span * kSpan;
        if (i0 + kSpan <= n) {
          double a[B] = {};
          for (int i = 0; i < kSpan; i += B)
            for (int j = 0; j < B; ++j) a[j] += x[i0 + i + j] * x[i0 + i + j];
          for (int j = 0; j < B; ++j) spectral_norm_add(s, j, a[j]);
        } else {
          for (std::int64_t i = i0; i < n; ++i)
            spectral_norm_add(s, static_cast<int>(i - i0) % B, x[i] * x[i]);
        }
      },
      Kokkos::Sum<Acc>(out));
  return spectral_norm_total(out);
}

// ‖x[0, n)‖² by one thread's vector lanes alone (on CUDA a warp: lane l takes l, l + 32, …, its
// loads in batches, then the lanes' sums meet by shuffles). Every thread of a team computes it
// for itself, so no team barrier or shared memory is paid, and all get the same bits (the order
// depends only on n and the vector length). The device's form; the host's is the one above.
template <class Mem, class Member>
KOKKOS_INLINE_FUNCTION double spectral_norm_squared_lanes(const Member& team, const double* x,
                                                          std::int64_t n) {
  constexpr int kBatch = SpectralNormShape<Mem>::kLoadBatch;
  constexpr int lanes = SpectralNormShape<Mem>::kVectorLength;
  double out = 0.0;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, lanes),
      [&](const int lane, double& s) {
        double a = 0.0;
        std::int64_t i = lane;
        for (; i + static_cast<std::int64_t>(kBatch - 1) * lanes < n; i += static_cast<std::int64_t>(kBatch) * lanes) {
          double b[kBatch];
          for (int q = 0; q < kBatch; ++q) b[q] = x[i + q * lanes];
          for (int q = 0; q < kBatch; ++q) a += b[q] * b[q];
        }
        for (; i < n; i += lanes) a += x[i] * x[i];
        s += a;
      },
      out);
  return out;
}

// The squared norm as the backend's shape wants it: the host's team-wide form (one thread), the
// device's per-thread lane form.
template <class Mem, class Member>
KOKKOS_INLINE_FUNCTION double spectral_norm_squared_any(const Member& team, const double* x,
                                                        std::int64_t n) {
  if constexpr (SpectralNormShape<Mem>::kHost) {
    return spectral_norm_squared<Mem>(team, x, n);
  } else {
    return spectral_norm_squared_lanes<Mem>(team, x, n);
  }
}

// Pass 1. Each team thread walks every team_size-th row of the slab, its lanes on consecutive
// column blocks; per-thread sums meet in team scratch and are added in thread order.
template <class Exec>
struct SpectralNormPartialWtu {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Scratch =
      Kokkos::View<double*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  static constexpr int kColBlock = SpectralNormShape<Mem>::kColBlock;
  static constexpr int kBatch = SpectralNormShape<Mem>::kLoadBatch;

  Kokkos::View<const SpectralNormMatrix*, Mem> matrices;
  Kokkos::View<const SpectralNormChunk*, Mem> chunks;
  Kokkos::View<const float*, Mem> params;
  Kokkos::View<const float*, Mem> uv;
  Kokkos::View<double*, Mem> partials;
  int chunk_cols;
  Kokkos::View<const int, Mem> skip;  // set: the step was tripped, leave everything as it is

  static std::size_t scratch_bytes(int team_size, int chunk_cols) {
    return Scratch::shmem_size(static_cast<std::size_t>(team_size) * chunk_cols);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const SpectralNormChunk k = chunks(team.league_rank());
    const SpectralNormMatrix m = matrices(k.matrix);
    wait_for_prior_grids();
    allow_dependent_grids();
    if (skip.data() != nullptr && skip() != 0) return;  // the same for every team: no barrier is left waiting
    const std::int64_t cols = m.desc.cols;
    const float* const W = params.data() + m.desc.weight_offset;
    const float* const u = uv.data() + m.desc.u_offset;
    const int threads = team.team_size();
    const int t = team.team_rank();
    const Scratch part(team.team_scratch(0), static_cast<std::size_t>(threads) * chunk_cols);
    const int width = k.col1 - k.col0;
    const int blocks = (width + kColBlock - 1) / kColBlock;

    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, blocks), [&](const int b) {
      const int j0 = b * kColBlock;
      const float* const w0 = W + k.col0 + j0;
      double acc[kColBlock] = {};
      if (j0 + kColBlock <= width) {
        std::int64_t r = k.begin + t;
        for (; r + static_cast<std::int64_t>(kBatch - 1) * threads < k.end; r += static_cast<std::int64_t>(kBatch) * threads) {
          double ub[kBatch];
          float wb[kBatch][kColBlock];
          for (int q = 0; q < kBatch; ++q) {
            const std::int64_t rq = r + static_cast<std::int64_t>(q) * threads;
            ub[q] = u[rq];
            for (int j = 0; j < kColBlock; ++j) wb[q][j] = w0[rq * cols + j];
          }
          for (int q = 0; q < kBatch; ++q)
            for (int j = 0; j < kColBlock; ++j) acc[j] += static_cast<double>(wb[q][j]) * ub[q];
        }
        for (; r < k.end; r += threads) {
          const double ur = u[r];
          const float* const w = w0 + r * cols;
          for (int j = 0; j < kColBlock; ++j) acc[j] += static_cast<double>(w[j]) * ur;
        }
        for (int j = 0; j < kColBlock; ++j) part(t * chunk_cols + j0 + j) = acc[j];
      } else {  // the chunk's ragged last block
        const int n = width - j0;
        for (std::int64_t r = k.begin + t; r < k.end; r += threads) {
          const double ur = u[r];
          const float* const w = w0 + r * cols;
          for (int j = 0; j < n; ++j) acc[j] += static_cast<double>(w[j]) * ur;
        }
        for (int j = 0; j < n; ++j) part(t * chunk_cols + j0 + j) = acc[j];
      }
    });
    team.team_barrier();
    double* const out = partials.data() + m.partial_offset + k.slab * cols + k.col0;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, width), [&](const int j) {
      double s = part(j);
      for (int i = 1; i < threads; ++i) s += part(i * chunk_cols + j);
      out[j] = s;
    });
  }
};

// Pass 2. A team thread per row and its lanes along the row (a warp per row on CUDA), so W is
// read row-contiguously; on the host the one lane keeps kColBlock independent sums. v is read from
// one contiguous array: the partials themselves when there is one slab, else their sum staged in
// team scratch (in slab order), so the dot products don't re-add the slabs for every row.
template <class Exec>
struct SpectralNormWv {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  using Scratch =
      Kokkos::View<double*, typename Exec::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  static constexpr int kColBlock = SpectralNormShape<Mem>::kColBlock;
  static constexpr int kSpan = SpectralNormShape<Mem>::kSpan;

  Kokkos::View<const SpectralNormMatrix*, Mem> matrices;
  Kokkos::View<const SpectralNormChunk*, Mem> chunks;
  Kokkos::View<const float*, Mem> params;
  Kokkos::View<const double*, Mem> partials;
  Kokkos::View<float*, Mem> uv;
  Kokkos::View<double*, Mem> u_raw;
  int staged_cols;
  Kokkos::View<const int, Mem> skip;
  Kokkos::View<const float*, Mem> uv_init;
  Kokkos::View<float*, Mem> sigmas;
  Kokkos::View<int*, Mem> arrivals;
  Kokkos::View<double*, Mem> w_scales;
  double sigma_max;

  static std::size_t scratch_bytes(int staged_cols) {
    return staged_cols > 0 ? Scratch::shmem_size(static_cast<std::size_t>(staged_cols)) : 0;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const SpectralNormChunk k = chunks(team.league_rank());
    const SpectralNormMatrix m = matrices(k.matrix);
    wait_for_prior_grids();
    allow_dependent_grids();
    if (skip.data() != nullptr && skip() != 0) return;
    u_rows(team, k, m);
    if (finished_last(team, &arrivals(k.matrix), m.row_chunks)) sigma_and_u(team, k.matrix, m.desc);
  }

  // u_raw = W v / (‖v‖ + eps) for the chunk's rows (and v, by the chunk at row 0).
  KOKKOS_INLINE_FUNCTION void u_rows(const Member& team, const SpectralNormChunk& k, const SpectralNormMatrix& m) const {
    const std::int64_t cols = m.desc.cols;
    const float* const W = params.data() + m.desc.weight_offset;
    const double* x = partials.data() + m.partial_offset;
    if (m.slabs > 1) {  // uniform across the team: the barrier is safe
      const Scratch staged(team.team_scratch(0), static_cast<std::size_t>(staged_cols));
      const double* const p = x;
      const std::int32_t slabs = m.slabs;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols), [&](const std::int64_t c) {
        double sum = p[c];
        for (std::int32_t s = 1; s < slabs; ++s) sum += p[s * cols + c];
        staged(c) = sum;
      });
      team.team_barrier();
      x = staged.data();
    }

    const double vv = spectral_norm_squared_any<Mem>(team, x, cols);
    const double v_scale = 1.0 / (::sqrt(vv) + kSpectralNormEps);
    // One writer of v per matrix; the other chunks read only the partials, so no race.
    if (k.begin == 0) {
      float* const v = uv.data() + m.desc.v_offset;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols), [&](const std::int64_t c) {
        v[c] = static_cast<float>(x[c] * v_scale);
      });
    }

    if constexpr (!SpectralNormShape<Mem>::kHost) {
      constexpr int kBatch = SpectralNormShape<Mem>::kLoadBatch;
      constexpr int lanes = SpectralNormShape<Mem>::kVectorLength;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k.begin, k.end), [&](const std::int64_t r) {
        const float* const w_row = W + r * cols;
        double dot = 0.0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, lanes),
            [&](const int lane, double& s) {
              double a = 0.0;
              std::int64_t c = lane;
              for (; c + static_cast<std::int64_t>(kBatch - 1) * lanes < cols; c += static_cast<std::int64_t>(kBatch) * lanes) {
                float wb[kBatch];
                double xb[kBatch];
                for (int q = 0; q < kBatch; ++q) {
                  wb[q] = w_row[c + q * lanes];
                  xb[q] = x[c + q * lanes];
                }
                for (int q = 0; q < kBatch; ++q) a += static_cast<double>(wb[q]) * xb[q];
              }
              for (; c < cols; c += lanes) a += static_cast<double>(w_row[c]) * x[c];
              s += a;
            },
            dot);
        Kokkos::single(Kokkos::PerThread(team), [&]() { u_raw(m.desc.u_offset + r) = dot * v_scale; });
      });
      return;
    }
    const std::int64_t spans = (cols + kSpan - 1) / kSpan;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k.begin, k.end), [&](const std::int64_t r) {
      const float* const w_row = W + r * cols;
      using Acc = SpectralNormAcc<Mem>;
      Acc acc{};
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, spans),
          [&](const std::int64_t span, Acc& s) {
            const std::int64_t c0 = span * kSpan;
            if (c0 + kSpan <= cols) {
              double a[kColBlock] = {};
              for (int i = 0; i < kSpan; i += kColBlock)
                for (int j = 0; j < kColBlock; ++j)
                  a[j] += static_cast<double>(w_row[c0 + i + j]) * x[c0 + i + j];
              for (int j = 0; j < kColBlock; ++j) spectral_norm_add(s, j, a[j]);
            } else {
              for (std::int64_t c = c0; c < cols; ++c)
                spectral_norm_add(s, static_cast<int>(c - c0) % kColBlock,
                                  static_cast<double>(w_row[c]) * x[c]);
            }
          },
          Kokkos::Sum<Acc>(acc));
      const double dot = spectral_norm_total(acc);
      Kokkos::single(Kokkos::PerThread(team),
                     [&]() { u_raw(m.desc.u_offset + r) = dot * v_scale; });
    });
  }

  // The matrix's last team, once every row of u_raw is in: σ = ‖u_raw‖ (each thread reduces it
  // itself, so the branches below are team-uniform), u or the reset of u and v, σ, the factor
  // pass 3 scales W by, and the arrival count back to 0 for the next call.
  KOKKOS_INLINE_FUNCTION void sigma_and_u(const Member& team, std::int32_t matrix, const SpectralNormDesc& d) const {
    const double* const ur = u_raw.data() + d.u_offset;
    const double sigma = ::sqrt(spectral_norm_squared_any<Mem>(team, ur, d.rows));
    const bool degenerate = !is_finite(sigma) || sigma < kSpectralNormMinSigma;
    float* const u = uv.data() + d.u_offset;
    if (degenerate) {
      float* const v = uv.data() + d.v_offset;
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, static_cast<std::int64_t>(d.rows)),
                           [&](const std::int64_t r) { u[r] = uv_init(d.u_offset + r); });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, static_cast<std::int64_t>(d.cols)),
                           [&](const std::int64_t c) { v[c] = uv_init(d.v_offset + c); });
    } else {
      const double u_scale = 1.0 / (sigma + kSpectralNormEps);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, static_cast<std::int64_t>(d.rows)),
                           [&](const std::int64_t r) { u[r] = static_cast<float>(ur[r] * u_scale); });
    }
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      sigmas(matrix) = static_cast<float>(sigma);
      w_scales(matrix) = !degenerate && sigma > sigma_max ? sigma_max / sigma : 0.0;
      arrivals(matrix) = 0;
    });
  }
};

// Pass 3. Every chunk scales its own elements of W by its matrix's factor, where pass 2 set one.
template <class Exec>
struct SpectralNormScale {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;

  Kokkos::View<const SpectralNormChunk*, Mem> chunks;
  Kokkos::View<const double*, Mem> w_scales;
  Kokkos::View<float*, Mem> params;
  Kokkos::View<const SpectralNormMatrix*, Mem> matrices;
  Kokkos::View<const int, Mem> skip;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const SpectralNormChunk k = chunks(team.league_rank());
    const std::int64_t weight_offset = matrices(k.matrix).desc.weight_offset;
    wait_for_prior_grids();
    allow_dependent_grids();
    if (skip.data() != nullptr && skip() != 0) return;
    const double factor = w_scales(k.matrix);
    if (factor == 0.0) return;
    float* const W = params.data() + weight_offset;
    const float w_scale = static_cast<float>(factor);
    // Thread t's lane l takes elements t·lanes + l, + team_size·lanes, …, its loads in batches.
    constexpr int kBatch = SpectralNormShape<Mem>::kLoadBatch;
    constexpr int lanes = SpectralNormShape<Mem>::kVectorLength;
    const std::int64_t stride = static_cast<std::int64_t>(team.team_size()) * lanes;
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, lanes), [&](const int lane) {
      std::int64_t i = k.begin + static_cast<std::int64_t>(team.team_rank()) * lanes + lane;
      for (; i + (kBatch - 1) * stride < k.end; i += kBatch * stride) {
        float b[kBatch];
        for (int q = 0; q < kBatch; ++q) b[q] = W[i + q * stride];
        for (int q = 0; q < kBatch; ++q) W[i + q * stride] = b[q] * w_scale;
      }
      for (; i < k.end; i += stride) W[i] *= w_scale;
    });
  }
};

// Enqueues one power iteration + scaling for every matrix of `plan` on `exec`: three
// launches, no allocation, no fence (so it can be captured into a graph). With `skip` given and
// set (the guard's flag, read on the device), the launches change nothing: W, u, v and σ stay. `uv_init` holds the
// vectors u and v are reset to when a matrix is degenerate; it has the layout of `uv`. Offsets
// in the plan are trusted (the SpectralNorm owner checks them once at construction; the
// launcher cannot read a device table without a sync). Each launch waits for the grids before it
// (AfterPriorGrids), so in a graph with programmatic edges it is placed while they drain.
template <class Exec>
void batched_spectral_norm(const Exec& exec,
                           const SpectralNormPlan<typename Exec::memory_space>& plan,
                           Kokkos::View<float*, typename Exec::memory_space> params,
                           Kokkos::View<float*, typename Exec::memory_space> uv,
                           Kokkos::View<const float*, typename Exec::memory_space> uv_init,
                           Kokkos::View<float*, typename Exec::memory_space> sigmas,
                           float sigma_max,
                           Kokkos::View<const int, typename Exec::memory_space> skip = {}) {
  using Mem = typename Exec::memory_space;
  using Shape = SpectralNormShape<Mem>;
  const std::size_t n = plan.matrices.extent(0);
  require(n >= 1, "batched_spectral_norm: the plan has 0 matrices; expected at least 1");
  require(sigmas.extent(0) == n, "batched_spectral_norm: sigmas has ", sigmas.extent(0),
          " entries; expected ", n, " (one per matrix)");
  require(uv_init.extent(0) == uv.extent(0), "batched_spectral_norm: uv_init has ",
          uv_init.extent(0), " floats; expected ", uv.extent(0), " (the size of uv)");
  require(plan.u_raw.extent(0) <= uv.extent(0), "batched_spectral_norm: the plan's vectors end at ",
          plan.u_raw.extent(0), " floats; expected at most ", uv.extent(0), " (the size of uv)");
  require(is_finite(sigma_max) && sigma_max > 0.f, "batched_spectral_norm: sigma_max = ", sigma_max,
          " is invalid; expected a finite number > 0");

  using Policy = Kokkos::TeamPolicy<Exec, Kokkos::Schedule<Kokkos::Dynamic>>;
  const int ts = Shape::kTeamSize, vl = Shape::kVectorLength;
  const int cc = plan.geometry.chunk_cols;
  Kokkos::parallel_for(
      "zs::spectral_norm::wtu",
      Policy(exec, static_cast<int>(plan.column_chunks.extent(0)), ts, vl)
          .set_scratch_size(0,
                            Kokkos::PerTeam(SpectralNormPartialWtu<Exec>::scratch_bytes(ts, cc))),
      AfterPriorGrids<SpectralNormPartialWtu<Exec>, true>(SpectralNormPartialWtu<Exec>{
          plan.matrices, plan.column_chunks, params, uv, plan.partials, cc, skip}));
  Kokkos::parallel_for(
      "zs::spectral_norm::wv",
      Policy(exec, static_cast<int>(plan.row_chunks.extent(0)), ts, vl)
          .set_scratch_size(0,
                            Kokkos::PerTeam(SpectralNormWv<Exec>::scratch_bytes(plan.staged_cols))),
      AfterPriorGrids<SpectralNormWv<Exec>, true>(SpectralNormWv<Exec>{
          plan.matrices, plan.row_chunks, params, plan.partials, uv, plan.u_raw, plan.staged_cols, skip, uv_init,
          sigmas, plan.arrivals, plan.w_scales, static_cast<double>(sigma_max)}));
  Kokkos::parallel_for(
      "zs::spectral_norm::scale",
      Policy(exec, static_cast<int>(plan.element_chunks.extent(0)), ts, vl),
      AfterPriorGrids<SpectralNormScale<Exec>, true>(
          SpectralNormScale<Exec>{plan.element_chunks, plan.w_scales, params, plan.matrices, skip}));
}

}  // namespace zs::kernels
