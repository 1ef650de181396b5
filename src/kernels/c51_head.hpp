// The BDQ-C51 output head: dueling combine on logits, per atom and per branch
// (q_k[a][j] = v[j] + o_k[a][j] − mean_a o_k[a][j]), then log-softmax over atoms.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "backends/host_copy.hpp"
#include "kernels/branch_table.hpp"

namespace zs::kernels {

// The log-softmax over atoms of one (row, action) on a team thread's vector lanes (a warp on
// CUDA: the max and the sum are shuffles, no team barrier). logit(j) gives the dueling logit;
// out(j) is where log p_j goes. The logits are stored first and become log-probabilities in
// place; each lane reads back only the atoms it wrote.
// tmp(j) holds the logits in between (team scratch, or out itself).
template <class Member, class Logit, class Tmp, class Out>
KOKKOS_INLINE_FUNCTION void log_softmax_atoms(const Member& team, int atoms, const Logit& logit, const Tmp& tmp,
                                              const Out& out) {
  float mx = 0.f;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, atoms),
      [&](const int j, float& m) {
        const float l = logit(j);
        tmp(j) = l;
        if (l > m) m = l;  // a NaN logit never wins here; it poisons the sum below instead
      },
      Kokkos::Max<float>(mx));
  float s = 0.f;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, atoms), [&](const int j, float& acc) { acc += ::expf(tmp(j) - mx); }, s);
  const float lse = mx + ::logf(s);
  Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) { out(j) = tmp(j) - lse; });
}

template <class Member, class Logit, class Out>
KOKKOS_INLINE_FUNCTION void log_softmax_atoms(const Member& team, int atoms, const Logit& logit, const Out& out) {
  log_softmax_atoms(team, atoms, logit, out, out);
}

template <class Exec>
struct DuelingLogSoftmax {
  using MS = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float**, Kokkos::LayoutRight, MS, Kokkos::MemoryUnmanaged> value;  // [R, atoms]
  Kokkos::View<const float*, MS, Kokkos::MemoryUnmanaged> branch_out;                  // flat, see BranchTable
  Kokkos::View<float***, Kokkos::LayoutRight, MS> logp;                                 // [R, A, atoms]
  BranchTable table;
  int pairs_per_team = 1;

  // A team thread per (row, action), its vector lanes over atoms.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int rows = static_cast<int>(logp.extent(0)), actions = static_cast<int>(logp.extent(1));
    const int atoms = static_cast<int>(logp.extent(2));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, pairs_per_team), [&](const int t) {
      const int pair = team.league_rank() * pairs_per_team + t;
      if (pair >= rows * actions) return;
      const int r = pair / actions, g = pair % actions;
      const int k = table.branch_of(g), a = g - table.cum(k), n = table.cum(k + 1) - table.cum(k);
      log_softmax_atoms(
          team, atoms,
          [&](const int j) {
            float mean = 0.f;
            for (int b = 0; b < n; ++b) mean += branch_out(table.index(rows, atoms, k, r, b, j));
            return value(r, j) + branch_out(table.index(rows, atoms, k, r, a, j)) - mean / static_cast<float>(n);
          },
          [&](const int j) -> float& { return logp(r, g, j); });
    });
  }
};

// One block of rows for DuelingBatch: rows [row0, row0 + rows) of a head set's buffers, which
// hold total_rows rows. The output layers' biases are added here, as each logit is formed, so
// no separate pass over the outputs is needed; null biases add nothing.
struct DuelingEntry {
  const float* value = nullptr;       // [total_rows, atoms], before the bias
  const float* branch_out = nullptr;  // flat, BranchTable layout for total_rows, before the biases
  float* logp = nullptr;              // [total_rows, A, atoms]
  int total_rows = 0, row0 = 0, rows = 0;
  const float* value_bias = nullptr;  // [atoms]
  int branch_bias = -1;               // first of this entry's K pointers in the bias table; −1: none
};

template <class Exec>
struct DuelingBatch {
  using MS = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const DuelingEntry*, MS> entries;
  Kokkos::View<const std::uintptr_t*, MS> branch_biases;  // per entry, K pointers: branch k's [n_k·atoms]
  BranchTable table;
  int atoms = 0, max_rows = 0, units_per_team = 1;
  // Team threads per (entry, row, branch): part p of `split` does actions p, p + split, …
  int split = 1;

  // Team scratch per unit: the value logits, the branch's action mean, one action's logits.
  KOKKOS_INLINE_FUNCTION static std::size_t scratch_floats(int units, int atoms) { return static_cast<std::size_t>(units) * 3 * atoms; }

  // A team thread per (entry, row, branch) — or per part of one, see split — its vector lanes
  // over atoms: the value stream and the dueling mean are formed once per thread in scratch,
  // then each of its actions' log-softmax reads them back (Nsight: a thread per action
  // re-reading every action for its mean, per atom, was the step's slowest kernel at B = 4096).
  // Each lane reads back only the atoms it wrote. Every part forms the mean in the same order,
  // so a split changes no bit.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int A = table.actions, K = table.branches, per_entry = max_rows * K;
    float* const scratch =
        static_cast<float*>(team.team_scratch(0).get_shmem(sizeof(float) * scratch_floats(units_per_team, atoms)));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, units_per_team), [&](const int t) {
      const int thread = team.league_rank() * units_per_team + t, unit = thread / split, part = thread % split;
      const int e = unit / per_entry, local = unit % per_entry, row = local / K, k = local % K;
      if (e >= static_cast<int>(entries.extent(0))) return;
      const DuelingEntry x = entries(e);
      if (row >= x.rows) return;
      const int r = x.row0 + row, R = x.total_rows;
      const int c0 = table.cum(k), n = table.cum(k + 1) - c0;
      if (part >= n) return;
      const float* const bb =
          x.branch_bias < 0 ? nullptr : reinterpret_cast<const float*>(branch_biases(x.branch_bias + k));
      // This (row, branch)'s n·atoms outputs are contiguous (BranchTable's layout).
      const float* const ob = x.branch_out + table.index(R, atoms, k, r, 0, 0);
      // Bias first, as the GEMM's own bias pass would have: the same float operations.
      auto out_k = [&](int b, int j) {
        const float o = ob[b * atoms + j];
        return bb ? o + bb[b * atoms + j] : o;
      };
      float* const value = scratch + static_cast<std::size_t>(t) * 3 * atoms;
      float* const mean = value + atoms;
      float* const logits = mean + atoms;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) {
        float m = 0.f;
        for (int b = 0; b < n; ++b) m += out_k(b, j);
        const float v = x.value[static_cast<std::size_t>(r) * atoms + j];
        value[j] = x.value_bias ? v + x.value_bias[j] : v;
        mean[j] = m / static_cast<float>(n);
      });
      for (int a = part; a < n; a += split) {
        float* const out = x.logp + (static_cast<std::size_t>(r) * A + c0 + a) * atoms;
        log_softmax_atoms(
            team, atoms, [&](const int j) { return value[j] + out_k(a, j) - mean[j]; },
            [&](const int j) -> float& { return logits[j]; }, [&](const int j) -> float& { return out[j]; });
      }
    });
  }
};

// Team threads per (entry, row, branch) when the launch does not say: on a device, one per
// action of the widest branch while the launch stays within kDuelingSplitWarps warps (small
// batches, where a warp walking a branch's actions one after another is the kernel's whole
// time), else one; on the host, one.
inline constexpr int kDuelingSplitWarps = 0;

template <class Exec>
int dueling_split(int units, int widest) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  if (host) return 1;
  return static_cast<long long>(units) * widest <= kDuelingSplitWarps ? widest : 1;
}

// A prepared launch of DuelingBatch over every entry; tables go to the device once, here.
template <class Exec>
class DuelingLaunch {
 public:
  DuelingLaunch() = default;
  // branch_biases: per entry with branch_bias >= 0, K pointers from that index on.
  // split: team threads per (entry, row, branch), 1 to the widest branch's actions; 0 picks it
  // (dueling_split).
  DuelingLaunch(const std::vector<DuelingEntry>& entries, const std::vector<const float*>& branch_biases,
                const BranchTable& table, int atoms, int split = 0)
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
      if (e.rows > max_rows_) max_rows_ = e.rows;
    }
    const int widest = table.widest();
    require(split >= 0 && split <= widest, "DuelingLaunch: split = ", split, "; expected 0 (automatic) to ", widest,
            " (the widest branch's actions)");
    split_ = split > 0 ? split : dueling_split<Exec>(static_cast<int>(entries.size()) * max_rows_ * table.branches, widest);
    entries_ = device_table<typename Exec::memory_space>("zs::dueling_batch", entries);
    biases_ = device_table<typename Exec::memory_space>("zs::dueling_batch::biases", biases);
  }
  void operator()(const Exec& exec) const {
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
    const int per_team = host ? 16 : 8, vector = host ? 1 : 32;
    const int units = static_cast<int>(entries_.extent(0)) * max_rows_ * table_.branches * split_;
    Kokkos::TeamPolicy<Exec> policy(exec, (units + per_team - 1) / per_team, host ? 1 : per_team, vector);
    policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(float) * DuelingBatch<Exec>::scratch_floats(per_team, atoms_)));
    Kokkos::parallel_for("zs::dueling_batch", policy,
                         DuelingBatch<Exec>{entries_, biases_, table_, atoms_, max_rows_, per_team, split_});
  }
  int split() const { return split_; }

 private:
  Kokkos::View<DuelingEntry*, typename Exec::memory_space> entries_;
  Kokkos::View<std::uintptr_t*, typename Exec::memory_space> biases_;
  BranchTable table_;
  int atoms_ = 0, max_rows_ = 0, split_ = 1;
};

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
  // Device: 8 warps a team, a warp per (row, action). Host: one (row, action) after another.
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  const int per_team = host ? 16 : 8, vector = host ? 1 : 32;
  const int pairs = static_cast<int>(rows * actions), teams = (pairs + per_team - 1) / per_team;
  Kokkos::parallel_for("zs::dueling_log_softmax", Kokkos::TeamPolicy<Exec>(exec, teams, host ? 1 : per_team, vector),
                       DuelingLogSoftmax<Exec>{value, branch_out, logp, table, per_team});
}

}  // namespace zs::kernels
