// The fused step's tile products (kernels/tile_product.hpp) through FusedBuilder and
// phased_launch, against naive double-precision loops: every combination of k-contiguous and
// row-contiguous operands, several segments of awkward lengths (one empty), every epilogue (bias
// and ReLU, a ReLU mask, row sums), outputs written once and nothing beside them; and products
// chained over phases, persistent (one launch, grid barriers; CUDA) and as a launch per phase,
// bit for bit alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/stream.hpp"
#include "backends/warp_tile.hpp"
#include "nn/fused_kernel.hpp"
#include "test_util.hpp"

namespace {

using zs::kernels::ProductJob;
using zs::kernels::ProductOperand;
using zs::kernels::ProductSegment;

// TF32 keeps 10 of FP32's 23 mantissa bits: each input is off by up to 2^-11 relative.
const double kRel = zs::WarpTile<zs::ExecSpace>::kRoundsToTf32 ? 2e-3 : 1e-5;

// A host matrix and its device copy; element (r, k) at r·row_stride + k·k_stride.
// With `pad`, the leading dimension is rounded up to a multiple of 4 (the padding holds values
// no product may read): such an operand is staged four floats at a time.
struct Operand {
  int rows = 0, k = 0, ld = 0;
  bool transposed = false;  // row-contiguous (the transpose of a row-major [k, rows])
  std::vector<float> host;
  zs::DeviceFloats dev;
  Operand(int r, int kk, bool t, bool pad, std::uint64_t seed) : rows(r), k(kk), transposed(t) {
    ld = t ? r : kk;
    if (pad) ld = (ld + 3) / 4 * 4;
    // One spare float: an empty k still has a pointer.
    host = zs::test::random_normal(std::size_t(t ? kk : r) * ld + 1, seed);
    dev = zs::test::to_device(host);
  }
  double at(int r, int kk) const { return host[transposed ? std::size_t(kk) * ld + r : std::size_t(r) * ld + kk]; }
  ProductOperand operand() const {
    return transposed ? ProductOperand{dev.data(), 1, ld} : ProductOperand{dev.data(), ld, 1};
  }
};

struct Case {
  int m, n;
  std::vector<int> ks;  // one segment per entry
  bool a_t, b_t;
  bool bias, relu, mask, sums;
  bool pad = false;
};

}  // namespace

TEST(TileProduct, EveryLayoutSegmentAndEpilogueMatchesADoubleReference) {
  const std::vector<Case> cases = {
      {64, 32, {32}, false, false, false, false, false, false},  // one tile, one chunk
      {70, 45, {48}, false, false, true, true, false, false},    // ragged tiles, the trunk's first layer
      {33, 100, {5, 0, 77}, false, true, false, false, true, false},  // dX: dz · W, masked, three segments
      {51, 24, {37, 40, 9}, true, true, false, false, false, true},   // dW: dzᵀ · x over three parts, row sums
      {130, 9, {200}, true, false, true, false, true, true},
      // Leading dimensions of multiples of 4: staged four floats at a time, ragged k and rows
      // included (a vector part past the edge is zero).
      {64, 32, {32, 64}, false, false, true, true, false, false, true},
      {70, 45, {37, 0, 6}, false, true, false, false, true, true, true},
      {97, 41, {256}, true, false, false, false, true, true, true},
      {33, 100, {5, 77}, true, true, true, true, false, true, true},
  };
  // Unsplit, and split-K as fine as it goes (each chunk its own tile, the last adding them up);
  // every tile shape and stage count.
  for (const auto& [tile_rows, tile_cols, tile_stages] :
       std::vector<std::tuple<int, int, int>>{{64, 32, 3}, {32, 32, 3}, {32, 32, 4}, {32, 16, 3}, {32, 16, 4}})
  for (const int split_chunks : {0, 1})
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& cs = cases[ci];
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "case " << ci << ", tiles " << tile_rows << " × " << tile_cols << " in "
                                    << tile_stages << " stages, split_chunks " << split_chunks << ", seed " << seed);
    std::vector<Operand> as, bs;
    for (std::size_t s = 0; s < cs.ks.size(); ++s) {
      as.emplace_back(cs.m, cs.ks[s], cs.a_t, cs.pad, seed + 10 * s + 1);
      bs.emplace_back(cs.n, cs.ks[s], cs.b_t, cs.pad, seed + 10 * s + 2);
    }
    const int ld = cs.n + 3;  // columns past n must stay untouched
    const auto bias = zs::test::random_normal(cs.n, seed + 3);
    auto mask = zs::test::random_normal(std::size_t(cs.m) * ld, seed + 4);
    mask[0] = std::nanf("");  // a NaN activation keeps its gradient
    const auto bias_d = zs::test::to_device(bias), mask_d = zs::test::to_device(mask);
    zs::DeviceFloats out("zs::test::out", std::size_t(cs.m) * ld), sums("zs::test::sums", cs.m);
    Kokkos::deep_copy(out, 1234.5f);
    Kokkos::deep_copy(sums, std::nanf(""));

    ProductJob job;
    job.m = cs.m;
    job.n = cs.n;
    job.out = out.data();
    job.out_ld = ld;
    job.bias = cs.bias ? bias_d.data() : nullptr;
    job.relu = cs.relu;
    job.mask = cs.mask ? mask_d.data() : nullptr;
    job.mask_ld = ld;
    job.row_sums = cs.sums ? sums.data() : nullptr;
    std::vector<ProductSegment> segs;
    for (std::size_t s = 0; s < cs.ks.size(); ++s) {
      segs.push_back({as[s].operand(), bs[s].operand(), cs.ks[s]});
      // Padded operands take the four-at-a-time path; the odd ones (any width but 4's) the other.
      const bool aligned_a = cs.pad || (cs.a_t ? cs.m : cs.ks[s]) % 4 == 0;
      const bool aligned_b = cs.pad || (cs.b_t ? cs.n : cs.ks[s]) % 4 == 0;
      EXPECT_EQ(zs::stages_four_at_a_time(segs.back().a), aligned_a ? 1 : 0) << "segment " << s;
      EXPECT_EQ(zs::stages_four_at_a_time(segs.back().b), aligned_b ? 1 : 0) << "segment " << s;
    }
    zs::FusedBuilder b;
    b.phase();
    b.product(job, segs);
    zs::Stream stream;
    zs::FusedOptions o;
    o.split_chunks = split_chunks;
    o.tile_rows = tile_rows;
    o.tile_cols = tile_cols;
    o.tile_stages = tile_stages;
    const zs::FusedKernel k = b.build({}, 0, o);
    EXPECT_EQ(k.tile_rows(), tile_rows);
    EXPECT_EQ(k.tile_cols(), tile_cols);
    EXPECT_EQ(k.tile_stages(), tile_stages);
    if (split_chunks == 0) {
      EXPECT_EQ(k.tiles(0), (cs.m + tile_rows - 1) / tile_rows * ((cs.n + tile_cols - 1) / tile_cols));
    }
    int chunks = 0;
    for (int kk : cs.ks) chunks += (kk + 31) / 32;
    EXPECT_EQ(k.split_jobs(), split_chunks > 0 && chunks > 1 ? 1 : 0);
    for (int rep = 0; rep < 2; ++rep) k.enqueue(stream.exec());  // the arrival counts start again at 0
    stream.synchronize();
    const auto got = zs::test::to_host(out), got_sums = zs::test::to_host(sums);

    int bad = 0;
    for (int r = 0; r < cs.m; ++r) {
      double row_sum = 0, row_scale = 0;
      for (std::size_t s = 0; s < cs.ks.size(); ++s)
        for (int k = 0; k < cs.ks[s]; ++k) {
          row_sum += as[s].at(r, k);
          row_scale += std::abs(as[s].at(r, k));
        }
      if (cs.sums && !(std::abs(got_sums[r] - row_sum) <= 1e-5 * row_scale + 1e-6) && ++bad <= 5)
        ADD_FAILURE() << "row sum " << r << " = " << got_sums[r] << ", reference " << row_sum;
      for (int c = 0; c < ld; ++c) {
        const float g = got[std::size_t(r) * ld + c];
        if (c >= cs.n) {
          if (g != 1234.5f && ++bad <= 5) ADD_FAILURE() << "(" << r << ", " << c << ") past n was written: " << g;
          continue;
        }
        double ref = 0, scale = 0;
        for (std::size_t s = 0; s < cs.ks.size(); ++s)
          for (int k = 0; k < cs.ks[s]; ++k) {
            const double p = as[s].at(r, k) * bs[s].at(c, k);
            ref += p;
            scale += std::abs(p);
          }
        if (cs.bias) {
          ref += bias[c];
          scale += std::abs(bias[c]);
        }
        if (cs.relu && ref < 0) ref = 0;
        const float mk = mask[std::size_t(r) * ld + c];
        if (cs.mask && mk <= 0.f) ref = 0;  // NaN compares false: kept
        if (!(std::abs(g - ref) <= kRel * scale + 1e-5) && ++bad <= 5)
          ADD_FAILURE() << "C(" << r << ", " << c << ") = " << g << ", reference " << ref << ", allowed "
                        << kRel * scale + 1e-5;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(TileProduct, ChainedPhasesRunPersistentOrAsLaunchesWithTheSameBits) {
  // y1 = relu(x·W1ᵀ + b1), y2 = y1·W2ᵀ, y3 = relu(y2·W3ᵀ): each phase reads what the one before
  // wrote, across tiles (more tiles than a persistent launch has teams, so teams take several).
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int R = 200, S = 20, W1 = 96, W2 = 70, W3 = 33;
  const auto x = zs::test::to_device(zs::test::random_normal(std::size_t(R) * S, seed));
  const auto w1 = zs::test::to_device(zs::test::random_normal(std::size_t(W1) * S, seed + 1, 0.3f));
  const auto b1 = zs::test::to_device(zs::test::random_normal(W1, seed + 2));
  const auto w2 = zs::test::to_device(zs::test::random_normal(std::size_t(W2) * W1, seed + 3, 0.1f));
  const auto w3 = zs::test::to_device(zs::test::random_normal(std::size_t(W3) * W2, seed + 4, 0.1f));
  std::vector<std::vector<float>> results;
  std::vector<int> splits_of, shapes_of;  // shapes_of: 0, 1, 2 for 64 × 32, 32 × 32, 32 × 16
  for (const int split_chunks : {0, 1, 2})
  for (const int shape : {0, 1, 2, 3, 4})  // 64 × 32, 32 × 32, 32 × 16; 32 × 32 and 32 × 16 in 4 stages
  for (const auto mode : {zs::PhasedMode::launches, zs::PhasedMode::persistent}) {
    for (const int teams_per_sm : {1, 2}) {
      zs::DeviceFloats y1("zs::test::y1", std::size_t(R) * W1), y2("zs::test::y2", std::size_t(R) * W2),
          y3("zs::test::y3", std::size_t(R) * W3);
      zs::FusedBuilder b;
      ProductJob j;
      b.phase();
      j.m = R, j.n = W1, j.out = y1.data(), j.out_ld = W1, j.bias = b1.data(), j.relu = 1;
      b.product(j, {{{x.data(), S, 1}, {w1.data(), S, 1}, S}});
      b.phase();
      j = {};
      j.m = R, j.n = W2, j.out = y2.data(), j.out_ld = W2;
      b.product(j, {{{y1.data(), W1, 1}, {w2.data(), W1, 1}, W1}});
      b.phase();
      j = {};
      j.m = R, j.n = W3, j.out = y3.data(), j.out_ld = W3, j.relu = 1;
      b.product(j, {{{y2.data(), W2, 1}, {w3.data(), W2, 1}, W2}});
      zs::FusedOptions o;
      o.mode = mode;
      o.teams_per_sm = teams_per_sm;
      o.split_chunks = split_chunks;
      o.tile_rows = shape == 0 ? 64 : 32;
      o.tile_cols = shape == 2 || shape == 4 ? 16 : 32;
      o.tile_stages = shape >= 3 ? 4 : 3;
      const zs::FusedKernel k = b.build({}, 0, o);
      // k = 96 (3 chunks) and 70 (3): both split unless split_chunks is 0.
      EXPECT_EQ(k.split_jobs(), split_chunks == 0 ? 0 : 2);
      if (zs::kCanPersist && mode == zs::PhasedMode::persistent) {
        EXPECT_GE(k.teams(), 1);
        EXPECT_EQ(k.launches(), 1);
      } else {
        EXPECT_EQ(k.teams(), 0);
        EXPECT_EQ(k.launches(), 3);
      }
      zs::Stream stream;
      for (int rep = 0; rep < 3; ++rep) k.enqueue(stream.exec());  // replays reuse the barrier's state
      stream.synchronize();
      results.push_back(zs::test::to_host(y3));
      splits_of.push_back(split_chunks);
      shapes_of.push_back(shape);
    }
  }
  // The same bits within a split and tile shape (the modes, the teams). Unsplit, every element
  // sums its k in the same order whatever tile holds it: the same bits for both shapes too.
  // Across splits only the rounding moves.
  for (std::size_t i = 1; i < results.size(); ++i)
    if (splits_of[i] == splits_of[i - 1] && (shapes_of[i] == shapes_of[i - 1] || splits_of[i] == 0)) {
      EXPECT_TRUE(zs::test::same_bits(results[i - 1], results[i]))
          << i << ": split_chunks " << splits_of[i] << ", tile shapes " << shapes_of[i - 1] << " and " << shapes_of[i];
    }
  // And the chain's values against double loops.
  const auto hx = zs::test::to_host(x), hw1 = zs::test::to_host(w1), hb1 = zs::test::to_host(b1);
  const auto hw2 = zs::test::to_host(w2), hw3 = zs::test::to_host(w3);
  std::vector<double> y1(std::size_t(R) * W1), y2(std::size_t(R) * W2);
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < W1; ++o) {
      double s = hb1[o];
      for (int k = 0; k < S; ++k) s += double(hx[r * S + k]) * hw1[o * S + k];
      y1[r * W1 + o] = s < 0 ? 0 : s;
    }
    for (int o = 0; o < W2; ++o) {
      double s = 0;
      for (int k = 0; k < W1; ++k) s += y1[r * W1 + k] * hw2[o * W1 + k];
      y2[r * W2 + o] = s;
    }
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    double err = 0, norm = 0;
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < W3; ++o) {
        double s = 0;
        for (int k = 0; k < W2; ++k) s += y2[r * W2 + k] * hw3[o * W2 + k];
        s = s < 0 ? 0 : s;
        err += (results[i][r * W3 + o] - s) * (results[i][r * W3 + o] - s);
        norm += s * s;
      }
    EXPECT_LT(std::sqrt(err / norm), zs::WarpTile<zs::ExecSpace>::kRoundsToTf32 ? 3e-3 : 1e-5)
        << "split_chunks " << splits_of[i] << ", tile shape " << shapes_of[i];
  }
}

// FusedOptions::timeline: every tile of every phase stamped, in phase order, and the same bits
// as without it, a launch per phase and persistent.
TEST(TileProduct, TheTimelineStampsEveryTileAndChangesNoResult) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int R = 100, S = 40, W1 = 64, W2 = 50;
  const auto x = zs::test::to_device(zs::test::random_normal(std::size_t(R) * S, seed));
  const auto w1 = zs::test::to_device(zs::test::random_normal(std::size_t(W1) * S, seed + 1, 0.3f));
  const auto w2 = zs::test::to_device(zs::test::random_normal(std::size_t(W2) * W1, seed + 2, 0.1f));
  for (const auto mode : {zs::PhasedMode::launches, zs::PhasedMode::persistent}) {
    std::vector<std::vector<float>> results;
    for (const bool timeline : {false, true}) {
      SCOPED_TRACE(testing::Message() << (mode == zs::PhasedMode::persistent ? "persistent" : "launches")
                                      << (timeline ? ", timeline" : ""));
      zs::DeviceFloats y1("zs::test::y1", std::size_t(R) * W1), y2("zs::test::y2", std::size_t(R) * W2);
      zs::FusedBuilder b;
      ProductJob j;
      b.phase();
      j.m = R, j.n = W1, j.out = y1.data(), j.out_ld = W1, j.relu = 1;
      b.product(j, {{{x.data(), S, 1}, {w1.data(), S, 1}, S}});
      b.phase();
      j = {};
      j.m = R, j.n = W2, j.out = y2.data(), j.out_ld = W2;
      b.product(j, {{{y1.data(), W1, 1}, {w2.data(), W1, 1}, W1}});
      zs::FusedOptions o;
      o.mode = mode;
      o.timeline = timeline;
      const zs::FusedKernel k = b.build({}, 0, o);
      zs::Stream stream;
      for (int rep = 0; rep < 2; ++rep) k.enqueue(stream.exec());  // the second launch's stamps overwrite the first's
      stream.synchronize();
      results.push_back(zs::test::to_host(y2));
      const auto tiles = k.timeline();
      if (!timeline) {
        EXPECT_TRUE(tiles.empty());
        continue;
      }
      ASSERT_EQ(tiles.size(), static_cast<std::size_t>(k.tiles(0) + k.tiles(1)));
      std::uint64_t first_phase_ends = 0, parts = 0;
      for (std::size_t i = 0; i < tiles.size(); ++i) {
        const auto& t = tiles[i];
        const int phase = i < static_cast<std::size_t>(k.tiles(0)) ? 0 : 1;
        EXPECT_EQ(t.phase, phase) << "tile " << i;
        EXPECT_EQ(t.tile, phase == 0 ? static_cast<int>(i) : static_cast<int>(i) - k.tiles(0));
        // Each phase is one product job: its shape and its chunks of 32.
        EXPECT_EQ(t.kind, static_cast<int>(zs::kernels::FusedTileKind::product));
        EXPECT_EQ(t.job, phase);
        EXPECT_EQ(t.m, R);
        EXPECT_EQ(t.n, phase == 0 ? W1 : W2);
        EXPECT_EQ(t.chunks, phase == 0 ? (S + 31) / 32 : (W1 + 31) / 32);
        EXPECT_EQ(t.splits, 1);
        EXPECT_GT(t.begin_ns, 0u) << "tile " << i;
        EXPECT_GE(t.end_ns, t.begin_ns) << "tile " << i;
        EXPECT_LT(t.work_cycles, std::uint64_t{1} << 40) << "tile " << i;  // an end before its wait would wrap
        EXPECT_LT(t.wait_cycles, std::uint64_t{1} << 40) << "tile " << i;
        EXPECT_GE(t.sm, 0);
        // The product's parts (first chunk, chunk loop, epilogue) lie inside its work.
        EXPECT_LE(t.parts[0] + t.parts[1] + t.parts[2], t.work_cycles) << "tile " << i;
        parts += t.parts[0] + t.parts[1] + t.parts[2];
        if (phase == 0) first_phase_ends = std::max(first_phase_ends, t.end_ns);
        // Outside a graph the phases' launches (or the persistent launch's grid barrier) keep them
        // in order: phase 1's tiles read what phase 0's wrote.
        if (phase == 1) {
          EXPECT_GE(t.begin_ns, first_phase_ends) << "tile " << i;
        }
      }
      EXPECT_GT(parts, 0u) << "no product stamped its parts";
    }
    EXPECT_TRUE(zs::test::same_bits(results[0], results[1]));
  }
}

TEST(TileProduct, BadJobsAreClearErrors) {
  zs::FusedBuilder b;
  ProductJob j;
  j.m = 4, j.n = 4;
  EXPECT_NE(zs::test::error_of([&] { b.tiles(zs::kernels::FusedTileKind::dueling, 1); })
                .find("tiles added before the first phase()"),
            std::string::npos);
  b.phase();
  EXPECT_NE(zs::test::error_of([&] { b.product(j, {}); }).find("expected at least 1 × 1, an output and a segment"),
            std::string::npos);
  zs::DeviceFloats out("zs::test::out", 16);
  j.out = out.data();
  EXPECT_NE(zs::test::error_of([&] { b.product(j, {{{out.data(), 4, 4}, {out.data(), 4, 1}, 4}}); })
                .find("neither k- nor row-contiguous"),
            std::string::npos);
  // One layout a product: its chunk loop is compiled for it.
  EXPECT_NE(zs::test::error_of([&] {
              b.product(j, {{{out.data(), 4, 1}, {out.data(), 4, 1}, 4}, {{out.data(), 1, 4}, {out.data(), 4, 1}, 4}});
            }).find("segment 1 of a product has A row-contiguous and B k-contiguous; expected the layouts of segment 0 "
                    "(A k-contiguous, B k-contiguous)"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::FusedBuilder{}.build({}, 0, {}); }).find("no phases"), std::string::npos);
  zs::FusedOptions bad;
  bad.split_chunks = -1;
  EXPECT_NE(zs::test::error_of([&] { b.build({}, 0, bad); }).find("split_chunks = -1"), std::string::npos);
  bad.split_chunks = 2;
  bad.split_tiles = 0;
  EXPECT_NE(zs::test::error_of([&] { b.build({}, 0, bad); }).find("split_tiles = 0"), std::string::npos);
  bad = {};
  bad.dependents_early = 3;
  EXPECT_NE(zs::test::error_of([&] { b.build({}, 0, bad); }).find("dependents_early = 3; expected 0, 1 or 2"),
            std::string::npos);
  bad = {};
  bad.tile_rows = 48;
  EXPECT_NE(zs::test::error_of([&] { b.build({}, 0, bad); })
                .find("tiles of 48 × 32 in 3 stages (tile_rows × tile_cols, tile_stages); expected 64 × 32, 32 × 32 "
                      "or 32 × 16 in 3 stages, or 32 × 32 or 32 × 16 in 4"),
            std::string::npos);
  bad.tile_rows = 64;
  bad.tile_cols = 16;
  EXPECT_NE(zs::test::error_of([&] { b.build({}, 0, bad); }).find("tiles of 64 × 16"), std::string::npos);
  bad.tile_rows = 32;
  for (const int stages : {2, 5}) {
    bad.tile_stages = stages;
    EXPECT_NE(zs::test::error_of([&] { b.build({}, 0, bad); }).find("tiles of 32 × 16 in " + std::to_string(stages)),
              std::string::npos);
  }
  // A product in groups of rows (IQN's modulation backward) needs whole groups in every tile, a
  // scale, and a mask beside its group sums.
  for (const int kind : {0, 1}) {
    zs::FusedBuilder grouped;
    grouped.phase();
    ProductJob g = j;
    g.scale = out.data();
    g.group = kind == 0 ? 3 : 4;
    if (kind == 1) g.group_sums = out.data();
    grouped.product(g, {{{out.data(), 4, 1}, {out.data(), 4, 1}, 4}});
    const std::string want = kind == 0 ? "a product of [4, 4] in groups of 3 rows; expected groups that divide the "
                                         "tiles' 32 rows, a scale, and a mask beside the group sums"
                                       : "in groups of 4 rows without its mask; expected";
    EXPECT_NE(zs::test::error_of([&] { grouped.build({}, 0, {}); }).find(want), std::string::npos) << want;
  }
  // The items ride in the kernel's parameters, which have room for kFusedMaxItems.
  zs::FusedBuilder many;
  many.phase();
  for (int i = 0; i <= zs::kernels::kFusedMaxItems; ++i) many.tiles(zs::kernels::FusedTileKind::dueling, 1);
  EXPECT_NE(zs::test::error_of([&] { many.build({}, 0, {}); })
                .find(std::to_string(zs::kernels::kFusedMaxItems + 1) + " runs of tiles; the kernel's parameters hold at most " +
                      std::to_string(zs::kernels::kFusedMaxItems)),
            std::string::npos);
}
