// The device sum-tree against host references: its shape, totals after many random batched
// updates (duplicates, NaN, Inf, negative indices), descent against prefix sums, the u ≥ total edge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/sum_tree.hpp"
#include "test_util.hpp"

namespace {

using IndexView = Kokkos::View<std::int64_t*, zs::MemSpace>;
using DoubleView = Kokkos::View<double*, zs::MemSpace>;

template <class V, class T>
void put(const V& v, const std::vector<T>& d) {
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < d.size(); ++i) h(i) = d[i];
  Kokkos::deep_copy(v, h);
}

// Host rule: last finite value among duplicates wins, negatives and non-finite values skipped.
void host_assign(std::vector<double>& leaves, const std::vector<std::int64_t>& idx, const std::vector<double>& val) {
  for (std::size_t i = 0; i < idx.size(); ++i)
    if (idx[i] >= 0 && std::isfinite(val[i])) leaves[idx[i]] = val[i];
}

}  // namespace

TEST(SumTree, ShapeHasSixteenChildrenANodeAndLevelsOnWholeGroups) {
  for (std::int64_t n : std::vector<std::int64_t>{1, 2, 16, 17, 256, 257, 50000, 65536, 65537, std::int64_t{1} << 28}) {
    SCOPED_TRACE(testing::Message() << "leaves " << n);
    const zs::kernels::SumTreeShape s = zs::kernels::sum_tree_shape(n);
    int depth = 1;
    for (std::int64_t span = 16; span < n; span *= 16) ++depth;
    EXPECT_EQ(s.depth, depth);
    EXPECT_EQ(s.leaves(), n);
    EXPECT_EQ(s.nodes[0], 1);
    EXPECT_EQ(s.offset[0], 1);
    for (int d = 1; d <= s.depth; ++d) {
      EXPECT_EQ(s.offset[d] % 16, 0) << "level " << d << " starts off a 16-entry boundary";
      EXPECT_EQ(s.nodes[d - 1], (s.nodes[d] + 15) / 16) << "level " << d;
      if (d < s.depth) EXPECT_GE(s.offset[d + 1], s.offset[d] + s.nodes[d]) << "level " << d << " overlaps the next";
    }
    EXPECT_EQ(s.size(), s.leaf0() + (n + 15) / 16 * 16);
    EXPECT_LT(s.size(), n + n / 8 + 64) << "the padding should stay small";
  }
  EXPECT_NE(zs::test::error_of([] { zs::kernels::sum_tree_shape(0); }).find("0 leaves; expected at least 1"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([] { zs::kernels::sum_tree_shape((std::int64_t{1} << 32) + 1); }).find("levels"),
            std::string::npos);
}

TEST(SumTree, TotalsMatchHostAfterManyRandomBatchedUpdates) {
  zs::Stream stream;
  for (std::int64_t n : {1, 2, 3, 31, 1000, 65537}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "leaves " << n << ", seed " << seed);
    std::mt19937_64 rng(seed);
    const zs::kernels::SumTreeShape shape = zs::kernels::sum_tree_shape(n);
    const std::int64_t L = shape.leaf0();
    DoubleView tree("tree", shape.size());
    std::vector<double> leaves(n, 0.0);
    std::uniform_real_distribution<double> u01(0, 1);
    for (int round = 0; round < 60; ++round) {
      const int B = 1 + static_cast<int>(rng() % 97);
      std::vector<std::int64_t> idx(B);
      std::vector<double> val(B);
      for (int i = 0; i < B; ++i) {
        idx[i] = static_cast<std::int64_t>(rng() % std::min<std::int64_t>(n, 40));  // forces duplicates
        if (u01(rng) < 0.5) idx[i] = static_cast<std::int64_t>(rng() % n);
        if (u01(rng) < 0.03) idx[i] = -1;
        val[i] = std::exp(20 * (u01(rng) - 0.5));  // 6 decades
        if (u01(rng) < 0.1) val[i] = 0;
        if (u01(rng) < 0.05) val[i] = std::numeric_limits<double>::quiet_NaN();
        if (u01(rng) < 0.02) val[i] = std::numeric_limits<double>::infinity();
      }
      IndexView di("idx", B);
      DoubleView dv("val", B);
      put(di, idx);
      put(dv, val);
      zs::kernels::sum_tree_assign(stream.exec(), tree, shape, IndexView::const_type(di), DoubleView::const_type(dv));
      host_assign(leaves, idx, val);
    }
    stream.synchronize();
    const auto t = zs::test::to_host(tree);
    long double total = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(t[L + j], leaves[j]) << "leaf " << j;
      total += leaves[j];
    }
    for (std::int64_t j = L + n; j < shape.size(); ++j) ASSERT_EQ(t[j], 0.0) << "padding " << j;
    EXPECT_NEAR(t[1], double(total), 1e-12 * double(total));
    // Every node is exactly the sum of its children: no drift from incremental updates.
    std::vector<double> rebuilt = t;
    for (int d = 0; d < shape.depth; ++d)  // every internal node again from the leaves alone
      for (std::int64_t i = 0; i < shape.nodes[d]; ++i) rebuilt[shape.offset[d] + i] = -1.0;
    zs::kernels::sum_tree_rebuild_host(rebuilt, shape);
    EXPECT_TRUE(zs::test::same_bits(rebuilt, t));
  }
}

TEST(SumTree, DescentFindsThePrefixIntervalAndNeverAZeroLeaf) {
  zs::Stream stream;
  for (std::int64_t n : {1, 5, 64, 777}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "leaves " << n << ", seed " << seed);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u01(0, 1);
    const zs::kernels::SumTreeShape shape = zs::kernels::sum_tree_shape(n);
    const std::int64_t P = shape.leaf0();
    std::vector<double> tree(shape.size(), 0.0);
    std::int64_t last_nonzero = -1;
    for (std::int64_t j = 0; j < n; ++j) {
      tree[P + j] = u01(rng) < 0.3 ? 0.0 : std::exp(8 * (u01(rng) - 0.5));
      if (tree[P + j] > 0) last_nonzero = j;
    }
    if (last_nonzero < 0) tree[P + (last_nonzero = n - 1)] = 1.0;
    zs::kernels::sum_tree_rebuild_host(tree, shape);
    const double total = tree[1];
    std::vector<double> prefix(n + 1, 0.0);  // long-hand prefix sums
    for (std::int64_t j = 0; j < n; ++j) prefix[j + 1] = prefix[j] + tree[P + j];
    std::vector<double> u;
    for (int i = 0; i < 2000; ++i) u.push_back(u01(rng) * total);
    for (double x : {0.0, total, std::nextafter(total, 0.0), total * (1 + 1e-15), total * 2})
      u.push_back(x);
    DoubleView dt("tree", tree.size()), du("u", u.size());
    IndexView out("out", u.size());
    put(dt, tree);
    put(du, u);
    zs::kernels::sum_tree_find_batch(stream.exec(), DoubleView::const_type(dt), shape, DoubleView::const_type(du), out);
    stream.synchronize();
    const auto found = zs::test::to_host(out);
    for (std::size_t i = 0; i < u.size(); ++i) {
      const std::int64_t j = found[i];
      ASSERT_GE(j, 0);
      ASSERT_LT(j, n);
      ASSERT_GT(tree[P + j], 0.0) << "u = " << u[i] << " picked a zero leaf " << j;
      if (u[i] >= total) {
        EXPECT_EQ(j, last_nonzero) << "u = " << u[i] << " at or past the total " << total;
      } else {
        const double slack = 1e-12 * total;  // tree-order and long-hand prefix sums round apart
        EXPECT_LE(prefix[j], u[i] + slack) << "u = " << u[i];
        EXPECT_GT(prefix[j + 1] + slack, u[i]) << "u = " << u[i];
      }
    }
  }
}

TEST(SumTree, EmptyTreeFindsNothing) {
  zs::Stream stream;
  const zs::kernels::SumTreeShape shape = zs::kernels::sum_tree_shape(40);
  DoubleView tree("tree", shape.size()), u("u", 3);
  IndexView out("out", 3);
  zs::kernels::sum_tree_find_batch(stream.exec(), DoubleView::const_type(tree), shape, DoubleView::const_type(u), out);
  stream.synchronize();
  for (auto j : zs::test::to_host(out)) EXPECT_EQ(j, -1);
}

TEST(SumTree, BadShapesAreClearErrors) {
  zs::Stream stream;
  const zs::kernels::SumTreeShape shape = zs::kernels::sum_tree_shape(40);  // root, 3 nodes and 40 leaves: 80 entries
  DoubleView odd("tree", 12), tree("tree", shape.size()), val("val", 3);
  IndexView idx("idx", 4);
  auto msg = zs::test::error_of([&] {
    zs::kernels::sum_tree_assign(stream.exec(), odd, shape, IndexView::const_type(idx), DoubleView::const_type(val));
  });
  EXPECT_NE(msg.find("tree holds 12 entries; expected 80"), std::string::npos) << msg;
  msg = zs::test::error_of([&] {
    zs::kernels::sum_tree_assign(stream.exec(), tree, shape, IndexView::const_type(idx), DoubleView::const_type(val));
  });
  EXPECT_NE(msg.find("4 indices but 3 values"), std::string::npos) << msg;
  msg = zs::test::error_of([&] {
    zs::kernels::sum_tree_find_batch(stream.exec(), DoubleView::const_type(tree), shape, DoubleView::const_type(val), idx);
  });
  EXPECT_NE(msg.find("3 draws but 4 outputs"), std::string::npos) << msg;
}
