// The dueling combine and log-softmax of every pass in one launch (kernels/c51_head.hpp's
// DuelingBatch), against a double reference, and split over several threads per branch: the
// same bits.
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

}  // namespace

TEST(DuelingBatch, EveryPassMatchesTheDoubleReferenceAndASplitChangesNoBit) {
  zs::Stream stream;
  for (const int atoms : {51, 7}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "atoms " << atoms << ", seed " << seed);
    const BranchTable t = BranchTable::of({5, 3, 1, 3});
    constexpr int R = 37;
    // As the trainer lays them out: one set's rows [0, R) and [R, 2R) are two passes (online on
    // s and on s′), with biases; a second set of R rows (the target) here without biases.
    HeadSet online = make_set(2 * R, t, atoms, seed), target = make_set(R, t, atoms, seed + 10);
    std::vector<const float*> biases;
    for (int k = 0; k < t.branches; ++k) biases.push_back(online.d_bb.data() + std::size_t(t.cum(k)) * atoms);
    std::vector<DuelingEntry> entries;
    for (int pass = 0; pass < 2; ++pass)
      entries.push_back({online.d_value.data(), online.d_out.data(), online.d_logp.data(), 2 * R, pass * R, R,
                         online.d_vb.data(), 0});
    entries.push_back({target.d_value.data(), target.d_out.data(), target.d_logp.data(), R, 0, R, nullptr, -1});

    std::vector<std::vector<float>> first;
    for (const int split : {1, 2, 5, 0}) {
      SCOPED_TRACE(testing::Message() << "split " << split);
      Kokkos::deep_copy(online.d_logp, std::nanf(""));
      Kokkos::deep_copy(target.d_logp, std::nanf(""));
      zs::kernels::DuelingLaunch<zs::ExecSpace> launch(entries, biases, t, atoms, split);
      launch(stream.exec());
      stream.synchronize();
      const std::vector<std::vector<float>> got{download(online.d_logp), download(target.d_logp)};
      if (first.empty()) {
        double worst = 0;
        for (int set = 0; set < 2; ++set) {
          const HeadSet& s = set == 0 ? online : target;
          for (int r = 0; r < s.rows; ++r)
            for (int k = 0; k < t.branches; ++k)
              for (int a = 0; a < t.size(k); ++a) {
                const auto ref = reference(s, t, atoms, r, k, a, set == 0);
                for (int j = 0; j < atoms; ++j) {
                  const double g = got[set][(std::size_t(r) * t.actions + t.cum(k) + a) * atoms + j];
                  ASSERT_TRUE(std::isfinite(g)) << "set " << set << " row " << r << " branch " << k << " action " << a;
                  worst = std::max(worst, std::abs(g - ref[j]) / (1.0 + std::abs(ref[j])));
                }
              }
        }
        EXPECT_LT(worst, 1e-5);
        first = got;
      } else {
        EXPECT_TRUE(zs::test::same_bits(got[0], first[0]));
        EXPECT_TRUE(zs::test::same_bits(got[1], first[1]));
      }
      if (split > 0) {
        EXPECT_EQ(launch.split(), split);
      }
    }
  }
}

TEST(DuelingBatch, ASplitWiderThanTheWidestBranchIsRefused) {
  const BranchTable t = BranchTable::of({5, 3, 3});
  zs::DeviceFloats buf("buf", 3 * 11 * 4);
  std::vector<DuelingEntry> entries{{buf.data(), buf.data(), buf.data(), 3, 0, 3, nullptr, 0}};
  const std::vector<const float*> biases(3, buf.data());
  for (const int split : {-1, 6}) {
    try {
      zs::kernels::DuelingLaunch<zs::ExecSpace> launch(entries, biases, t, 4, split);
      FAIL() << "split " << split << " was accepted";
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find("split = " + std::to_string(split) + "; expected 0 (automatic) to 5"),
                std::string::npos)
          << e.what();
    }
  }
}
