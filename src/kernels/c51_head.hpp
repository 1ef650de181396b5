// The BDQ-C51 output head: dueling combine on logits, per atom and per branch
// (q_k[a][j] = v[j] + o_k[a][j] − mean_a o_k[a][j]), then log-softmax over atoms.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/after_prior_grids.hpp"
#include "backends/backend.hpp"
#include "core/error.hpp"
#include "backends/host_copy.hpp"
#include "kernels/branch_table.hpp"

namespace zs::kernels {

// One block of rows of the head: rows [row0, row0 + rows) of a head set's buffers, which hold
// total_rows rows. The output layers' biases are added as each logit is formed, so no separate
// pass over the outputs is needed; null biases add nothing.
struct DuelingEntry {
  const float* value = nullptr;       // [total_rows, atoms], before the bias
  const float* branch_out = nullptr;  // flat, BranchTable layout for total_rows, before the biases
  float* logp = nullptr;              // [total_rows, A, atoms]
  int total_rows = 0, row0 = 0, rows = 0;
  const float* value_bias = nullptr;  // [atoms]
  int branch_bias = -1;               // first of this entry's K pointers in the bias table; −1: none
  // Rows stored wider than the outputs (a product then stores whole 16-byte vectors): the value
  // stream's rows value_ld floats apart (0: atoms), branch k's n_k·atoms rounded up to a multiple
  // of row_pad (BranchTable::row_floats; its block starts at total_rows times the rows before).
  int value_ld = 0, row_pad = 1;
  KOKKOS_INLINE_FUNCTION int value_row(int atoms) const { return value_ld > 0 ? value_ld : atoms; }
};

// Where a dueling kernel finds its entries: a device table prepared once (the step's passes,
// with their output biases) …
template <class MS>
struct DuelingTable {
  Kokkos::View<const DuelingEntry*, MS> entries;
  Kokkos::View<const std::uintptr_t*, MS> biases;  // per entry with branch_bias >= 0, K pointers
  KOKKOS_INLINE_FUNCTION int count() const { return static_cast<int>(entries.extent(0)); }
  KOKKOS_INLINE_FUNCTION DuelingEntry operator()(int e) const { return entries(e); }
  KOKKOS_INLINE_FUNCTION const float* branch_bias(const DuelingEntry& x, int k) const {
    return x.branch_bias < 0 ? nullptr : reinterpret_cast<const float*>(biases(x.branch_bias + k));
  }
};

// … or one entry by value, its outputs already biased (Network::forward): nothing to prepare, so
// a captured acting step allocates and copies nothing.
struct DuelingOne {
  DuelingEntry entry;
  KOKKOS_INLINE_FUNCTION int count() const { return 1; }
  KOKKOS_INLINE_FUNCTION DuelingEntry operator()(int) const { return entry; }
  KOKKOS_INLINE_FUNCTION const float* branch_bias(const DuelingEntry&, int) const { return nullptr; }
};

// Log-softmax over atoms of one (row, action) on a team thread's vector lanes (one lane: a serial
// loop; on CUDA the max and the sum are shuffles, no team barrier). logit(j) forms logit j; l
// points at atoms floats that hold the logits in between, out at where the log-probabilities go
// (l itself, in place, or elsewhere). Each lane reads back only the atoms it wrote.
template <class Member, class Logit>
KOKKOS_INLINE_FUNCTION void log_softmax_lanes(const Member& team, int atoms, const Logit& logit, float* l,
                                              float* out) {
  float mx = 0.f;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, atoms),
      [&](const int j, float& m) {
        const float y = logit(j);
        l[j] = y;
        if (y > m) m = y;  // a NaN logit never wins here; it poisons the sum below instead
      },
      Kokkos::Max<float>(mx));
  float s = 0.f;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, atoms), [&](const int j, float& acc) { acc += ::expf(l[j] - mx); }, s);
  const float lse = mx + ::logf(s);
  Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) { out[j] = l[j] - lse; });
}

// Scratch floats of one row of a tile: every action's logits, the value stream, each branch's mean.
KOKKOS_INLINE_FUNCTION std::size_t dueling_row_floats(const BranchTable& t, int atoms) {
  return static_cast<std::size_t>(t.actions + 1 + t.branches) * atoms;
}

// The head of a tile of consecutive rows of one entry in team scratch: coalesced loads of each
// branch's outputs (a tile's rows of branch k are one contiguous run), each branch's mean per
// atom by a lane per (row, branch, atom), the log-softmax by a team thread per (row, action),
// its vector lanes over atoms, then a coalesced store. Nsight on the general path below (a warp
// per (row, branch)): ~480 instructions per action, mostly shuffles and idle lanes (51 atoms on
// 32 lanes); instruction-bound at B = 4096. dueling_shape says which tiles win where.
template <class Exec, class Entries>
struct DuelingTiles {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Entries entries;
  BranchTable table;
  int atoms = 0, tile_rows = 1, tiles_per_entry = 1;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    run(team, team.league_rank(),
        static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * tile_rows * dueling_row_floats(table, atoms))));
  }

  // Tile `tile` (entry tile / tiles_per_entry) with `logit` as its scratch (tile_rows rows of
  // dueling_row_floats): the fused step runs tiles this way, inside its own launch.
  KOKKOS_INLINE_FUNCTION void run(const Member& team, int tile, float* const logit) const {
    const int A = table.actions, K = table.branches;
    const int e = tile / tiles_per_entry, first = (tile % tiles_per_entry) * tile_rows;
    const DuelingEntry x = entries(e);
    if (first >= x.rows) return;  // the whole team leaves: no barrier is left waiting
    const int rows = x.rows - first < tile_rows ? x.rows - first : tile_rows;
    const int r0 = x.row0 + first, R = x.total_rows;
    float* const value = logit + static_cast<std::size_t>(tile_rows) * A * atoms;
    float* const mean = value + static_cast<std::size_t>(tile_rows) * atoms;
    for (int k = 0; k < K; ++k) {
      const int c0 = table.cum(k), w = table.size(k) * atoms, ld = table.row_floats(atoms, k, x.row_pad);
      const float* const src =
          x.branch_out + table.padded_block(R, atoms, k, x.row_pad) + static_cast<std::size_t>(r0) * ld;
      const float* const bias = entries.branch_bias(x, k);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows * w), [&](const int f) {
        const int u = f / w, t = f % w;
        const float o = src[static_cast<std::size_t>(u) * ld + t];
        logit[(static_cast<std::size_t>(u) * A + c0) * atoms + t] = bias ? o + bias[t] : o;  // as the GEMM's bias pass
      });
    }
    const int vld = x.value_row(atoms);
    const float* const vsrc = x.value + static_cast<std::size_t>(r0) * vld;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows * atoms), [&](const int f) {
      const float v = vsrc[static_cast<std::size_t>(f / atoms) * vld + f % atoms];
      value[f] = x.value_bias ? v + x.value_bias[f % atoms] : v;
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows * K * atoms), [&](const int f) {
      const int u = f / (K * atoms), k = f / atoms % K, j = f % atoms, n = table.size(k);
      const float* const o = logit + (static_cast<std::size_t>(u) * A + table.cum(k)) * atoms + j;
      float m = 0.f;
      for (int b = 0; b < n; ++b) m += o[static_cast<std::size_t>(b) * atoms];
      mean[f] = m / static_cast<float>(n);
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * A), [&](const int f) {
      const int u = f / A, k = table.branch_of(f % A);
      float* const l = logit + static_cast<std::size_t>(f) * atoms;
      const float* const v = value + static_cast<std::size_t>(u) * atoms;
      const float* const m = mean + (static_cast<std::size_t>(u) * K + k) * atoms;
      log_softmax_lanes(team, atoms, [&](const int j) { return v[j] + l[j] - m[j]; }, l, l);
    });
    team.team_barrier();
    float* const dst = x.logp + static_cast<std::size_t>(r0) * A * atoms;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, rows * A * atoms), [&](const int f) { dst[f] = logit[f]; });
  }
};

// The general path, on the host and for rows too wide for a tile in scratch: a team thread per
// (entry, row, branch), its vector lanes over atoms. The value stream and the branch's mean are
// formed once in scratch, then each action's log-softmax, its max and sum as lane reductions.
template <class Exec, class Entries>
struct DuelingRows {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Entries entries;
  BranchTable table;
  int atoms = 0, max_rows = 0, units_per_team = 1;

  // Team scratch per unit: the value logits, the branch's action mean, one action's logits.
  KOKKOS_INLINE_FUNCTION static std::size_t unit_floats(int atoms) { return static_cast<std::size_t>(3) * atoms; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int A = table.actions, K = table.branches, per_entry = max_rows * K;
    float* const scratch = static_cast<float*>(
        team.team_scratch(0).get_shmem(sizeof(float) * units_per_team * unit_floats(atoms)));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, units_per_team), [&](const int t) {
      const int unit = team.league_rank() * units_per_team + t;
      const int e = unit / per_entry, local = unit % per_entry, row = local / K, k = local % K;
      if (e >= entries.count()) return;
      const DuelingEntry x = entries(e);
      if (row >= x.rows) return;
      const int r = x.row0 + row, R = x.total_rows;
      const int c0 = table.cum(k), n = table.size(k);
      const float* const bb = entries.branch_bias(x, k);
      const float* const ob = x.branch_out + table.padded_block(R, atoms, k, x.row_pad) +
                              static_cast<std::size_t>(r) * table.row_floats(atoms, k, x.row_pad);
      auto out_k = [&](int b, int j) {
        const float o = ob[b * atoms + j];
        return bb ? o + bb[b * atoms + j] : o;
      };
      float* const value = scratch + static_cast<std::size_t>(t) * unit_floats(atoms);
      float* const mean = value + atoms;
      float* const logits = mean + atoms;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) {
        float m = 0.f;
        for (int b = 0; b < n; ++b) m += out_k(b, j);
        const float v = x.value[static_cast<std::size_t>(r) * x.value_row(atoms) + j];
        value[j] = x.value_bias ? v + x.value_bias[j] : v;
        mean[j] = m / static_cast<float>(n);
      });
      for (int a = 0; a < n; ++a) {
        float* const out = x.logp + (static_cast<std::size_t>(r) * A + c0 + a) * atoms;
        log_softmax_lanes(team, atoms, [&](const int j) { return value[j] + out_k(a, j) - mean[j]; }, logits, out);
      }
    });
  }
};

// Rows per tile: at most what keeps a team's scratch within kDuelingTileBytes (0 when one row
// does not fit: the general path). Kokkos adds its own team scratch to ours within the 48 KiB a
// block gets without opting in (H200: 48 bytes, so 49,152 of ours failed to launch).
inline constexpr std::size_t kDuelingTileBytes = 46 * 1024;

inline int dueling_tile_fit(const BranchTable& t, int atoms) {
  const std::size_t fit = kDuelingTileBytes / (sizeof(float) * dueling_row_floats(t, atoms));
  return fit < 1024 ? static_cast<int>(fit) : 1024;
}

// A tile's shape: rows per tile (0: the general path) and vector lanes per (row, action).
struct DuelingShape {
  int tile_rows = 0, lanes = 1;
};

// The shape when the launch does not say, from BM_Dueling on the H200 (three passes of B rows at
// the reference head, graph replay, µs):
//
//   B per pass                 8      64     256    1024   4096
//   general path            11.5    11.5    13.3    26.7  102.0
//   1 row, 1 lane           15.5    15.8    16.3    22.2   80.7
//   1 row, 32 lanes          5.8     6.7    12.7    41.8  177.6
//   2 rows, 8 lanes          8.0     8.3     9.2    22.4   86.0
//   2 rows, 4 lanes         11.0    11.3    11.5    19.1   67.8
//
// Few rows want the most lanes (each row's serial chain is the time); many rows want few (the
// lanes' shuffles are the work). On the host (2 cores) the general path won at 256 and 4096.
inline constexpr int kDuelingFewRows = 256, kDuelingSomeRows = 1536;

template <class Exec>
DuelingShape dueling_shape(const BranchTable& t, int atoms, long long rows) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int fit = dueling_tile_fit(t, atoms);
  if (host || fit < 1) return {0, 1};
  if (rows <= kDuelingFewRows) return {1, 32};
  return {fit >= 2 ? 2 : 1, rows <= kDuelingSomeRows ? 8 : 4};
}

// Launches the head over every entry of `entries` (at most max_rows rows each), in tiles of the
// given shape or on the general path.
template <class Exec, class Entries>
void launch_dueling(const Exec& exec, const Entries& entries, int count, int max_rows, const BranchTable& table,
                    int atoms, DuelingShape shape) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  if (shape.tile_rows > 0) {
    using F = DuelingTiles<Exec, Entries>;
    const int tiles = (max_rows + shape.tile_rows - 1) / shape.tile_rows, lanes = host ? 1 : shape.lanes;
    // A team thread per (row, action) for the log-softmax, in whole warps, at most 512 lanes;
    // more (row, action)s take turns.
    const int wanted = (shape.tile_rows * table.actions * lanes + 31) / 32 * 32;
    const int team = host ? 1 : (wanted < 512 ? wanted : 512) / lanes;
    Kokkos::TeamPolicy<Exec> policy(exec, count * tiles, team, lanes);
    policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(float) * shape.tile_rows * dueling_row_floats(table, atoms)));
    Kokkos::parallel_for("zs::dueling_tiles", policy,
                         AfterPriorGrids<F>(F{entries, table, atoms, shape.tile_rows, tiles}));
  } else {
    using F = DuelingRows<Exec, Entries>;
    // Up to 8 units a team on a device, within the tiles' scratch budget.
    const std::size_t fit = kDuelingTileBytes / (sizeof(float) * F::unit_floats(atoms));
    const int per_team = host ? 16 : fit >= 8 ? 8 : fit < 1 ? 1 : static_cast<int>(fit), vector = host ? 1 : 32;
    const int units = count * max_rows * table.branches;
    Kokkos::TeamPolicy<Exec> policy(exec, (units + per_team - 1) / per_team, host ? 1 : per_team, vector);
    policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(float) * per_team * F::unit_floats(atoms)));
    Kokkos::parallel_for("zs::dueling_rows", policy, AfterPriorGrids<F>(F{entries, table, atoms, max_rows, per_team}));
  }
}

// A prepared launch of the head over every entry; tables go to the device once, here.
template <class Exec>
class DuelingLaunch {
 public:
  DuelingLaunch() = default;
  // branch_biases: per entry with branch_bias >= 0, K pointers from that index on.
  // tile_rows: rows per tile, 1 to what fits in kDuelingTileBytes of scratch, or kRowsPath for
  // the general path; lanes: 1, 2, 4, 8, 16 or 32 per (row, action) (one on the host). 0: as
  // dueling_shape picks.
  static constexpr int kRowsPath = -1;
  DuelingLaunch(const std::vector<DuelingEntry>& entries, const std::vector<const float*>& branch_biases,
                const BranchTable& table, int atoms, int tile_rows = 0, int lanes = 0)
      : table_(table), atoms_(atoms) {
    require(!entries.empty() && atoms >= 1, "DuelingLaunch: ", entries.size(), " entries of ", atoms,
            " atoms; expected at least one entry and one atom");
    std::vector<std::uintptr_t> biases;
    for (const float* b : branch_biases) biases.push_back(reinterpret_cast<std::uintptr_t>(b));
    if (biases.empty()) biases.push_back(0);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const DuelingEntry& e = entries[i];
      require(e.value && e.branch_out && e.logp && e.rows >= 1 && e.row0 >= 0 && e.row0 + e.rows <= e.total_rows &&
                  e.branch_bias + table.branches <= static_cast<int>(branch_biases.size()),
              "DuelingLaunch: entry ", i, " covers rows ", e.row0, "..", e.row0 + e.rows, " of ", e.total_rows,
              " (bias index ", e.branch_bias, "); expected buffers, rows inside and K bias pointers");
      require((e.value_ld == 0 || e.value_ld >= atoms) && e.row_pad >= 1, "DuelingLaunch: entry ", i,
              " has value rows of ", e.value_ld, " floats and a row padding of ", e.row_pad,
              "; expected 0 or at least ", atoms, " and at least 1");
      if (e.rows > max_rows_) max_rows_ = e.rows;
    }
    const int fit = dueling_tile_fit(table, atoms);
    require(tile_rows == kRowsPath || (tile_rows >= 0 && tile_rows <= fit), "DuelingLaunch: tile_rows = ", tile_rows,
            "; expected 0 (automatic), ", kRowsPath, " (the general path) or 1 to ", fit, " (the rows of ",
            dueling_row_floats(table, atoms), " floats that fit in ", kDuelingTileBytes, " bytes of scratch)");
    require(lanes >= 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0, "DuelingLaunch: lanes = ", lanes,
            "; expected 0 (automatic) or a power of two up to 32");
    if (tile_rows == 0) {
      shape_ = dueling_shape<Exec>(table, atoms, static_cast<long long>(entries.size()) * max_rows_);
      if (lanes > 0 && shape_.tile_rows > 0) shape_.lanes = lanes;
    } else {
      shape_ = tile_rows == kRowsPath ? DuelingShape{0, 1} : DuelingShape{tile_rows, lanes > 0 ? lanes : 1};
    }
    table_dev_ = {device_table<typename Exec::memory_space>("zs::dueling::entries", entries),
                  device_table<typename Exec::memory_space>("zs::dueling::biases", biases)};
  }
  void operator()(const Exec& exec) const {
    launch_dueling(exec, table_dev_, static_cast<int>(table_dev_.entries.extent(0)), max_rows_, table_, atoms_, shape_);
  }
  // The shape it launches; tile_rows 0 on the general path.
  DuelingShape shape() const { return shape_; }

 private:
  DuelingTable<typename Exec::memory_space> table_dev_;
  BranchTable table_;
  int atoms_ = 0, max_rows_ = 0;
  DuelingShape shape_;
};

// The head of one set of activations whose outputs already hold their biases (Network::forward).
template <class Exec>
void dueling_log_softmax(const Exec& exec,
                         const Kokkos::View<const float**, Kokkos::LayoutRight, typename Exec::memory_space,
                                            Kokkos::MemoryUnmanaged>& value,
                         const Kokkos::View<const float*, typename Exec::memory_space, Kokkos::MemoryUnmanaged>& branch_out,
                         const Kokkos::View<float***, Kokkos::LayoutRight, typename Exec::memory_space>& logp,
                         const BranchTable& table) {
  const std::size_t rows = logp.extent(0), actions = logp.extent(1), atoms = logp.extent(2);
  require(value.extent(0) == rows && value.extent(1) == atoms, "dueling_log_softmax: value stream is [",
          value.extent(0), ", ", value.extent(1), "]; expected [", rows, ", ", atoms, "]");
  require(branch_out.extent(0) == rows * actions * atoms, "dueling_log_softmax: branch outputs hold ",
          branch_out.extent(0), " floats; expected rows·actions·atoms = ", rows * actions * atoms);
  require(static_cast<int>(actions) == table.actions, "dueling_log_softmax: ", actions,
          " actions in the output; the branch table has ", table.actions);
  if (rows == 0) return;
  DuelingEntry e;
  e.value = value.data();
  e.branch_out = branch_out.data();
  e.logp = logp.data();
  e.total_rows = e.rows = static_cast<int>(rows);
  launch_dueling(exec, DuelingOne{e}, 1, e.rows, table, static_cast<int>(atoms),
                 dueling_shape<Exec>(table, static_cast<int>(atoms), e.rows));
}

}  // namespace zs::kernels
