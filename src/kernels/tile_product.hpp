// The fused step's matrix products: one team computes a Rows × Cols tile (64 × 32, 32 × 32 or
// 32 × 16) of
//   C = epilogue( Σ over segments s of A_s · B_sᵀ ),   A_s [m, k_s], B_s [n, k_s],
// with each operand either k-contiguous (activations, W [out, in]) or row-contiguous (the
// transposes a backward pass reads), staged chunk by chunk through team scratch and multiplied
// by WarpTile (TF32 tensor cores on CUDA, FP32 loops on the host). The epilogue adds a bias,
// applies the ReLU or a ReLU mask, and can also give each row's sum of A (a bias gradient), or
// scale each value by its row group's factor and sum each group's rows (IQN's modulation backward).
// One kernel shape serves the forward (x·Wᵀ + b), the input gradients (dz·W, masked) and the
// weight gradients (dzᵀ·x with the bias gradient beside it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "backends/warp_tile.hpp"
#include "kernels/last_team.hpp"
#include "kernels/tile_clocks.hpp"

namespace zs::kernels {

// Element (row, k) of an operand is ptr[row·row_stride + k·k_stride]; one stride is 1.
struct ProductOperand {
  const float* ptr = nullptr;
  std::int64_t row_stride = 0, k_stride = 0;
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
  // A product whose rows come in groups of `group` (IQN's n_tau rows a sample: the ∂h product of
  // its modulation h = f ⊙ φ). scale, when given: each stored value times scale[row / group, col]
  // (after the mask: ∂φ = ∂h · f, zero where φ ≤ 0). group_sums, when given: for every group and
  // column, Σ over the group's rows, in row order, of the product times mask[row, col] (∂f = Σ_n
  // ∂h · φ), stored at group_sums[(row / group)·group_sums_ld + col], or 0 where group_relu and
  // scale[row / group, col] <= 0 (through the ReLU that made f). Each tile must hold whole groups
  // (group divides the tile's rows): FusedBuilder::build refuses a job that does not.
  const float* scale = nullptr;
  std::int64_t scale_ld = 0;
  int group = 1;
  float* group_sums = nullptr;
  std::int64_t group_sums_ld = 0;
  int group_relu = 0;
  // When given, each output tile's Σ v² (in double) of every value it stores, its row sums' too,
  // at squares[tm·tiles_n + tn]: the gradient norm's partial sums from the tiles that write the
  // gradient (kernels/fused_norm.hpp), instead of a pass of their own over it.
  double* squares = nullptr;
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
  // The segments' layouts (FusedBuilder::product sets them; every segment of a job has the same):
  // A, B row-contiguous (staged [k][row]); vec: every operand staged four floats at a time.
  int a_km = 0, b_km = 0, vec = 0;
};

// Rows × Cols: the tile. 64 × 32 gives each of the four warps 2 × 2 WarpTiles (each fragment
// loaded once feeds two products); 32 × 32 gives it 1 × 2, half the chain a chunk and half the
// registers, and twice the tiles: what a product of few tiles needs to fill the GPU; 32 × 16 one
// WarpTile a warp, half that again.
//
// Stages: chunks in scratch at once, so Stages − 1 of them are on their way while the tensor
// cores work on one. A tile's chunks are a chain, each waiting for its copy from L2: with more
// of them in flight a chunk waits for a fraction of the copy's latency.
template <class Exec, int Rows = 64, int Cols = 32, int Stages = 3>
struct TileProduct {
  static_assert((Rows == 64 && Cols == 32) || (Rows == 32 && (Cols == 32 || Cols == 16)),
                "a tile of 64 × 32, 32 × 32 or 32 × 16");
  static_assert(Stages >= 2 && Stages <= 8, "2 to 8 stages");
  using Tile = WarpTile<Exec>;
  static constexpr bool kHost = Tile::kVectorLength == 1;
  static constexpr int kM = Rows, kN = Cols, kK = 32;  // C's tile and the k chunk staged at once
  static constexpr int kWarpM = kM / 2, kWarpN = kN / 2;  // a warp's part of the tile
  static constexpr int kTm = kWarpM / Tile::kM, kTn = kWarpN / Tile::kN;  // its WarpTiles
  static constexpr int kWarpsN = kN / kWarpN;
  static constexpr int kWarps = (kM / kWarpM) * kWarpsN;
  // CUDA: a warp per part; host: one thread does all four.
  static constexpr int kTeamSize = kHost ? 1 : kWarps;
  static constexpr int kThreads = kTeamSize * Tile::kVectorLength;
  static constexpr int kSlots = kWarps / kTeamSize;
  // Scratch strides chosen so that the 32 lanes of a fragment load hit 32 banks: [row][k] rows
  // of kK + 4 (bank 4g + t), [k][row] rows of 8 more than the tile's rows (bank 8t + g, or for
  // rows of 24, 24t + g: 0–7, 24–31, 16–23, 8–15).
  static constexpr int kRowLd = kK + 4, kAkLd = kM + 8, kBkLd = kN + 8;
  static constexpr int kAFloats = kM * kRowLd > kK * kAkLd ? kM * kRowLd : kK * kAkLd;
  static constexpr int kBFloats = kN * kRowLd > kK * kBkLd ? kN * kRowLd : kK * kBkLd;
  static constexpr int kStageFloats = kAFloats + kBFloats;
  static constexpr int kStages = Stages;  // 3 stages: 42 KiB at 64 rows, 30 KiB at 32 × 32 (kScratchBytes)
  static constexpr int kRowSumsPerThread = kHost ? kM : 1;
  // A split's partial: the accumulators as every thread holds them, then the row sums.
  static constexpr int kAccFloats = static_cast<int>(sizeof(Tile::c) / sizeof(float));
  static constexpr int kPartialFloats = kM * kN + kM;
  static_assert(kSlots * kTm * kTn * kAccFloats * kThreads == kM * kN, "a partial holds the tile's accumulators");
  using Acc = Tile[kSlots][kTm][kTn];

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

  // Split `split` of tile (tm, tn) of `job`, whose segments are segments[0 .. job.segs) (the
  // table's from job.seg0 on); `scratch` holds kScratchBytes. Called by the whole
  // team. The k chunks stream through kStages stages of scratch: while the tensor cores work on
  // chunk c, chunks c + 1 .. c + kStages − 1 are on their way (cp.async on CUDA), one barrier a
  // chunk. The job's layouts and staging pick one of eight bodies here, once a tile, so that in
  // the chunk loop every stride and scratch offset that can be a constant is one.
  // trigger: the grids after this one may be scheduled once every block is past its chunks
  // (allow_dependent_grids; FusedOptions::dependents_early).
  // wait: the tile itself waits for the grids its launch follows (wait_for_prior_grids), once
  // its job and segments are read (tables written before the step) and before its first copy of
  // an operand.
  // clocks: when given, the multiprocessor's cycles once the first chunk has landed (clocks[0]),
  // once the chunk loop is done (clocks[1]) and once the epilogue has stored (clocks[2]), stored
  // by the team's first thread (FusedOptions::timeline).
  template <class Member>
  KOKKOS_INLINE_FUNCTION static void run(const Member& team, float* scratch, const ProductJob& job,
                                         const ProductSegment* segments, int tm, int tn, int split = 0,
                                         bool wait = false, bool trigger = false,
                                         std::uint64_t* clocks = nullptr) {
    const int m0 = tm * kM, n0 = tn * kN;
    const int tid = kHost ? 0 : team.team_rank() * Tile::kVectorLength + Tile::lane();
    const bool sums = job.row_sums != nullptr && tn == 0;
    int first = 0, count = 0;
    split_range(job.chunks, job.splits, split, first, count);
    Acc acc;
    ZS_UNROLL
    for (int s = 0; s < kSlots; ++s)
      ZS_UNROLL
      for (int i = 0; i < kTm; ++i)
        ZS_UNROLL
        for (int j = 0; j < kTn; ++j) acc[s][i][j].zero();
    float rsum[kRowSumsPerThread];
    for (int r = 0; r < kRowSumsPerThread; ++r) rsum[r] = 0.f;
    const Chunks c{job, segments, scratch, m0, n0, first, count, sums, tid, wait, clocks};
    switch ((job.a_km ? 1 : 0) | (job.b_km ? 2 : 0) | (job.vec ? 4 : 0)) {
      case 0: accumulate<false, false, false>(team, c, acc, rsum); break;
      case 1: accumulate<true, false, false>(team, c, acc, rsum); break;
      case 2: accumulate<false, true, false>(team, c, acc, rsum); break;
      case 3: accumulate<true, true, false>(team, c, acc, rsum); break;
      case 4: accumulate<false, false, true>(team, c, acc, rsum); break;
      case 5: accumulate<true, false, true>(team, c, acc, rsum); break;
      case 6: accumulate<false, true, true>(team, c, acc, rsum); break;
      default: accumulate<true, true, true>(team, c, acc, rsum); break;
    }
    stamp_cycles(team, clocks, 1);
    if (trigger) allow_dependent_grids();
    if (sums && kSumParts > 1) {
      float* const parts = scratch + kStages * kStageFloats;
      const int part = tid / kM, row = tid % kM;
      if (part > 0) parts[(part - 1) * kM + row] = rsum[0];
      team.team_barrier();
      if (part == 0)
        for (int p = 1; p < kSumParts; ++p) rsum[0] += parts[(p - 1) * kM + row];
    }
    if (job.splits > 1) {
      const int tile = tm * job.tiles_n + tn;
      float* const mine = job.partials + (static_cast<std::int64_t>(tile) * job.splits + split) * kPartialFloats;
      store_partial(mine, acc, sums, rsum, tid);
      if (!finished_last(team, job.counters + tile, job.splits)) return;
      const float* const all = job.partials + static_cast<std::int64_t>(tile) * job.splits * kPartialFloats;
      add_partials(all, job.splits, acc, sums, rsum, tid);
      if (tid == 0) job.counters[tile] = 0;  // for the next launch (a graph replay)
    }
    double squares = epilogue(team, job, acc, m0, n0);
    if (job.group_sums) sum_groups(team, scratch, job, acc, m0, n0, tid);
    if (sums) {
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = m0 + (kHost ? r : tid);
        if ((kHost || tid < kM) && row < job.m) {
          job.row_sums[row] = rsum[r];
          squares += static_cast<double>(rsum[r]) * rsum[r];
        }
      }
    }
    if (job.squares) store_squares(team, scratch, job.squares + tm * job.tiles_n + tn, squares, tid);
    stamp_cycles(team, clocks, 2);
  }

 private:
  // Threads that share each row's sum of A (each takes kK / kSumParts of every chunk's k); the
  // parts meet in kSumFloats of scratch past the stages, in a fixed order.
  static constexpr int kSumParts = kHost ? 1 : kThreads / kM;
  static constexpr int kSumFloats = kM * (kSumParts - 1);
  static_assert(kHost || (kThreads % kM == 0 && kK % kSumParts == 0), "row sums split evenly");

 public:
  static constexpr std::size_t kScratchBytes = sizeof(float) * (kStages * kStageFloats + kSumFloats);

 private:
  // This thread's part of staging one operand's chunks (rows r0 .. r0 + StageRows, k k0 .. k0 + kK)
  // into a stage, zero past the operand's edges: [k][row] rows of kLd floats when the operand is
  // row-contiguous (KM), [row][k] rows of kRowLd when k-contiguous. VEC: four floats a copy,
  // asynchronously; the thread's copies lie a fixed step apart (on CUDA), so each copy's source
  // is the first one's plus a constant times the stride. Else one float at a time.
  template <int StageRows, bool KM, bool VEC>
  struct Stager {
    static constexpr int kLd = KM ? StageRows + 8 : kRowLd;
    static constexpr int kPer = KM ? StageRows / 4 : kK / 4;  // copies along the contiguous direction
    static constexpr int kCopies = StageRows * kK / 4 / kThreads;
    static constexpr int kElems = StageRows * kK / kThreads;
    static constexpr bool kStepped = kThreads % kPer == 0;
    const float* ptr = nullptr;
    std::int64_t ld = 0;  // the stride that is not 1
    int r0 = 0, rows = 0, k0 = 0, k = 0;
    int r = 0, kk = 0;  // the thread's first copy in the tile (VEC)

    KOKKOS_INLINE_FUNCTION static void coords(int v, int& row, int& kpos) {
      if (KM) {
        kpos = v / kPer;
        row = v % kPer * 4;
      } else {
        row = v / kPer;
        kpos = v % kPer * 4;
      }
    }
    // Element v of a chunk, one float a copy.
    KOKKOS_INLINE_FUNCTION static void place(int v, int& row, int& kpos) {
      if (KM) {
        kpos = v / StageRows;
        row = v % StageRows;
      } else {
        row = v / kK;
        kpos = v % kK;
      }
    }
    KOKKOS_INLINE_FUNCTION void start(const ProductOperand& o, int first_row, int all_rows, int first_k, int seg_k,
                                      int tid) {
      ptr = o.ptr;
      ld = KM ? o.k_stride : o.row_stride;
      r0 = first_row;
      rows = all_rows;
      k0 = first_k;
      k = seg_k;
      coords(tid, r, kk);
    }
    KOKKOS_FORCEINLINE_FUNCTION void issue(float* dst, int tid) const {
      if (VEC) {
        ZS_UNROLL
        for (int i = 0; i < kCopies; ++i) {
          int cr = r, ck = kk;
          if (kStepped) {
            if (KM)
              ck += i * (kThreads / kPer);
            else
              cr += i * (kThreads / kPer);
          } else {
            coords(tid + i * kThreads, cr, ck);
          }
          const int row_left = rows - (r0 + cr), k_left = k - (k0 + ck);
          const int along = KM ? row_left : k_left;
          const int valid = (KM ? k_left : row_left) > 0 ? (along < 0 ? 0 : (along > 4 ? 4 : along)) : 0;
          const std::int64_t at = KM ? (r0 + cr) + (k0 + ck) * ld : (r0 + cr) * ld + (k0 + ck);
          Tile::copy4_async(dst + (KM ? ck * kLd + cr : cr * kRowLd + ck), valid > 0 ? ptr + at : ptr, valid);
        }
      } else {
        // Every load before the first store into scratch (as the epilogue's, for the same reason).
        float got[kElems];
        ZS_UNROLL
        for (int i = 0; i < kElems; ++i) {
          int er, ek;
          place(tid + i * kThreads, er, ek);
          const int gr = r0 + er, gk = k0 + ek;
          got[i] = gr < rows && gk < k ? Tile::load_shared(ptr + (KM ? gr + gk * ld : gr * ld + gk)) : 0.f;
        }
        ZS_UNROLL
        for (int i = 0; i < kElems; ++i) {
          int er, ek;
          place(tid + i * kThreads, er, ek);
          dst[KM ? ek * kLd + er : er * kRowLd + ek] = got[i];
        }
      }
    }
  };

  // The next chunk to stage: its segment and first k, and each operand's stager for it.
  template <bool AKM, bool BKM, bool VEC>
  struct Cursor {
    int seg = 0, k0 = 0, seg_k = 0;
    Stager<kM, AKM, VEC> a;
    Stager<kN, BKM, VEC> b;
    KOKKOS_FORCEINLINE_FUNCTION void start(const ProductJob& job, const ProductSegment* segments, int m0, int n0,
                                           int tid) {
      const ProductSegment& s = segments[seg];
      seg_k = s.k;
      a.start(s.a, m0, job.m, k0, seg_k, tid);
      b.start(s.b, n0, job.n, k0, seg_k, tid);
    }
    // Stages this chunk into `stage` and moves on to the next.
    KOKKOS_FORCEINLINE_FUNCTION void stage(float* stage, const ProductJob& job, const ProductSegment* segments, int m0,
                                           int n0, int tid) {
      a.issue(stage, tid);
      b.issue(stage + kAFloats, tid);
      k0 += kK;
      if (k0 < seg_k) {
        a.k0 = b.k0 = k0;
        return;
      }
      k0 = 0;
      do ++seg;
      while (seg < job.segs && segments[seg].k == 0);
      if (seg < job.segs) start(job, segments, m0, n0, tid);
    }
  };

  // What a tile's chunk loop works on.
  struct Chunks {
    const ProductJob& job;
    const ProductSegment* segments;
    float* scratch;
    int m0, n0, first, count;
    bool sums;
    int tid;
    bool wait;  // wait_for_prior_grids() before the first copy
    std::uint64_t* clocks;  // run's clocks, or null
  };

  // acc (and rsum) += the products of chunks [first, first + count) of the job, every copy into
  // scratch landed when it returns.
  template <bool AKM, bool BKM, bool VEC, class Member>
  KOKKOS_FORCEINLINE_FUNCTION static void accumulate(const Member& team, const Chunks& c, Acc& acc,
                                                     float* rsum) {
    Cursor<AKM, BKM, VEC> next;
    seek_chunk(c.job, c.segments, c.first, next.seg, next.k0);
    if (c.count > 0) next.start(c.job, c.segments, c.m0, c.n0, c.tid);
    if (c.wait) wait_for_prior_grids();
    int issued = 0;
    ZS_UNROLL
    for (int st = 0; st + 1 < kStages; ++st) {
      if (issued < c.count) {
        next.stage(c.scratch + st * kStageFloats, c.job, c.segments, c.m0, c.n0, c.tid);
        ++issued;
      }
      Tile::commit_copies();  // empty groups too: the wait below counts groups
    }
    // The timeline's landing stamp: a wait and a barrier of its own, so that the chunk loop holds no
    // test of the clocks (nor the registers of one).
    if (c.clocks != nullptr && c.count > 0) {
      Tile::template wait_copies<kStages - 2>();
      team.team_barrier();
      stamp_cycles(team, c.clocks, 0);
    }
    int buf = 0;
    for (int done = 0; done < c.count; ++done) {
      Tile::template wait_copies<kStages - 2>();  // chunk `buf` has landed (this thread's part) …
      team.team_barrier();  // … everyone's, and every thread is done with the stage refilled next
      if (issued < c.count) {
        const int to = buf + kStages - 1 < kStages ? buf + kStages - 1 : buf - 1;
        next.stage(c.scratch + to * kStageFloats, c.job, c.segments, c.m0, c.n0, c.tid);
        ++issued;
      }
      Tile::commit_copies();
      multiply_as<AKM, BKM>(team, c.scratch + buf * kStageFloats, acc, c.sums, rsum, c.tid);
      buf = buf + 1 < kStages ? buf + 1 : 0;
    }
    Tile::template wait_copies<0>();
  }

  // The cursor at chunk `c` of the job's sequence (segment by segment, kK at a time).
  KOKKOS_INLINE_FUNCTION static void seek_chunk(const ProductJob& job, const ProductSegment* segments, int c, int& seg,
                                                int& k0) {
    seg = 0;
    k0 = 0;
    while (seg < job.segs) {
      const int n = chunks_of(segments[seg].k);
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
      for (int i = 0; i < kTm; ++i)
        ZS_UNROLL
        for (int j = 0; j < kTn; ++j)
          ZS_UNROLL
          for (int e = 0; e < kAccFloats; ++e)
            f(acc[s][i][j].c[e], (((s * kTm + i) * kTn + j) * kAccFloats + e) * kThreads + tid);
  }

  // A split's accumulators and row sums to its partial, each thread's own values where the same
  // thread of the last split reads them back.
  KOKKOS_INLINE_FUNCTION static void store_partial(float* p, const Acc& acc, bool sums,
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
  KOKKOS_INLINE_FUNCTION static void add_partials(const float* all, int splits, Acc& acc, bool sums,
                                                  float* rsum, int tid) {
    for_each_acc(acc, tid, [&](float& v, int at) { v = sum_of_splits(all, splits, at); });
    if (sums)
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = kHost ? r : tid;
        if (row < kM) rsum[r] = sum_of_splits(all, splits, kM * kN + row);
      }
  }

  // The chunk's product, with the scratch layout of each operand known at compile time: every
  // fragment load is then one shared-memory load at a constant offset, and each warp loads its
  // kTm A and kTn B fragments once per k-step for its kTm · kTn tiles. Row sums: this thread's part of
  // its row's k (kSumParts threads a row on CUDA, so every warp takes a share).
  template <bool AKM, bool BKM, class Member>
  KOKKOS_FORCEINLINE_FUNCTION static void multiply_as(const Member& team, const float* stage, Acc& acc,
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
        typename Tile::AFragment fa[kTm];
        typename Tile::BFragment fb[kTn];
        ZS_UNROLL
        for (int i = 0; i < kTm; ++i)
          Tile::template load_a<a_rs, a_ks>(fa[i], wa + Tile::kM * i * a_rs + kk * a_ks);
        ZS_UNROLL
        for (int j = 0; j < kTn; ++j)
          Tile::template load_b<b_rs, b_ks>(fb[j], wb + Tile::kN * j * b_rs + kk * b_ks);
        ZS_UNROLL
        for (int i = 0; i < kTm; ++i)
          ZS_UNROLL
          for (int j = 0; j < kTn; ++j) acc[slot][i][j].mma(fa[i], fb[j]);
      }
    }
    if (sums) {
      constexpr int kPart = kK / kSumParts;
      for (int r = 0; r < kRowSumsPerThread; ++r) {
        const int row = kHost ? r : tid % kM, part = kHost ? 0 : tid / kM;
        if (part < kSumParts) {
          const float* const p = sa + row * a_rs + part * kPart * a_ks;
          ZS_UNROLL
          for (int kk = 0; kk < kPart; ++kk) rsum[r] += p[kk * a_ks];
        }
      }
    }
  }

  // The team's Σ of every thread's `mine`, stored to *at: the threads' values meet in the first
  // stage of scratch (once every warp is past its last chunk), the first warp adds them in a
  // fixed order. A float's square is exact in double, so only the order of the sums rounds.
  template <class Member>
  KOKKOS_INLINE_FUNCTION static void store_squares(const Member& team, float* scratch, double* at, double mine,
                                                   int tid) {
    double* const each = reinterpret_cast<double*>(scratch);
    team.team_barrier();
    each[tid] = mine;
    team.team_barrier();
    if (team.team_rank() == 0) {
      double total = 0.0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, kThreads), [&](const int t, double& acc) { acc += each[t]; }, total);
      Kokkos::single(Kokkos::PerThread(team), [&]() { *at = total; });
    }
  }

  // ProductJob::group_sums of this tile: each product element times its mask value meets in
  // scratch (the stages are free once every warp is past its last chunk), then a thread a
  // (group, column) adds its group's rows in row order. On CUDA the masks are read again here,
  // from L2 where the epilogue just read them, rather than kept in registers across the stores.
  template <class Member>
  KOKKOS_INLINE_FUNCTION static void sum_groups(const Member& team, float* scratch, const ProductJob& job,
                                                const Acc& acc, int m0, int n0, int tid) {
    constexpr int ld = kN + 1;
    static_assert(kM * ld <= kStages * kStageFloats, "a tile's products fit in the stages");
    team.team_barrier();
    for_each_element(team, acc, m0, n0, [&](int row, int col, float v) {
      const bool in = row < job.m && col < job.n;
      scratch[(row - m0) * ld + (col - n0)] = in ? v * Tile::load_shared(job.mask + row * job.mask_ld + col) : 0.f;
    });
    team.team_barrier();
    const int g = job.group, groups = kM / g;
    for (int q = tid; q < groups * kN; q += kThreads) {
      const int s = q / kN, c = q % kN, row0 = m0 + s * g, col = n0 + c;
      if (row0 >= job.m || col >= job.n) continue;
      float sum = 0.f;
      for (int r = 0; r < g; ++r) sum += scratch[(s * g + r) * ld + c];
      const std::int64_t sample = row0 / g;
      const float x = job.scale[sample * job.scale_ld + col];
      job.group_sums[sample * job.group_sums_ld + col] = job.group_relu && x <= 0.f ? 0.f : sum;
    }
  }

  // Accumulator elements a thread holds.
  static constexpr int kMine = kSlots * kTm * kTn * kAccFloats;

  // f(row, col, v) for every accumulator element this thread holds, in the same order each call.
  template <class Member, class F>
  KOKKOS_FORCEINLINE_FUNCTION static void for_each_element(const Member& team, const Acc& acc, int m0, int n0,
                                                           const F& f) {
    ZS_UNROLL
    for (int slot = 0; slot < kSlots; ++slot) {
      const int w = (kHost ? 0 : team.team_rank()) * kSlots + slot;
      const int wm = m0 + (w / kWarpsN) * kWarpM, wn = n0 + (w % kWarpsN) * kWarpN;
      ZS_UNROLL
      for (int i = 0; i < kTm; ++i)
        ZS_UNROLL
        for (int j = 0; j < kTn; ++j)
          acc[slot][i][j].for_each(
              [&](int m, int n, float v) { f(wm + Tile::kM * i + m, wn + Tile::kN * j + n, v); });
    }
  }

  // Every bias and mask value first, then the stores: a load after a store through a pointer
  // the compiler cannot tell apart from its own waits for it, so loads between the stores would
  // cost a memory latency each, one after another.
  // Returns Σ v² of what this thread stored when the job counts squares, else 0.
  template <class Member>
  KOKKOS_INLINE_FUNCTION static double epilogue(const Member& team, const ProductJob& job, const Acc& acc, int m0,
                                                int n0) {
    float add[kMine], keep[kMine], mul[kMine];
    const bool count = job.squares != nullptr;
    double squares = 0.0;
    int e = 0;
    for_each_element(team, acc, m0, n0, [&](int row, int col, float) {
      const bool in = row < job.m && col < job.n;
      add[e] = in && job.bias ? job.bias[col] : 0.f;
      keep[e] = in && job.mask ? Tile::load_shared(job.mask + row * job.mask_ld + col) : 1.f;
      mul[e] = in && job.scale ? job.scale[row / job.group * job.scale_ld + col] : 1.f;
      ++e;
    });
    e = 0;
    for_each_element(team, acc, m0, n0, [&](int row, int col, float v) {
      const int at = e++;
      if (row >= job.m || col >= job.n) return;
      if (job.bias) v += add[at];
      if (job.relu && v < 0.f) v = 0.f;
      if (job.scale) v *= mul[at];
      if (keep[at] <= 0.f) v = 0.f;  // a NaN activation keeps its gradient
      job.out[row * job.out_ld + col] = v;
      if (count) squares += static_cast<double>(v) * v;
    });
    return squares;
  }
};

}  // namespace zs::kernels
