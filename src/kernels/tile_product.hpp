// The fused step's matrix products: one team computes a 64 × 32 tile of
//   C = epilogue( Σ over segments s of A_s · B_sᵀ ),   A_s [m, k_s], B_s [n, k_s],
// with each operand either k-contiguous (activations, W [out, in]) or row-contiguous (the
// transposes a backward pass reads), staged chunk by chunk through team scratch and multiplied
// by WarpTile (TF32 tensor cores on CUDA, FP32 loops on the host). The epilogue adds a bias,
// applies the ReLU or a ReLU mask, and can also give each row's sum of A (a bias gradient).
// One kernel shape serves the forward (x·Wᵀ + b), the input gradients (dz·W, masked) and the
// weight gradients (dzᵀ·x with the bias gradient beside it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "backends/warp_tile.hpp"
#include "kernels/last_team.hpp"

namespace zs::kernels {

// Element (row, k) of an operand is ptr[row·row_stride + k·k_stride]; one stride is 1.
struct ProductOperand {
  const float* ptr = nullptr;
  std::int64_t row_stride = 0, k_stride = 0;
  // 1 when it may be staged four floats at a time: ptr on 16 bytes and the other stride a
  // multiple of 4 (FusedBuilder::product decides); else one float at a time.
  int vec = 0;
};

// One term of a product's sum: A [m, k] and B [n, k] over the same k.
struct ProductSegment {
  ProductOperand a, b;
  int k = 0;
};

// C [m, n] = Σ_s A_s·B_sᵀ (segments seg0 .. seg0 + segs − 1 of the segment table), then per
// element: + bias[col] when bias is given, ReLU when relu (NaN stays NaN), zero where
// mask[row, col] <= 0 when mask is given (a NaN activation keeps its gradient), stored to
// out[row·out_ld + col]. row_sums, when given, gets Σ_s Σ_k A_s(row, k) for every row.
struct ProductJob {
  int m = 0, n = 0;
  int seg0 = 0, segs = 0;
  float* out = nullptr;
  std::int64_t out_ld = 0;
  const float* bias = nullptr;
  int relu = 0;
  const float* mask = nullptr;
  std::int64_t mask_ld = 0;
  float* row_sums = nullptr;
  int tiles_n = 0;  // column tiles; a job has tiles_m · tiles_n · splits tiles
  int tiles_m = 0;
  // Split-K: each output tile's k chunks (`chunks` of them, over all segments) shared by
  // `splits` tiles. With splits > 1 each stores its partial sums (kPartialFloats a tile, at
  // partials + ((tm·tiles_n + tn)·splits + split)·kPartialFloats) and counts itself done at
  // counters[tm·tiles_n + tn]; the last to arrive adds the partials in split order and runs the
  // epilogue, so the result is the same bits whichever split finishes last.
  int splits = 1;
  int chunks = 0;
  float* partials = nullptr;
  int* counters = nullptr;
};

template <class Exec>
struct TileProduct {
  using Tile = WarpTile<Exec>;
  static constexpr bool kHost = Tile::kVectorLength == 1;
  static constexpr int kM = 64, kN = 32, kK = 32;  // C's tile and the k chunk staged at once
  static constexpr int kWarpM = 32, kWarpN = 16;   // a warp's part of the tile: 2 × 2 WarpTiles
  static constexpr int kWarpsN = kN / kWarpN;
  static constexpr int kWarps = (kM / kWarpM) * kWarpsN;
  // CUDA: a warp per part; host: one thread does all four.
  static constexpr int kTeamSize = kHost ? 1 : kWarps;
  static constexpr int kThreads = kTeamSize * Tile::kVectorLength;
  static constexpr int kSlots = kWarps / kTeamSize;
  // Scratch strides chosen so that the 32 lanes of a fragment load hit 32 banks: [row][k] rows
  // of kK + 4 (bank 4g + t), [k][row] rows of 8 more than the tile's rows (bank 8t + g).
  static constexpr int kRowLd = kK + 4, kAkLd = kM + 8, kBkLd = kN + 8;
  static constexpr int kAFloats = kM * kRowLd > kK * kAkLd ? kM * kRowLd : kK * kAkLd;
  static constexpr int kBFloats = kN * kRowLd > kK * kBkLd ? kN * kRowLd : kK * kBkLd;
  static constexpr int kStageFloats = kAFloats + kBFloats;
  static constexpr int kStages = 3;  // chunks in scratch at once: 42 KiB
  static constexpr std::size_t kScratchBytes = sizeof(float) * kStages * kStageFloats;
  static constexpr int kRowSumsPerThread = kHost ? kM : 1;
  // A split's partial: the accumulators as every thread holds them, then the row sums.
  static constexpr int kAccFloats = static_cast<int>(sizeof(Tile::c) / sizeof(float));
  static constexpr int kPartialFloats = kM * kN + kM;
  static_assert(kSlots * 4 * kAccFloats * kThreads == kM * kN, "a partial holds the tile's accumulators");

  // Chunks of kK in a segment of length k.
  KOKKOS_INLINE_FUNCTION static int chunks_of(int k) { return (k + kK - 1) / kK; }
  // Split `split` of `splits` takes chunks [first, first + count) of `chunks`.
  KOKKOS_INLINE_FUNCTION static void split_range(int chunks, int splits, int split, int& first, int& count) {
    first = static_cast<int>(static_cast<long long>(chunks) * split / splits);
    count = static_cast<int>(static_cast<long long>(chunks) * (split + 1) / splits) - first;
  }

  KOKKOS_INLINE_FUNCTION static int tiles(int rows, int cols, int& tiles_m, int& tiles_n) {
    tiles_m = (rows + kM - 1) / kM;
    tiles_n = (cols + kN - 1) / kN;
    return tiles_m * tiles_n;
  }

  // Split `split` of tile (tm, tn) of `job`; `scratch` holds kScratchBytes. Called by the whole
  // team. The k chunks stream through kStages stages of scratch: while the tensor cores work on
  // chunk c, chunks c + 1 .. c + kStages − 1 are on their way (cp.async on CUDA), one barrier a
  // chunk.
  template <class Member>
  KOKKOS_INLINE_FUNCTION static void run(const Member& team, float* scratch, const ProductJob& job,
                                         const ProductSegment* segments, int tm, int tn, int split = 0) {
    const int m0 = tm * kM, n0 = tn * kN;
    const int tid = kHost ? 0 : team.team_rank() * Tile::kVectorLength + Tile::lane();
    const bool sums = job.row_sums != nullptr && tn == 0;
    int first = 0, count = 0;
    split_range(job.chunks, job.splits, split, first, count);
    Tile acc[kSlots][2][2];
    ZS_UNROLL
    for (int s = 0; s < kSlots; ++s)
      ZS_UNROLL
      for (int i = 0; i < 2; ++i)
        ZS_UNROLL
        for (int j = 0; j < 2; ++j) acc[s][i][j].zero();
    float rsum[kRowSumsPerThread];
    for (int r = 0; r < kRowSumsPerThread; ++r) rsum[r] = 0.f;

    // Two cursors over the chunks (segment, first k): the next to stage and the next to multiply.
    int iseg = 0, ik0 = 0;
    seek_chunk(job, segments, first, iseg, ik0);
    int cseg = iseg, ck0 = ik0, issued = 0;
    ZS_UNROLL
    for (int st = 0; st + 1 < kStages; ++st) {
      if (issued < count) {
        issue(scratch + st * kStageFloats, segments[job.seg0 + iseg], m0, n0, job, ik0, tid);
        next_chunk(job, segments, iseg, ik0);
        ++issued;
      }
      Tile::commit_copies();  // empty groups too: the wait below counts groups
    }
    int buf = 0;
    for (int done = 0; done < count; ++done) {
      Tile::template wait_copies<kStages - 2>();  // chunk `buf` has landed (this thread's part) …
      team.team_barrier();  // … everyone's, and every thread is done with the stage refilled next
      if (issued < count) {
        const int to = buf + kStages - 1 < kStages ? buf + kStages - 1 : buf - 1;
        issue(scratch + to * kStageFloats, segments[job.seg0 + iseg], m0, n0, job, ik0, tid);
        next_chunk(job, segments, iseg, ik0);
        ++issued;
      }
      Tile::commit_copies();
      multiply(team, scratch + buf * kStageFloats, segments[job.seg0 + cseg], acc, sums, rsum, tid);
      next_chunk(job, segments, cseg, ck0);
      buf = buf + 1 < kStages ? buf + 1 : 0;
    }
    Tile::template wait_copies<0>();
    if (job.splits > 1) {
      const int tile = tm * job.tiles_n + tn;
      float* const mine = job.partials + (static_cast<std::int64_t>(tile) * job.splits + split) * kPartialFloats;
      store_partial(mine, acc, sums, rsum, tid);
      if (!finished_last(team, job.counters + tile, job.splits)) return;
      const float* const all = job.partials + static_cast<std::int64_t>(tile) * job.splits * kPartialFloats;
      add_partials(all, job.splits, acc, sums, rsum, tid);
      if (tid == 0) job.counters[tile] = 0;  // for the next launch (a graph replay)
    }
    epilogue(team, job, acc, m0, n0);
    if (sums) {
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = m0 + (kHost ? r : tid);
        if ((kHost || tid < kM) && row < job.m) job.row_sums[row] = rsum[r];
      }
    }
  }

 private:
  KOKKOS_INLINE_FUNCTION static bool k_major(const ProductOperand& o) { return o.k_stride != 1; }

  // The cursor at chunk `c` of the job's sequence (segment by segment, kK at a time).
  KOKKOS_INLINE_FUNCTION static void seek_chunk(const ProductJob& job, const ProductSegment* segments, int c, int& seg,
                                                int& k0) {
    seg = 0;
    k0 = 0;
    while (seg < job.segs) {
      const int n = chunks_of(segments[job.seg0 + seg].k);
      if (c < n) {
        k0 = c * kK;
        return;
      }
      c -= n;
      ++seg;
    }
  }

  // f(element, its place in a partial) for every accumulator element this thread holds.
  template <class Acc, class F>
  KOKKOS_INLINE_FUNCTION static void for_each_acc(Acc& acc, int tid, const F& f) {
    ZS_UNROLL
    for (int s = 0; s < kSlots; ++s)
      ZS_UNROLL
      for (int i = 0; i < 2; ++i)
        ZS_UNROLL
        for (int j = 0; j < 2; ++j)
          ZS_UNROLL
          for (int e = 0; e < kAccFloats; ++e) f(acc[s][i][j].c[e], (((s * 2 + i) * 2 + j) * kAccFloats + e) * kThreads + tid);
  }

  // A split's accumulators and row sums to its partial, each thread's own values where the same
  // thread of the last split reads them back.
  KOKKOS_INLINE_FUNCTION static void store_partial(float* p, const Tile (&acc)[kSlots][2][2], bool sums,
                                                   const float* rsum, int tid) {
    for_each_acc(acc, tid, [&](const float& v, int at) { p[at] = v; });
    if (sums)
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = kHost ? r : tid;
        if (row < kM) p[kM * kN + row] = rsum[r];
      }
  }

  // Σ over the splits of a partial's value at `at`, in split order. The partials were stored by
  // other teams of this launch: loads that bypass L1.
  KOKKOS_INLINE_FUNCTION static float sum_of_splits(const float* all, int splits, int at) {
    float v = Tile::load_shared(all + at);
    for (int k = 1; k < splits; ++k) v += Tile::load_shared(all + static_cast<std::int64_t>(k) * kPartialFloats + at);
    return v;
  }

  // acc and rsum become the sum of every split's partial.
  KOKKOS_INLINE_FUNCTION static void add_partials(const float* all, int splits, Tile (&acc)[kSlots][2][2], bool sums,
                                                  float* rsum, int tid) {
    for_each_acc(acc, tid, [&](float& v, int at) { v = sum_of_splits(all, splits, at); });
    if (sums)
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = kHost ? r : tid;
        if (row < kM) rsum[r] = sum_of_splits(all, splits, kM * kN + row);
      }
  }
  KOKKOS_INLINE_FUNCTION static void next_chunk(const ProductJob& job, const ProductSegment* segments, int& seg,
                                                int& k0) {
    k0 += kK;
    if (k0 < segments[job.seg0 + seg].k) return;
    k0 = 0;
    do ++seg;
    while (seg < job.segs && segments[job.seg0 + seg].k == 0);
  }

  // Element e of a chunk of operand o (rows r0.., k k0..) and where it goes in scratch.
  KOKKOS_INLINE_FUNCTION static float element(const ProductOperand& o, bool km, int tile_rows, int ld, int e,
                                              int r0, int rows, int k0, int k, int& at) {
    int r, kk;
    if (km) {
      kk = e / tile_rows;
      r = e % tile_rows;
      at = kk * ld + r;
    } else {
      r = e / kK;
      kk = e % kK;
      at = r * kRowLd + kk;
    }
    const int gr = r0 + r, gk = k0 + kk;
    if (gr >= rows || gk >= k) return 0.f;
    return Tile::load_shared(o.ptr + gr * o.row_stride + gk * o.k_stride);
  }

  // Stages operand o's chunk (rows r0 .. r0 + Rows, k k0 .. k0 + kK) into dst, zero past its
  // edges: [k][row] rows of ld_k floats when o is row-contiguous, [row][k] rows of kRowLd when
  // k-contiguous. Four floats at a time, asynchronously, where o allows; else one at a time.
  template <int Rows>
  KOKKOS_INLINE_FUNCTION static void issue_operand(float* dst, const ProductOperand& o, int ld_k, int r0, int rows,
                                                   int k0, int k, int tid) {
    const bool km = k_major(o);
    if (o.vec) {
      constexpr int kVecs = Rows * kK / 4;
      ZS_UNROLL
      for (int i = 0; i < kVecs / kThreads; ++i) {
        const int v = tid + i * kThreads;
        int r, kk, valid;
        if (km) {  // four rows at one k
          kk = v / (Rows / 4);
          r = (v % (Rows / 4)) * 4;
          const int left = rows - (r0 + r);
          valid = k0 + kk < k ? (left < 0 ? 0 : (left > 4 ? 4 : left)) : 0;
        } else {  // four k at one row
          r = v / (kK / 4);
          kk = (v % (kK / 4)) * 4;
          const int left = k - (k0 + kk);
          valid = r0 + r < rows ? (left < 0 ? 0 : (left > 4 ? 4 : left)) : 0;
        }
        const float* const src =
            valid > 0 ? o.ptr + (r0 + r) * o.row_stride + (k0 + kk) * o.k_stride : o.ptr;
        Tile::copy4_async(dst + (km ? kk * ld_k + r : r * kRowLd + kk), src, valid);
      }
    } else {
      ZS_UNROLL
      for (int i = 0; i < Rows * kK / kThreads; ++i) {
        int at = 0;
        const float v = element(o, km, Rows, ld_k, tid + i * kThreads, r0, rows, k0, k, at);
        dst[at] = v;
      }
    }
  }

  KOKKOS_INLINE_FUNCTION static void issue(float* stage, const ProductSegment& s, int m0, int n0,
                                           const ProductJob& job, int k0, int tid) {
    issue_operand<kM>(stage, s.a, kAkLd, m0, job.m, k0, s.k, tid);
    issue_operand<kN>(stage + kAFloats, s.b, kBkLd, n0, job.n, k0, s.k, tid);
  }

  // The chunk's product, with the scratch layout of each operand known at compile time: every
  // fragment load is then one shared-memory load at a constant offset, and each warp loads its
  // two A and two B fragments once per k-step for its four tiles.
  template <bool AKM, bool BKM, class Member>
  KOKKOS_INLINE_FUNCTION static void multiply_as(const Member& team, const float* stage, Tile (&acc)[kSlots][2][2],
                                                 bool sums, float* rsum, int tid) {
    constexpr int a_rs = AKM ? 1 : kRowLd, a_ks = AKM ? kAkLd : 1;
    constexpr int b_rs = BKM ? 1 : kRowLd, b_ks = BKM ? kBkLd : 1;
    const float* const sa = stage;
    const float* const sb = stage + kAFloats;
    for (int slot = 0; slot < kSlots; ++slot) {
      const int w = (kHost ? 0 : team.team_rank()) * kSlots + slot;
      const float* const wa = sa + (w / kWarpsN) * kWarpM * a_rs;
      const float* const wb = sb + (w % kWarpsN) * kWarpN * b_rs;
      ZS_UNROLL
      for (int kk = 0; kk < kK; kk += Tile::kK) {
        typename Tile::AFragment fa[2];
        typename Tile::BFragment fb[2];
        ZS_UNROLL
        for (int i = 0; i < 2; ++i) Tile::template load_a<a_rs, a_ks>(fa[i], wa + 16 * i * a_rs + kk * a_ks);
        ZS_UNROLL
        for (int j = 0; j < 2; ++j) Tile::template load_b<b_rs, b_ks>(fb[j], wb + 8 * j * b_rs + kk * b_ks);
        ZS_UNROLL
        for (int i = 0; i < 2; ++i)
          ZS_UNROLL
          for (int j = 0; j < 2; ++j) acc[slot][i][j].mma(fa[i], fb[j]);
      }
    }
    if (sums)
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = kHost ? r : tid;
        if (row < kM)
          ZS_UNROLL
          for (int kk = 0; kk < kK; ++kk) rsum[r] += sa[row * a_rs + kk * a_ks];
      }
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION static void multiply(const Member& team, const float* stage, const ProductSegment& s,
                                              Tile (&acc)[kSlots][2][2], bool sums, float* rsum, int tid) {
    const bool akm = k_major(s.a), bkm = k_major(s.b);
    if (akm) {
      if (bkm)
        multiply_as<true, true>(team, stage, acc, sums, rsum, tid);
      else
        multiply_as<true, false>(team, stage, acc, sums, rsum, tid);
    } else {
      if (bkm)
        multiply_as<false, true>(team, stage, acc, sums, rsum, tid);
      else
        multiply_as<false, false>(team, stage, acc, sums, rsum, tid);
    }
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION static void epilogue(const Member& team, const ProductJob& job,
                                              const Tile (&acc)[kSlots][2][2], int m0, int n0) {
    for (int slot = 0; slot < kSlots; ++slot) {
      const int w = (kHost ? 0 : team.team_rank()) * kSlots + slot;
      const int wm = m0 + (w / kWarpsN) * kWarpM, wn = n0 + (w % kWarpsN) * kWarpN;
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          acc[slot][i][j].for_each([&](int m, int n, float v) {
            const int row = wm + 16 * i + m, col = wn + 8 * j + n;
            if (row >= job.m || col >= job.n) return;
            if (job.bias) v += job.bias[col];
            if (job.relu && v < 0.f) v = 0.f;
            if (job.mask && Tile::load_shared(job.mask + row * job.mask_ld + col) <= 0.f) v = 0.f;
            job.out[row * job.out_ld + col] = v;
          });
    }
  }
};

}  // namespace zs::kernels
