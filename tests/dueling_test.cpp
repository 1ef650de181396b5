// The dueling combine and log-softmax of every pass in one launch (kernels/c51_head.hpp's
// DuelingLaunch), in tiles of any size and on the general path, against a double reference; the
// per-layer head (dueling_log_softmax) forms the same bits as the batched one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/stream.hpp"
#include "core/error.hpp"
#include "kernels/c51_head.hpp"
#include "test_util.hpp"

namespace {

using zs::kernels::BranchTable;
using zs::kernels::DuelingEntry;

std::vector<float> download(const zs::DeviceFloats& d) {
  auto h = Kokkos::create_mirror_view(d);
  Kokkos::deep_copy(h, d);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// One head set's buffers: `rows` rows of value and branch outputs, its biases, its logp.
struct HeadSet {
  int rows = 0;
  std::vector<float> value, branch_out, value_bias, branch_bias;  // branch_bias: branch after branch
  zs::DeviceFloats d_value, d_out, d_vb, d_bb, d_logp;
};

HeadSet make_set(int rows, const BranchTable& t, int atoms, std::uint64_t seed) {
  HeadSet s;
  s.rows = rows;
  s.value = zs::test::random_normal(std::size_t(rows) * atoms, seed, 2.f);
  s.branch_out = zs::test::random_normal(std::size_t(rows) * t.actions * atoms, seed + 1, 2.f);
  s.value_bias = zs::test::random_normal(atoms, seed + 2);
  s.branch_bias = zs::test::random_normal(std::size_t(t.actions) * atoms, seed + 3);
  s.d_value = zs::test::to_device(s.value);
  s.d_out = zs::test::to_device(s.branch_out);
  s.d_vb = zs::test::to_device(s.value_bias);
  s.d_bb = zs::test::to_device(s.branch_bias);
  s.d_logp = zs::test::to_device(std::vector<float>(std::size_t(rows) * t.actions * atoms, std::nanf("")));
  return s;
}

// log p of (row r, global action c0 + a) of a set, in double; biased or not.
std::vector<double> reference(const HeadSet& s, const BranchTable& t, int atoms, int r, int k, int a, bool biased) {
  const int n = t.size(k), c0 = t.cum(k);
  auto o = [&](int b, int j) {
    double x = s.branch_out[t.index(s.rows, atoms, k, r, b, j)];
    return biased ? x + s.branch_bias[std::size_t(c0 + b) * atoms + j] : x;
  };
  std::vector<double> logit(atoms);
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < atoms; ++j) {
    double mean = 0;
    for (int b = 0; b < n; ++b) mean += o(b, j);
    const double v = s.value[std::size_t(r) * atoms + j] + (biased ? s.value_bias[j] : 0.0);
    logit[j] = v + o(a, j) - mean / n;
    mx = std::max(mx, logit[j]);
  }
  double sum = 0;
  for (double l : logit) sum += std::exp(l - mx);
  for (double& l : logit) l -= mx + std::log(sum);
  return logit;
}

// Every set's logp against the reference; returns the worst error relative to 1 + |ref|.
double worst_error(const std::vector<std::vector<float>>& got, const std::vector<const HeadSet*>& sets,
                   const std::vector<bool>& biased, const BranchTable& t, int atoms) {
  double worst = 0;
  for (std::size_t set = 0; set < sets.size(); ++set) {
    const HeadSet& s = *sets[set];
    for (int r = 0; r < s.rows; ++r)
      for (int k = 0; k < t.branches; ++k)
        for (int a = 0; a < t.size(k); ++a) {
          const auto ref = reference(s, t, atoms, r, k, a, biased[set]);
          for (int j = 0; j < atoms; ++j) {
            const double g = got[set][(std::size_t(r) * t.actions + t.cum(k) + a) * atoms + j];
            if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();
            worst = std::max(worst, std::abs(g - ref[j]) / (1.0 + std::abs(ref[j])));
          }
        }
  }
  return worst;
}

// As the trainer lays them out: one set's rows [0, R) and [R, 2R) are two passes (online on s and
// on s′), with biases; a second set of R rows (the target) here without biases.
struct ThreePasses {
  HeadSet online, target;
  std::vector<const float*> biases;
  std::vector<DuelingEntry> entries;
  ThreePasses(int R, const BranchTable& t, int atoms, std::uint64_t seed)
      : online(make_set(2 * R, t, atoms, seed)), target(make_set(R, t, atoms, seed + 10)) {
    for (int k = 0; k < t.branches; ++k) biases.push_back(online.d_bb.data() + std::size_t(t.cum(k)) * atoms);
    for (int pass = 0; pass < 2; ++pass)
      entries.push_back({online.d_value.data(), online.d_out.data(), online.d_logp.data(), 2 * R, pass * R, R,
                         online.d_vb.data(), 0});
    entries.push_back({target.d_value.data(), target.d_out.data(), target.d_logp.data(), R, 0, R, nullptr, -1});
  }
  std::vector<std::vector<float>> run(zs::Stream& stream, const BranchTable& t, int atoms, int tile_rows,
                                      int lanes = 0) {
    Kokkos::deep_copy(online.d_logp, std::nanf(""));
    Kokkos::deep_copy(target.d_logp, std::nanf(""));
    const zs::kernels::DuelingLaunch<zs::ExecSpace> launch(entries, biases, t, atoms, tile_rows, lanes);
    launch(stream.exec());
    stream.synchronize();
    shape = launch.shape();
    return {download(online.d_logp), download(target.d_logp)};
  }
  double error(const std::vector<std::vector<float>>& got, const BranchTable& t, int atoms) const {
    return worst_error(got, {&online, &target}, {true, false}, t, atoms);
  }
  zs::kernels::DuelingShape shape;
};

constexpr int kRowsPath = zs::kernels::DuelingLaunch<zs::ExecSpace>::kRowsPath;

}  // namespace

TEST(Dueling, EveryPassMatchesTheDoubleReferenceInTilesOfAnySizeAndOnTheGeneralPath) {
  zs::Stream stream;
  for (const int atoms : {51, 7}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "atoms " << atoms << ", seed " << seed);
    const BranchTable t = BranchTable::of({5, 3, 1, 3});
    ThreePasses x(37, t, atoms, seed);  // 37 rows: every tile size below leaves a partial tile
    const auto rows_path = x.run(stream, t, atoms, kRowsPath);
    EXPECT_EQ(x.shape.tile_rows, 0);
    EXPECT_LT(x.error(rows_path, t, atoms), 1e-5) << "general path";
    for (const int lanes : {1, 4, 8, 32}) {
      std::vector<std::vector<float>> first;
      for (const int tile_rows : {1, 2, 3, 8}) {
        SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows << ", lanes " << lanes);
        const auto got = x.run(stream, t, atoms, tile_rows, lanes);
        EXPECT_EQ(x.shape.tile_rows, tile_rows);
        EXPECT_EQ(x.shape.lanes, lanes);
        if (first.empty()) {
          EXPECT_LT(x.error(got, t, atoms), 1e-5);
          first = got;
        } else {  // a team thread per (row, action) whatever the tile: the same bits
          EXPECT_TRUE(zs::test::same_bits(got[0], first[0]));
          EXPECT_TRUE(zs::test::same_bits(got[1], first[1]));
        }
      }
    }
    // Left to the launch, the shape dueling_shape picks, with that shape's bits.
    const auto automatic = x.run(stream, t, atoms, 0);
    const auto picked = zs::kernels::dueling_shape<zs::ExecSpace>(t, atoms, 3 * 37);
    EXPECT_EQ(x.shape.tile_rows, picked.tile_rows);
    const auto again = x.run(stream, t, atoms, picked.tile_rows > 0 ? picked.tile_rows : kRowsPath, picked.lanes);
    EXPECT_TRUE(zs::test::same_bits(automatic[0], again[0]));
    EXPECT_TRUE(zs::test::same_bits(automatic[1], again[1]));
  }
}

// Network::forward's head, on outputs that already hold their biases, against the step's batched
// launch adding the same biases: the same float additions, so the same bits.
TEST(Dueling, ThePerLayerHeadFormsTheBatchedHeadsBits) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  const int atoms = 51, R = 13;
  const BranchTable t = BranchTable::of({4, 2, 6});
  HeadSet s = make_set(R, t, atoms, seed);
  std::vector<float> value = s.value, out = s.branch_out;
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < atoms; ++j) value[std::size_t(r) * atoms + j] += s.value_bias[j];
  for (int k = 0; k < t.branches; ++k)
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < t.size(k); ++a)
        for (int j = 0; j < atoms; ++j)
          out[t.index(R, atoms, k, r, a, j)] += s.branch_bias[std::size_t(t.cum(k) + a) * atoms + j];
  const auto d_value = zs::test::to_device(value), d_out = zs::test::to_device(out);
  Kokkos::View<float***, Kokkos::LayoutRight, zs::ExecSpace::memory_space> logp("logp", R, t.actions, atoms);
  zs::kernels::dueling_log_softmax<zs::ExecSpace>(
      stream.exec(),
      Kokkos::View<const float**, Kokkos::LayoutRight, zs::ExecSpace::memory_space, Kokkos::MemoryUnmanaged>(d_value.data(), R, atoms),
      Kokkos::View<const float*, zs::ExecSpace::memory_space, Kokkos::MemoryUnmanaged>(d_out.data(), out.size()), logp,
      t);
  std::vector<const float*> biases;
  for (int k = 0; k < t.branches; ++k) biases.push_back(s.d_bb.data() + std::size_t(t.cum(k)) * atoms);
  const zs::kernels::DuelingLaunch<zs::ExecSpace> launch({{s.d_value.data(), s.d_out.data(), s.d_logp.data(), R, 0, R,
                                                           s.d_vb.data(), 0}},
                                                         biases, t, atoms);
  launch(stream.exec());
  stream.synchronize();
  auto h = Kokkos::create_mirror_view(logp);
  Kokkos::deep_copy(h, logp);
  const std::vector<float> per_layer(h.data(), h.data() + h.size()), batched = download(s.d_logp);
  EXPECT_TRUE(zs::test::same_bits(per_layer, batched));
  EXPECT_LT(worst_error({batched}, {&s}, {true}, t, atoms), 1e-5);
}

// (5 + 3 + 3 actions + the value + 3 means) · 1024 atoms · 4 bytes is over the tiles' scratch:
// both launches take the general path, and still match the reference.
TEST(Dueling, RowsTooWideForATileTakeTheGeneralPath) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  const int atoms = 1024;
  const BranchTable t = BranchTable::of({5, 3, 3});
  ASSERT_EQ(zs::kernels::dueling_tile_fit(t, atoms), 0);
  ThreePasses x(3, t, atoms, seed);
  const auto got = x.run(stream, t, atoms, 0);
  EXPECT_EQ(x.shape.tile_rows, 0);
  EXPECT_LT(x.error(got, t, atoms), 1e-5);
}

TEST(Dueling, ATileOverItsScratchAnUnknownPathOrOddLanesAreRefused) {
  const BranchTable t = BranchTable::of({5, 3, 3});
  const int atoms = 51, fit = zs::kernels::dueling_tile_fit(t, atoms);
  ASSERT_GE(fit, 8);
  zs::DeviceFloats buf("buf", 3 * 11 * atoms);
  std::vector<DuelingEntry> entries{{buf.data(), buf.data(), buf.data(), 3, 0, 3, nullptr, 0}};
  const std::vector<const float*> biases(3, buf.data());
  auto refused = [&](int tile_rows, int lanes, const std::string& expected) {
    try {
      zs::kernels::DuelingLaunch<zs::ExecSpace> launch(entries, biases, t, atoms, tile_rows, lanes);
      ADD_FAILURE() << "tile_rows " << tile_rows << ", lanes " << lanes << " were accepted";
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  for (const int tile_rows : {-2, fit + 1})
    refused(tile_rows, 1,
            "tile_rows = " + std::to_string(tile_rows) + "; expected 0 (automatic), -1 (the general path) or 1 to " +
                std::to_string(fit));
  for (const int lanes : {-1, 3, 64}) refused(1, lanes, "lanes = " + std::to_string(lanes) + "; expected 0 (automatic) or a power of two up to 32");
}

// Outputs stored with padded rows (DuelingEntry::value_ld and row_pad, as ForwardShape's
// padded_outputs stores them; NaN in every padding float, so a read of one would show): the same
// bits as the dense rows, in tiles and on the general path.
TEST(Dueling, PaddedRowsGiveTheDenseRowsBits) {
  zs::Stream stream;
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int atoms = 51, R = 13, pad = 4, value_ld = atoms + 3;
  const BranchTable t = BranchTable::of({5, 3, 1, 3});
  ThreePasses x(R, t, atoms, seed);
  auto padded = [&](const HeadSet& s, zs::DeviceFloats& value, zs::DeviceFloats& out) {
    std::vector<float> v(std::size_t(s.rows) * value_ld, std::nanf(""));
    std::vector<float> o(t.padded_block(s.rows, atoms, t.branches, pad), std::nanf(""));
    for (int r = 0; r < s.rows; ++r) {
      for (int j = 0; j < atoms; ++j) v[std::size_t(r) * value_ld + j] = s.value[std::size_t(r) * atoms + j];
      for (int k = 0; k < t.branches; ++k)
        for (int f = 0; f < t.size(k) * atoms; ++f)
          o[t.padded_block(s.rows, atoms, k, pad) + std::size_t(r) * t.row_floats(atoms, k, pad) + f] =
              s.branch_out[t.index(s.rows, atoms, k, r, 0, 0) + f];
    }
    value = zs::test::to_device(v);
    out = zs::test::to_device(o);
  };
  zs::DeviceFloats on_value, on_out, tg_value, tg_out;
  padded(x.online, on_value, on_out);
  padded(x.target, tg_value, tg_out);
  for (const int tile_rows : {kRowsPath, 1, 3}) {
    SCOPED_TRACE(testing::Message() << "tile_rows " << tile_rows);
    const auto dense = x.run(stream, t, atoms, tile_rows, 4);
    ThreePasses y = x;
    for (int e = 0; e < 3; ++e) {
      y.entries[e].value = e < 2 ? on_value.data() : tg_value.data();
      y.entries[e].branch_out = e < 2 ? on_out.data() : tg_out.data();
      y.entries[e].value_ld = value_ld;
      y.entries[e].row_pad = pad;
    }
    const auto got = y.run(stream, t, atoms, tile_rows, 4);
    EXPECT_TRUE(zs::test::same_bits(got[0], dense[0]));
    EXPECT_TRUE(zs::test::same_bits(got[1], dense[1]));
    EXPECT_LT(x.error(got, t, atoms), 1e-5);
  }
  std::vector<DuelingEntry> bad = x.entries;
  bad[0].value_ld = atoms - 1;
  EXPECT_NE(zs::test::error_of([&] { zs::kernels::DuelingLaunch<zs::ExecSpace>(bad, x.biases, t, atoms); })
                .find("value rows of 50 floats"),
            std::string::npos);
}
