// Device sum-tree for proportional sampling: leaves in double, every internal node the sum of its
// 16 children in one fixed order (sum_tree_sum16), recomputed along the touched paths after each
// change.
//
// Sixteen children a node, not two: every path refresh and every descent is one dependent L2 load
// and one team barrier a level, and a 50,000-entry replay has 4 levels where a binary tree has 16
// (docs/replay.md: the binary tree's insert, sample and update each took 16–21 µs, mostly those
// levels). A node's children are loaded together (128 contiguous bytes) before any is used, so a
// level costs one latency, not sixteen.
//
// Layout (SumTreeShape): a View<double*> of shape.size() entries; index 0 unused, the root at 1,
// then level 1 from index 16, each level after the one above it, the leaves last from
// shape.leaf0(). Node i of level d has children 16·i … 16·i + 15 of level d + 1. Each level's real
// nodes are followed by zeros up to a multiple of 16, so every real node's children exist. Because
// a parent is always recomputed from its children (never incremented), the tree is a pure function
// of its leaves: no drift, no order dependence, and a rebuild from the leaves (load_state) gives
// the same bits as the incremental updates, on every backend (the sum's order is fixed in code).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "kernels/math.hpp"

namespace zs::kernels {

inline constexpr int kSumTreeArity = 16;
inline constexpr int kSumTreeMaxDepth = 8;  // 16^7 = 2^28 leaves, the replay's largest capacity

struct SumTreeShape {
  int depth = 1;                              // levels below the root; the leaves are level `depth`
  std::int64_t nodes[kSumTreeMaxDepth + 1] = {};   // real nodes of each level (level 0: the root)
  std::int64_t offset[kSumTreeMaxDepth + 1] = {};  // index of each level's first node
  KOKKOS_INLINE_FUNCTION std::int64_t leaf0() const { return offset[depth]; }
  KOKKOS_INLINE_FUNCTION std::int64_t leaf(std::int64_t j) const { return offset[depth] + j; }
  KOKKOS_INLINE_FUNCTION std::int64_t leaves() const { return nodes[depth]; }
  KOKKOS_INLINE_FUNCTION std::int64_t size() const {
    return offset[depth] + (nodes[depth] + kSumTreeArity - 1) / kSumTreeArity * kSumTreeArity;
  }
};

// The tree of n ≥ 1 leaves.
inline SumTreeShape sum_tree_shape(std::int64_t n) {
  require(n >= 1, "sum_tree_shape: ", n, " leaves; expected at least 1");
  SumTreeShape s;
  s.depth = 1;
  for (std::int64_t span = kSumTreeArity; span < n; span *= kSumTreeArity) ++s.depth;
  require(s.depth <= kSumTreeMaxDepth, "sum_tree_shape: ", n, " leaves need ", s.depth, " levels; expected at most ",
          kSumTreeMaxDepth);
  s.nodes[s.depth] = n;
  for (int d = s.depth - 1; d >= 0; --d) s.nodes[d] = (s.nodes[d + 1] + kSumTreeArity - 1) / kSumTreeArity;
  s.offset[0] = 1;
  s.offset[1] = kSumTreeArity;  // level 1 on a 16-entry (128-byte) boundary, and so every level below
  for (int d = 1; d < s.depth; ++d)
    s.offset[d + 1] = s.offset[d] + (s.nodes[d] + kSumTreeArity - 1) / kSumTreeArity * kSumTreeArity;
  return s;
}

// The 16 values at c, all loaded before the first add, summed pairwise in one fixed order.
KOKKOS_INLINE_FUNCTION double sum_tree_sum16(const double* c) {
  double a[kSumTreeArity];
  for (int j = 0; j < kSumTreeArity; ++j) a[j] = c[j];
  for (int w = kSumTreeArity / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) a[j] += a[j + w];
  return a[0];
}

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

// The leaf whose prefix interval holds u: at each level the first non-zero child whose value
// exceeds what is left of u (u less each child passed). Never returns a zero leaf when the root is
// > 0: a zero child is never entered, and a u at or past a node's children's sum (float rounding
// of (i + U)·total/B, or a u ≥ the total) goes to its last non-zero child, so a u ≥ the total
// lands on the last non-zero leaf. Root 0: returns 0 (callers check first).
template <class TreeView>
KOKKOS_INLINE_FUNCTION std::int64_t sum_tree_find(const TreeView& tree, const SumTreeShape& shape, double u) {
  std::int64_t node = 0;
  for (int d = 0; d < shape.depth; ++d) {
    const std::int64_t first = shape.offset[d + 1] + node * kSumTreeArity;
    double c[kSumTreeArity];
    for (int j = 0; j < kSumTreeArity; ++j) c[j] = tree(first + j);
    int pick = -1, last = 0;
    double u_last = u;
    for (int j = 0; j < kSumTreeArity; ++j) {
      if (pick >= 0 || !(c[j] > 0)) continue;
      if (u < c[j]) {
        pick = j;
      } else {
        last = j;
        u_last = u;
        u -= c[j];
      }
    }
    if (pick < 0) {
      pick = last;
      u = u_last;
    }
    node = node * kSumTreeArity + pick;
  }
  return node;
}

// Recomputes the paths from `count` dirty leaves to the root, one level at a time with a team
// barrier between levels. Writers of one parent at one level all store the same sum of children
// finished in the level before, so duplicates and shared ancestors cannot race to different
// values. leaf_of(d) gives dirty item d's leaf, or a negative number to skip it.
// Ends with a barrier: the caller may read the root afterwards.
// skip_shared: an item whose predecessor has the same node at this level leaves the write to it
// (fewer same-address stores for sorted input; worth it when leaf_of is a load, not arithmetic).
template <bool skip_shared = true, class Member, class TreeView, class LeafOf>
KOKKOS_INLINE_FUNCTION void sum_tree_refresh(const Member& team, const TreeView& tree, const SumTreeShape& shape,
                                             const int count, const LeafOf& leaf_of) {
  for (int d = shape.depth - 1; d >= 0; --d) {
    const int shift = 4 * (shape.depth - d);  // leaf j's ancestor on level d: j / 16^(depth − d)
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](const int i) {
      const std::int64_t leaf = leaf_of(i);
      if (leaf < 0) return;
      const std::int64_t node = leaf >> shift;
      // The item before shares this node (sorted or run-length input): it writes the same value.
      if (skip_shared && i > 0) {
        const std::int64_t prev = leaf_of(i - 1);
        if (prev >= 0 && (prev >> shift) == node) return;
      }
      tree(shape.offset[d] + node) = sum_tree_sum16(&tree(shape.offset[d + 1] + node * kSumTreeArity));
    });
    team.team_barrier();
  }
}

// Host: every internal node from the leaves (set-up and load, on a host copy of the tree).
inline void sum_tree_rebuild_host(std::vector<double>& tree, const SumTreeShape& shape) {
  require(static_cast<std::int64_t>(tree.size()) == shape.size(), "sum_tree_rebuild_host: tree holds ", tree.size(),
          " entries; expected ", shape.size());
  for (int d = shape.depth - 1; d >= 0; --d)
    for (std::int64_t i = 0; i < shape.nodes[d]; ++i)
      tree[static_cast<std::size_t>(shape.offset[d] + i)] =
          sum_tree_sum16(&tree[static_cast<std::size_t>(shape.offset[d + 1] + i * kSumTreeArity)]);
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
  SumTreeShape shape;

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
      if (wins(i)) tree(shape.leaf(idx(i))) = value(i);
    });
    team.team_barrier();
    sum_tree_refresh(team, tree, shape, n, [&](const int d) { return idx(d); });
  }
};

// A tree's view against its shape (who: the launcher's name).
template <class View>
void check_sum_tree(const char* who, const View& tree, const SumTreeShape& shape) {
  require(static_cast<std::int64_t>(tree.extent(0)) == shape.size(), who, ": tree holds ", tree.extent(0),
          " entries; expected ", shape.size(), " (sum_tree_shape of ", shape.leaves(), " leaves)");
}

template <class Exec>
void sum_tree_assign(const Exec& exec, const Kokkos::View<double*, typename Exec::memory_space>& tree,
                     const SumTreeShape& shape,
                     const Kokkos::View<const std::int64_t*, typename Exec::memory_space>& idx,
                     const Kokkos::View<const double*, typename Exec::memory_space>& value) {
  check_sum_tree("sum_tree_assign", tree, shape);
  require(idx.extent(0) == value.extent(0), "sum_tree_assign: ", idx.extent(0), " indices but ", value.extent(0),
          " values; expected the same count");
  SumTreeAssign<Exec> f{tree, idx, value, shape};
  Kokkos::parallel_for("zs::sum_tree_assign", sum_tree_team(exec, f), f);
}

template <class Exec>
struct SumTreeFindBatch {
  using Mem = typename Exec::memory_space;
  Kokkos::View<const double*, Mem> tree;
  Kokkos::View<const double*, Mem> u;
  Kokkos::View<std::int64_t*, Mem> out;
  SumTreeShape shape;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    out(i) = tree(1) > 0 ? sum_tree_find(tree, shape, u(i)) : -1;
  }
};

// out(i) = the leaf holding u(i), or −1 when the tree is empty (root 0).
template <class Exec>
void sum_tree_find_batch(const Exec& exec, const Kokkos::View<const double*, typename Exec::memory_space>& tree,
                         const SumTreeShape& shape, const Kokkos::View<const double*, typename Exec::memory_space>& u,
                         const Kokkos::View<std::int64_t*, typename Exec::memory_space>& out) {
  check_sum_tree("sum_tree_find_batch", tree, shape);
  require(u.extent(0) == out.extent(0), "sum_tree_find_batch: ", u.extent(0), " draws but ", out.extent(0),
          " outputs; expected the same count");
  Kokkos::parallel_for("zs::sum_tree_find",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(exec, 0, u.extent(0)),
                       SumTreeFindBatch<Exec>{tree, u, out, shape});
}

}  // namespace zs::kernels
