// The elementwise and column-wise pieces around batched dense layers (network_plan.hpp): bias +
// ReLU over many output matrices in one launch, and the bias gradients (column sums) of many
// gradient matrices in one launch, optionally summing partial gradients and applying the ReLU
// mask on the way. One launch instead of one per matrix is what takes nodes out of the graph.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/after_prior_grids.hpp"
#include "backends/backend.hpp"
#include "core/error.hpp"
#include "backends/host_copy.hpp"
#include "kernels/last_team.hpp"

namespace zs::kernels {

// The most columns a lane of BiasActBatch loads before it stores (BiasActLaunch's default).
inline constexpr int kBiasColsInFlight = 8;

// y [rows, cols] += b, then ReLU when relu != 0. Every entry of a batch has the same rows.
struct BiasActEntry {
  float* y = nullptr;
  const float* b = nullptr;
  int cols = 0;
  int relu = 0;
};

// A team per (entry, block of rows), a warp per row with its lanes along the columns. (Nsight:
// Kokkos' 3-D MDRange spent its time on index arithmetic, 75 % of the SMs' issue slots for 18 %
// of the memory bandwidth.)
template <class Exec>
struct BiasActBatch {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const BiasActEntry*, typename Exec::memory_space> entries;
  int rows = 0, rows_per_team = 1, blocks = 1;  // blocks of rows per entry
  int in_flight = kBiasColsInFlight;            // 1 .. kBiasColsInFlight

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    const int e = team.league_rank() / blocks, r0 = (team.league_rank() % blocks) * rows_per_team;
    const int r1 = r0 + rows_per_team < rows ? r0 + rows_per_team : rows;
    const BiasActEntry x = entries(e);
    const int lanes = x.cols < 32 ? x.cols : 32;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r0, r1), [&](const int r) {
      float* const y = x.y + static_cast<std::size_t>(r) * x.cols;
      if (host) {  // the one thread: a plain (vectorisable) loop along the row
        for (int c = 0; c < x.cols; ++c) {
          const float v = y[c] + x.b[c];
          y[c] = (x.relu && v < 0.f) ? 0.f : v;
        }
        return;
      }
      // Lane v takes columns v, v + 32, …, loading in_flight of them before it stores any: y may
      // alias the bias for all the compiler knows, so one column at a time waited out a memory
      // latency per column (8 in a row of 256).
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, lanes), [&](const int v) {
        for (int c0 = v; c0 < x.cols; c0 += lanes * in_flight) {
          float o[kBiasColsInFlight] = {};
          ZS_UNROLL
          for (int u = 0; u < kBiasColsInFlight; ++u) {
            const int c = c0 + u * lanes;
            if (u < in_flight && c < x.cols) o[u] = y[c] + x.b[c];
          }
          ZS_UNROLL
          for (int u = 0; u < kBiasColsInFlight; ++u) {
            const int c = c0 + u * lanes;
            // NaN stays NaN: the guard must see it in the loss.
            if (u < in_flight && c < x.cols) y[c] = (x.relu && o[u] < 0.f) ? 0.f : o[u];
          }
        }
      });
    });
  }
};

// A prepared launch of BiasActBatch: its table goes to the device once, at construction.
template <class Exec>
class BiasActLaunch {
 public:
  BiasActLaunch() = default;
  // cols_in_flight: columns a lane loads before it stores (1 is the old walk, kept for the benchmark).
  BiasActLaunch(const std::vector<BiasActEntry>& entries, int rows, int cols_in_flight = kBiasColsInFlight)
      : rows_(rows), in_flight_(cols_in_flight) {
    require(!entries.empty() && rows >= 1, "BiasActLaunch: ", entries.size(), " entries of ", rows,
            " rows; expected at least one entry of at least one row");
    require(cols_in_flight >= 1 && cols_in_flight <= kBiasColsInFlight, "BiasActLaunch: cols_in_flight = ",
            cols_in_flight, "; expected 1 to ", kBiasColsInFlight);
    for (std::size_t i = 0; i < entries.size(); ++i)
      require(entries[i].y && entries[i].b && entries[i].cols >= 1, "BiasActLaunch: entry ", i,
              " has a null matrix or bias, or ", entries[i].cols, " columns; expected both and >= 1 column");
    table_ = device_table<typename Exec::memory_space>("zs::bias_act_batch", entries);
  }
  void operator()(const Exec& exec) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    // Device: a warp per row, up to 8 a team, fewer when rows are few, so that there are still
    // about kTeams teams to spread over the SMs (B = 256: 768 trunk rows in 96 teams of 8 ran
    // 2x slower than in teams of 1). Host: one thread takes 32 rows, a row's columns in a plain
    // (vectorisable) loop.
    constexpr int kTeams = 512;
    const int total_rows = static_cast<int>(table_.extent(0)) * rows_;
    int per_team = host ? 32 : 8;
    while (!host && per_team > 1 && total_rows / per_team < kTeams) per_team /= 2;
    const int blocks = (rows_ + per_team - 1) / per_team;
    Kokkos::parallel_for("zs::bias_act_batch",
                         Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(table_.extent(0)) * blocks, host ? 1 : per_team,
                                                  host ? 1 : 32),
                         AfterPriorGrids<BiasActBatch<Exec>>({table_, rows_, per_team, blocks, in_flight_}));
  }

 private:
  Kokkos::View<BiasActEntry*, typename Exec::memory_space> table_;
  int rows_ = 0, in_flight_ = kBiasColsInFlight;
};

// dst[0, count) ← src[0, count) for many buffers in one launch: the output layers' weights into
// the padded copies their products read (ForwardShape::padded_outputs), once a step.
struct CopyEntry {
  const float* src = nullptr;
  float* dst = nullptr;
  int count = 0;
};

// Floats a team of CopyBatch copies: a few per thread of a 256-thread team.
inline constexpr int kCopyChunk = 1024;

// One team's share of a CopyBatch: entry `entry` from float `first` on.
struct CopyChunk {
  int entry = 0, first = 0;
};

// A team per chunk of kCopyChunk floats of an entry (a table made once, so an entry of a few
// floats beside one of many leaves no team idle), its threads along the chunk: 32-bit indices
// only (Nsight, H100: a thread a float of one flat 64-bit range, its entry found by a 64-bit
// division, took 8 µs for 8 MB of traffic).
template <class Exec>
struct CopyBatch {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const CopyEntry*, typename Exec::memory_space> entries;
  Kokkos::View<const CopyChunk*, typename Exec::memory_space> chunks;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const CopyChunk ch = chunks(team.league_rank());
    const CopyEntry e = entries(ch.entry);
    const int end = ch.first + kCopyChunk < e.count ? ch.first + kCopyChunk : e.count;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ch.first, end), [&](const int i) { e.dst[i] = e.src[i]; });
  }
};

template <class Exec>
class CopyLaunch {
 public:
  CopyLaunch() = default;
  explicit CopyLaunch(const std::vector<CopyEntry>& entries) {
    require(!entries.empty(), "CopyLaunch: 0 entries; expected at least one");
    std::vector<CopyChunk> chunks;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      require(entries[i].src && entries[i].dst && entries[i].count >= 1, "CopyLaunch: entry ", i,
              " has a null source or destination, or ", entries[i].count, " floats; expected both and >= 1 float");
      for (int f = 0; f < entries[i].count; f += kCopyChunk) chunks.push_back({static_cast<int>(i), f});
    }
    table_ = device_table<typename Exec::memory_space>("zs::copy_batch", entries);
    chunks_ = device_table<typename Exec::memory_space>("zs::copy_batch_chunks", chunks);
  }
  void operator()(const Exec& exec) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    Kokkos::parallel_for("zs::copy_batch",
                         Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(chunks_.extent(0)), host ? 1 : 256),
                         AfterPriorGrids<CopyBatch<Exec>>({table_, chunks_}));
  }

 private:
  Kokkos::View<CopyEntry*, typename Exec::memory_space> table_;
  Kokkos::View<CopyChunk*, typename Exec::memory_space> chunks_;
};

// db[c] = Σ_r g[r, c] where g = Σ_p parts[p][r, c] (parts `part_stride` floats apart), zeroed
// where act[r, c] <= 0 when act is given (the ReLU mask; a NaN activation keeps its gradient),
// and written to dz when dz is given (dz may be parts[0]: each element is read before written).
// Rows of parts and dz are ld floats apart, those of act act_ld (0: cols), so an entry may be a
// block of columns of a wider matrix (BackwardShape::stacked_heads).
struct ColumnSumEntry {
  const float* parts = nullptr;
  std::int64_t part_stride = 0;
  int n_parts = 1;
  const float* act = nullptr;
  float* dz = nullptr;
  float* db = nullptr;
  int cols = 0;
  int ld = 0, act_ld = 0;
};

// Columns per team: a warp's worth, so the lanes read consecutive floats of a row.
inline constexpr int kColumnChunk = 32;

struct ColumnChunk {
  int entry = 0, col0 = 0;
};

// A team per (chunk of columns, block of rows); enough teams to fill the GPU at any batch size.
// Each team adds its rows into a partial sum per column; the team that finishes a chunk last
// adds the chunk's partials in block order. Sums come out in the same order every run, so the
// result is deterministic without a second launch.
template <class Exec>
struct ColumnSumBatch {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const ColumnSumEntry*, Mem> entries;
  Kokkos::View<const ColumnChunk*, Mem> chunks;
  Kokkos::View<float*, Mem> partials;  // [chunk][block][kColumnChunk]
  Kokkos::View<int*, Mem> done;        // per chunk: blocks finished; the last resets it to 0
  int rows = 0, block_rows = 0, blocks = 1;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int chunk = team.league_rank() / blocks, block = team.league_rank() % blocks;
    const ColumnChunk ch = chunks(chunk);
    const ColumnSumEntry e = entries(ch.entry);
    const int width = e.cols - ch.col0 < kColumnChunk ? e.cols - ch.col0 : kColumnChunk;
    const int r0 = block * block_rows, r1 = r0 + block_rows < rows ? r0 + block_rows : rows;
    const int nt = team.team_size();
    float* const part = static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * nt * kColumnChunk));
    // Thread t takes rows r0 + t, r0 + t + T, …; lanes take consecutive columns of a row.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nt), [&](const int t) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, width), [&](const int j) {
        const int c = ch.col0 + j;
        float s = 0.f;
        for (int r = r0 + t; r < r1; r += nt) {
          const std::size_t i = static_cast<std::size_t>(r) * e.ld + c;
          float g = e.parts[i];
          for (int p = 1; p < e.n_parts; ++p) g += e.parts[p * e.part_stride + i];
          if (e.act != nullptr && e.act[static_cast<std::size_t>(r) * e.act_ld + c] <= 0.f) g = 0.f;
          if (e.dz != nullptr) e.dz[i] = g;
          s += g;
        }
        part[t * kColumnChunk + j] = s;
      });
    });
    team.team_barrier();
    float* const mine = blocks == 1 ? nullptr : partials.data() + (static_cast<std::size_t>(chunk) * blocks + block) * kColumnChunk;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, width), [&](const int j) {
      float s = 0.f;
      for (int t = 0; t < nt; ++t) s += part[t * kColumnChunk + j];
      if (blocks == 1)
        e.db[ch.col0 + j] = s;
      else
        mine[j] = s;
    });
    if (blocks == 1 || !finished_last(team, &done(chunk), blocks)) return;
    const volatile float* const all = partials.data() + static_cast<std::size_t>(chunk) * blocks * kColumnChunk;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, width), [&](const int j) {
      // Loads in groups, adds in block order: volatile loads are not reordered, so one add per
      // load would wait out a full L2 round trip per block.
      constexpr int kGroup = 8;
      float s = 0.f;
      for (int b0 = 0; b0 < blocks; b0 += kGroup) {
        float v[kGroup];
        for (int u = 0; u < kGroup; ++u) v[u] = b0 + u < blocks ? all[(b0 + u) * kColumnChunk + j] : 0.f;
        for (int u = 0; u < kGroup && b0 + u < blocks; ++u) s += v[u];
      }
      e.db[ch.col0 + j] = s;
    });
    Kokkos::single(Kokkos::PerTeam(team), [&]() { done(chunk) = 0; });
  }
};

template <class Exec>
class ColumnSumLaunch {
 public:
  ColumnSumLaunch() = default;
  // block_rows: rows per team; 0 picks one block on the host (its few threads are already busy
  // with the chunks) and, on a device, blocks of at least kMinBlockRows rows, at most
  // kMaxBlocks of them: each warp then walks only a few rows (a long walk is a chain of memory
  // latencies, Nsight showed 12-25 µs for 256 rows in 128-row blocks) and the last team adds
  // at most kMaxBlocks partials.
  ColumnSumLaunch(const std::vector<ColumnSumEntry>& entries, int rows, int block_rows = 0) : rows_(rows) {
    require(!entries.empty() && rows >= 1, "ColumnSumLaunch: ", entries.size(), " entries of ", rows,
            " rows; expected at least one entry of at least one row");
    require(block_rows >= 0, "ColumnSumLaunch: block_rows = ", block_rows, "; expected >= 0 (0: automatic)");
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    constexpr int kMinBlockRows = 16, kMaxBlocks = 32;
    const int device_rows = std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
    block_rows_ = block_rows > 0 ? block_rows : host ? rows : device_rows;
    blocks_ = (rows + block_rows_ - 1) / block_rows_;
    std::vector<ColumnChunk> chunks;
    std::vector<ColumnSumEntry> table = entries;
    for (std::size_t i = 0; i < table.size(); ++i) {
      ColumnSumEntry& e = table[i];
      require(e.parts && e.db && e.cols >= 1 && e.n_parts >= 1, "ColumnSumLaunch: entry ", i,
              " has a null gradient or output, ", e.cols, " columns or ", e.n_parts,
              " parts; expected both pointers and >= 1 of each");
      require((e.ld == 0 || e.ld >= e.cols) && (e.act_ld == 0 || e.act_ld >= e.cols), "ColumnSumLaunch: entry ", i,
              " has rows ", e.ld, " and activation rows ", e.act_ld, " floats apart for ", e.cols,
              " columns; expected 0 (the columns) or at least the columns");
      e.ld = e.ld > 0 ? e.ld : e.cols;
      e.act_ld = e.act_ld > 0 ? e.act_ld : e.cols;
      for (int c = 0; c < e.cols; c += kColumnChunk) chunks.push_back({static_cast<int>(i), c});
    }
    table_ = device_table<typename Exec::memory_space>("zs::column_sum_batch", table);
    chunks_ = device_table<typename Exec::memory_space>("zs::column_sum_chunks", chunks);
    partials_ = Kokkos::View<float*, typename Exec::memory_space>(std::string("zs::column_sum_partials"),
                                                                 blocks_ > 1 ? chunks.size() * blocks_ * kColumnChunk : 1);
    done_ = Kokkos::View<int*, typename Exec::memory_space>(std::string("zs::column_sum_done"), chunks.size());
  }
  void operator()(const Exec& exec) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    // Device: 8 warps per team, each warp down an eighth of the block's rows.
    const int team = host ? 1 : 8, vector = host ? 1 : kColumnChunk;
    Kokkos::TeamPolicy<Exec> policy(exec, static_cast<int>(chunks_.extent(0)) * blocks_, team, vector);
    policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(float) * team * kColumnChunk));
    Kokkos::parallel_for("zs::column_sum_batch", policy,
                         AfterPriorGrids<ColumnSumBatch<Exec>>({table_, chunks_, partials_, done_, rows_, block_rows_, blocks_}));
  }

 private:
  Kokkos::View<ColumnSumEntry*, typename Exec::memory_space> table_;
  Kokkos::View<ColumnChunk*, typename Exec::memory_space> chunks_;
  Kokkos::View<float*, typename Exec::memory_space> partials_;
  Kokkos::View<int*, typename Exec::memory_space> done_;
  int rows_ = 0, block_rows_ = 0, blocks_ = 1;
};

}  // namespace zs::kernels
