// The BDQ-C51 output head: dueling combine on logits, per atom and per branch
// (q_k[a][j] = v[j] + o_k[a][j] − mean_a o_k[a][j]), then log-softmax over atoms.
#pragma once
#include <cmath>

#include "backends/backend.hpp"
#include "error.hpp"

namespace zs::kernels {

// Where branch outputs live. All branches' output layers write into one flat buffer, branch k
// as a contiguous [rows, n_k·atoms] matrix starting at rows·cum[k]·atoms, so each branch's GEMM
// writes a plain row-major matrix and this kernel finds any (row, action, atom) by arithmetic.
template <class Exec>
struct BranchTable {
  Kokkos::View<const int*, typename Exec::memory_space> cum;        // [K + 1]: first action of branch k
  Kokkos::View<const int*, typename Exec::memory_space> branch_of;  // [A]: branch of global action g
  int branches = 0, actions = 0;

  KOKKOS_INLINE_FUNCTION std::size_t index(int rows, int atoms, int k, int r, int a, int j) const {
    const int n = cum(k + 1) - cum(k);
    return static_cast<std::size_t>(rows) * cum(k) * atoms + (static_cast<std::size_t>(r) * n + a) * atoms + j;
  }
};

template <class Exec>
struct DuelingLogSoftmax {
  using MS = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<const float**, Kokkos::LayoutRight, MS, Kokkos::MemoryUnmanaged> value;  // [R, atoms]
  Kokkos::View<const float*, MS, Kokkos::MemoryUnmanaged> branch_out;                  // flat, see BranchTable
  Kokkos::View<float***, Kokkos::LayoutRight, MS> logp;                                 // [R, A, atoms]
  BranchTable<Exec> table;
  int pairs_per_team = 1;

  // A team thread per (row, action), its vector lanes over atoms (a warp on CUDA: the max and
  // the sum are warp shuffles, no team barrier). The logits go into logp first, then become
  // log-probabilities in place; each lane reads back only the atoms it wrote.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int rows = static_cast<int>(logp.extent(0)), actions = static_cast<int>(logp.extent(1));
    const int atoms = static_cast<int>(logp.extent(2));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, pairs_per_team), [&](const int t) {
      const int pair = team.league_rank() * pairs_per_team + t;
      if (pair >= rows * actions) return;
      const int r = pair / actions, g = pair % actions;
      const int k = table.branch_of(g), a = g - table.cum(k), n = table.cum(k + 1) - table.cum(k);
      float mx = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms),
          [&](const int j, float& m) {
            float mean = 0.f;
            for (int b = 0; b < n; ++b) mean += branch_out(table.index(rows, atoms, k, r, b, j));
            const float l =
                value(r, j) + branch_out(table.index(rows, atoms, k, r, a, j)) - mean / static_cast<float>(n);
            logp(r, g, j) = l;
            if (l > m) m = l;  // a NaN logit never wins here; it poisons the sum below instead
          },
          Kokkos::Max<float>(mx));
      float s = 0.f;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(team, atoms), [&](const int j, float& acc) { acc += ::expf(logp(r, g, j) - mx); },
          s);
      const float lse = mx + ::logf(s);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, atoms), [&](const int j) { logp(r, g, j) -= lse; });
    });
  }
};

template <class Exec>
void dueling_log_softmax(const Exec& exec,
                         const Kokkos::View<const float**, Kokkos::LayoutRight, typename Exec::memory_space,
                                            Kokkos::MemoryUnmanaged>& value,
                         const Kokkos::View<const float*, typename Exec::memory_space, Kokkos::MemoryUnmanaged>& branch_out,
                         const Kokkos::View<float***, Kokkos::LayoutRight, typename Exec::memory_space>& logp,
                         const BranchTable<Exec>& table) {
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
