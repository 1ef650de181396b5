// Device sum-tree for proportional sampling: leaves in double, every internal node the exact
// sum (left + right) of its two children, recomputed along the touched paths after each change.
//
// Layout: a View<double*> of 2·P entries, P = leaves (a power of two ≥ the leaf count), root at
// index 1, leaf j at P + j, index 0 unused. Because a parent is always recomputed as left + right
// (never incremented), the tree is a pure function of its leaves: no drift, no order dependence,
// and a rebuild from the leaves (load_state) gives the same bits as the incremental updates.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

// The one team of the tree kernels: on a host backend one thread (its team barriers are then
// free, and an OpenMP team barrier on a busy machine costs a time slice per tree level); on a
// GPU 256 threads (one per sample of the reference batch), or fewer if the functor allows fewer.
template <class Exec, class Functor>
Kokkos::TeamPolicy<Exec> sum_tree_team(const Exec& exec, const Functor& f) {
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible;
  if (host) return Kokkos::TeamPolicy<Exec>(exec, 1, 1);
  const int most = Kokkos::TeamPolicy<Exec>(exec, 1, 1).team_size_max(f, Kokkos::ParallelForTag());
  return Kokkos::TeamPolicy<Exec>(exec, 1, most < 256 ? most : 256);
}

// Smallest power of two ≥ n (n ≥ 1), and its log2.
inline std::int64_t sum_tree_leaves(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
inline int sum_tree_levels(std::int64_t leaves) {
  int l = 0;
  while ((std::int64_t{1} << l) < leaves) ++l;
  return l;
}

// The leaf whose prefix interval holds u. Never returns a zero leaf when the root is > 0: a
// child with sum 0 is never entered, so a u at or past the total (float rounding of
// (i + U)·total/B) lands on the last non-zero leaf. Root 0: returns 0 (callers check first).
template <class TreeView>
KOKKOS_INLINE_FUNCTION std::int64_t sum_tree_find(const TreeView& tree, const std::int64_t leaves, double u) {
  std::int64_t node = 1;
  while (node < leaves) {
    const double left = tree(2 * node), right = tree(2 * node + 1);
    if ((u < left && left > 0) || !(right > 0)) {
      node = 2 * node;
    } else {
      u -= left;
      node = 2 * node + 1;
    }
  }
  return node - leaves;
}

// Recomputes the paths from `count` dirty leaves to the root, one level at a time with a team
// barrier between levels. Writers of one parent at one level all store the same left + right of
// children finished in the level before, so duplicates and shared ancestors cannot race to
// different values. leaf_of(d) gives dirty item d's leaf, or a negative number to skip it.
// Ends with a barrier: the caller may read the root afterwards.
// skip_shared: an item whose predecessor has the same node at this level leaves the write to it
// (fewer same-address stores for sorted input; worth it when leaf_of is a load, not arithmetic).
template <bool skip_shared = true, class Member, class TreeView, class LeafOf>
KOKKOS_INLINE_FUNCTION void sum_tree_refresh(const Member& team, const TreeView& tree, const std::int64_t leaves,
                                             const int levels, const int count, const LeafOf& leaf_of) {
  for (int level = 1; level <= levels; ++level) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](const int d) {
      const std::int64_t leaf = leaf_of(d);
      if (leaf < 0) return;
      const std::int64_t node = (leaves + leaf) >> level;
      // The item before shares this node (sorted or run-length input): it writes the same value.
      if (skip_shared && d > 0) {
        const std::int64_t prev = leaf_of(d - 1);
        if (prev >= 0 && ((leaves + prev) >> level) == node) return;
      }
      tree(node) = tree(2 * node) + tree(2 * node + 1);
    });
    team.team_barrier();
  }
}

// Host: every internal node from the leaves (set-up and load, on a host copy of the tree).
inline void sum_tree_rebuild_host(std::vector<double>& tree, std::int64_t leaves) {
  for (std::int64_t node = leaves - 1; node >= 1; --node) tree[node] = tree[2 * node] + tree[2 * node + 1];
}

// Sets leaf idx(i) to value(i) for a batch. Negative indices and non-finite values are skipped;
// among duplicates the last one with a finite value wins (an O(B²) scan per item, no atomics,
// so the result never depends on thread order). Then refreshes the touched paths. One team.
template <class Exec>
struct SumTreeAssign {
  using Mem = typename Exec::memory_space;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  Kokkos::View<double*, Mem> tree;
  Kokkos::View<const std::int64_t*, Mem> idx;
  Kokkos::View<const double*, Mem> value;
  std::int64_t leaves = 1;
  int levels = 0;

  KOKKOS_INLINE_FUNCTION bool wins(const int i) const {
    const int n = static_cast<int>(idx.extent(0));
    const std::int64_t j = idx(i);
    if (j < 0 || !is_finite(value(i))) return false;
    for (int l = i + 1; l < n; ++l)
      if (idx(l) == j && is_finite(value(l))) return false;
    return true;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int n = static_cast<int>(idx.extent(0));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int i) {
      if (wins(i)) tree(leaves + idx(i)) = value(i);
    });
    team.team_barrier();
    sum_tree_refresh(team, tree, leaves, levels, n, [&](const int d) { return idx(d); });
  }
};

template <class Exec>
void sum_tree_assign(const Exec& exec, const Kokkos::View<double*, typename Exec::memory_space>& tree,
                     const Kokkos::View<const std::int64_t*, typename Exec::memory_space>& idx,
                     const Kokkos::View<const double*, typename Exec::memory_space>& value) {
  const auto size = static_cast<std::int64_t>(tree.extent(0));
  require(size >= 2 && (size & (size - 1)) == 0, "sum_tree_assign: tree holds ", size,
          " entries; expected 2·P with P a power of two ≥ 1");
  require(idx.extent(0) == value.extent(0), "sum_tree_assign: ", idx.extent(0), " indices but ", value.extent(0),
          " values; expected the same count");
  SumTreeAssign<Exec> f{tree, idx, value, size / 2, sum_tree_levels(size / 2)};
  Kokkos::parallel_for("zs::sum_tree_assign", sum_tree_team(exec, f), f);
}

template <class Exec>
struct SumTreeFindBatch {
  using Mem = typename Exec::memory_space;
  Kokkos::View<const double*, Mem> tree;
  Kokkos::View<const double*, Mem> u;
  Kokkos::View<std::int64_t*, Mem> out;
  std::int64_t leaves = 1;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    out(i) = tree(1) > 0 ? sum_tree_find(tree, leaves, u(i)) : -1;
  }
};

// out(i) = the leaf holding u(i), or −1 when the tree is empty (root 0).
template <class Exec>
void sum_tree_find_batch(const Exec& exec, const Kokkos::View<const double*, typename Exec::memory_space>& tree,
                         const Kokkos::View<const double*, typename Exec::memory_space>& u,
                         const Kokkos::View<std::int64_t*, typename Exec::memory_space>& out) {
  const auto size = static_cast<std::int64_t>(tree.extent(0));
  require(size >= 2 && (size & (size - 1)) == 0, "sum_tree_find_batch: tree holds ", size,
          " entries; expected 2·P with P a power of two ≥ 1");
  require(u.extent(0) == out.extent(0), "sum_tree_find_batch: ", u.extent(0), " draws but ", out.extent(0),
          " outputs; expected the same count");
  Kokkos::parallel_for("zs::sum_tree_find",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, u.extent(0)),
                       SumTreeFindBatch<Exec>{tree, u, out, size / 2});
}

}  // namespace zs::kernels
