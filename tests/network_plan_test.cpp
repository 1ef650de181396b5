// The batched pieces of the step's network (network_plan.hpp): GemmBatch, the bias/ReLU and
// column-sum table kernels against naive double loops, and the plans against Network's
// per-layer forward and backward (themselves checked against the double reference and finite
// differences in network_test.cpp), on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/gemm.hpp"
#include "backends/graph.hpp"
#include "backends/side_lane.hpp"
#include "kernels/dense_batch.hpp"
#include "nn/network_plan.hpp"
#include "test_util.hpp"

namespace {

using zs::test::random_normal;
using zs::test::to_device;
using zs::test::to_host;

// Largest |a − b| over the largest |b| (a relative error that zero entries do not inflate).
double max_rel(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 1e-30;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace

namespace {

// `count` random products of one shape through one GemmBatch, each against a naive double loop,
// with every operand's rows stored `pad_a`, `pad_b`, `pad_c` floats wider than their width (0:
// dense, without with_ld); where C is padded, its padding must keep what it held.
void expect_batch_matches_reference(zs::Trans ta, zs::Trans tb, int m, int n, int k, int count, int pad_a, int pad_b,
                                    int pad_c, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "m " << m << " × " << count << ", ta " << int(ta) << " tb " << int(tb)
                                  << ", padding " << pad_a << " / " << pad_b << " / " << pad_c);
  zs::Stream stream;
  zs::Gemm gemm(stream, zs::Precision::fp32);
  // A stored [m, k] or, transposed, [k, m]; B [k, n] or [n, k]; each row ld floats apart.
  const int ar = ta == zs::Trans::N ? m : k, br = tb == zs::Trans::N ? k : n;
  const int lda = (ta == zs::Trans::N ? k : m) + pad_a, ldb = (tb == zs::Trans::N ? n : k) + pad_b, ldc = n + pad_c;
  const float alpha = 0.75f, beta = -0.5f;
  std::vector<zs::DeviceFloats> a, b, c;
  std::vector<std::vector<float>> ha, hb, hc;
  std::vector<zs::GemmEntry> entries;
  for (int e = 0; e < count; ++e) {
    ha.push_back(random_normal(std::size_t(ar) * lda, seed + 10 * e));
    hb.push_back(random_normal(std::size_t(br) * ldb, seed + 10 * e + 1));
    hc.push_back(random_normal(std::size_t(m) * ldc, seed + 10 * e + 2));
    a.push_back(to_device(ha.back()));
    b.push_back(to_device(hb.back()));
    c.push_back(to_device(hc.back()));
    entries.push_back({a.back().data(), b.back().data(), c.back().data()});
  }
  zs::GemmBatch batch(ta, tb, m, n, k, alpha, beta, entries);
  if (pad_a + pad_b + pad_c > 0) batch.with_ld(lda, ldb, ldc);
  gemm(batch);
  stream.synchronize();
  for (int e = 0; e < count; ++e) {
    const auto got = to_host(c[e]);
    std::vector<float> dense(std::size_t(m) * n);
    std::vector<double> ref(dense.size());
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int p = 0; p < k; ++p)
          s += double(ta == zs::Trans::N ? ha[e][i * lda + p] : ha[e][p * lda + i]) *
               double(tb == zs::Trans::N ? hb[e][p * ldb + j] : hb[e][j * ldb + p]);
        ref[i * n + j] = alpha * s + beta * double(hc[e][i * ldc + j]);
        dense[i * n + j] = got[i * ldc + j];
      }
      for (int j = n; j < ldc; ++j)
        EXPECT_EQ(got[i * ldc + j], hc[e][i * ldc + j]) << "C's padding of row " << i << " was written";
    }
    EXPECT_LT(max_rel(dense, ref), 1e-5) << "entry " << e;
  }
}

}  // namespace

TEST(GemmBatch, EveryProductMatchesTheNaiveReferenceForEveryTranspose) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  // m = 70 with one or three products: the host cuts products into row bands of C.
  for (const auto& [m, count] : {std::pair{13, 3}, std::pair{70, 1}, std::pair{70, 3}})
    for (zs::Trans ta : {zs::Trans::N, zs::Trans::T})
      for (zs::Trans tb : {zs::Trans::N, zs::Trans::T})
        expect_batch_matches_reference(ta, tb, m, 37, 70, count, 0, 0, 0, seed);
  EXPECT_NE(zs::test::error_of([] { zs::GemmBatch(zs::Trans::N, zs::Trans::N, 2, 2, 2, 1.f, 0.f, {}); })
                .find("0 products"),
            std::string::npos);
}

// Operands whose rows are stored wider than their width (GemmBatch::with_ld: rows padded so
// that each starts on 16 bytes, as the step's odd output widths would be): every product
// matches the naive reference on the dense part, and C's padding keeps what it held.
TEST(GemmBatch, RowsStoredWiderThanTheirWidth) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (zs::Trans ta : {zs::Trans::N, zs::Trans::T})
    for (zs::Trans tb : {zs::Trans::N, zs::Trans::T})
      expect_batch_matches_reference(ta, tb, 21, 51, 13, 3, 3, 1, 1, seed);
  EXPECT_NE(zs::test::error_of([&] {
              zs::DeviceFloats x("x", 64);
              zs::GemmBatch(zs::Trans::N, zs::Trans::N, 4, 4, 4, 1.f, 0.f, {{x.data(), x.data(), x.data()}})
                  .with_ld(3, 0, 0);
            }).find("at least the dense widths 4"),
            std::string::npos);
}

TEST(DenseBatch, BiasActAndColumnSumsMatchNaiveLoops) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  const auto& exec = stream.exec();
  const int rows = 37;
  // 300 columns: more than a warp's lanes times the columns each loads at once.
  const std::vector<int> widths{70, 5, 32, 33, 300};
  // Bias + ReLU (even entries) and bias only (odd), entries of different widths in one launch,
  // each lane loading 1, 3 or 8 columns before it stores.
  for (int in_flight : {1, 3, zs::kernels::kBiasColsInFlight}) {
    SCOPED_TRACE(testing::Message() << "cols_in_flight " << in_flight);
    std::vector<zs::DeviceFloats> y, b;
    std::vector<std::vector<float>> hy, hb;
    std::vector<zs::kernels::BiasActEntry> ba;
    for (std::size_t e = 0; e < widths.size(); ++e) {
      hy.push_back(random_normal(std::size_t(rows) * widths[e], seed + e));
      hb.push_back(random_normal(widths[e], seed + 100 + e));
      y.push_back(to_device(hy.back()));
      b.push_back(to_device(hb.back()));
      ba.push_back({y.back().data(), b.back().data(), widths[e], e % 2 == 0});
    }
    zs::kernels::BiasActLaunch<zs::ExecSpace>(ba, rows, in_flight)(exec);
    stream.synchronize();
    for (std::size_t e = 0; e < widths.size(); ++e) {
      const auto out = to_host(y[e]);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < widths[e]; ++c) {
          const double v = double(hy[e][r * widths[e] + c]) + hb[e][c];
          ASSERT_FLOAT_EQ(out[r * widths[e] + c], float(e % 2 == 0 ? std::max(v, 0.0) : v)) << e << " " << r << " " << c;
        }
    }
  }

  // Column sums: plain (entry 0), masked in place (1), three parts summed and masked into dz (2),
  // and a block of 33 columns of wider matrices (3: rows w floats apart, its mask from other columns);
  // in blocks of the automatic size, of 8 rows (the cross-team path) and of all 201 rows (one
  // team, each warp down a long run of rows), each launched twice: the second launch shows the
  // per-chunk counters were reset.
  const int w = 70, parts = 3, crows = 201;
  const auto g0 = random_normal(std::size_t(crows) * w, seed + 200);
  const auto g1 = random_normal(std::size_t(crows) * w, seed + 201);
  const auto gp = random_normal(std::size_t(parts) * crows * w, seed + 202);
  const auto act = random_normal(std::size_t(crows) * w, seed + 203);
  const int bw = 33, g_col = 10, a_col = 5;
  std::vector<double> r0(w), r1(w), r2(w), r3(bw), z1(std::size_t(crows) * w), z2(std::size_t(crows) * w),
      z3(std::size_t(crows) * w, 0.0);
  for (int r = 0; r < crows; ++r)
    for (int c = 0; c < bw; ++c) {
      const std::size_t i = std::size_t(r) * w + g_col + c;
      z3[i] = act[std::size_t(r) * w + a_col + c] > 0.f ? g0[i] : 0.0;
      r3[c] += z3[i];
    }
  for (int r = 0; r < crows; ++r)
    for (int c = 0; c < w; ++c) {
      const std::size_t i = std::size_t(r) * w + c;
      const bool on = act[i] > 0.f;
      double sum = 0;
      for (int p = 0; p < parts; ++p) sum += gp[p * std::size_t(crows) * w + i];
      r0[c] += g0[i];
      z1[i] = on ? g1[i] : 0.0;
      r1[c] += z1[i];
      z2[i] = on ? sum : 0.0;
      r2[c] += z2[i];
    }
  for (int block_rows : {0, 8, crows}) {
    SCOPED_TRACE(testing::Message() << "block_rows " << block_rows);
    auto d0 = to_device(g0), d1 = to_device(g1), dp = to_device(gp), da = to_device(act);
    zs::DeviceFloats dz("dz", std::size_t(crows) * w), dz3("dz3", std::size_t(crows) * w), db0("db0", w),
        db1("db1", w), db2("db2", w), db3("db3", bw);
    const zs::kernels::ColumnSumLaunch<zs::ExecSpace> sums(
        {{d0.data(), 0, 1, nullptr, nullptr, db0.data(), w},
         {d1.data(), 0, 1, da.data(), d1.data(), db1.data(), w},
         {dp.data(), std::int64_t(crows) * w, parts, da.data(), dz.data(), db2.data(), w},
         {d0.data() + g_col, 0, 1, da.data() + a_col, dz3.data() + g_col, db3.data(), bw, w, w}},
        crows, block_rows);
    for (int launch = 0; launch < 2; ++launch) {
      sums(exec);  // the in-place mask is idempotent, so a second launch must give the same
      stream.synchronize();
      EXPECT_LT(max_rel(to_host(db0), r0), 1e-5);
      EXPECT_LT(max_rel(to_host(db1), r1), 1e-5);
      EXPECT_LT(max_rel(to_host(db2), r2), 1e-5);
      EXPECT_LT(max_rel(to_host(d1), z1), 1e-6);
      EXPECT_LT(max_rel(to_host(dz), z2), 1e-6);
      EXPECT_LT(max_rel(to_host(db3), r3), 1e-5);
      EXPECT_TRUE(zs::test::same_bits(to_host(dz3), std::vector<float>(z3.begin(), z3.end())))
          << "the block's masked gradient, and nothing written outside its columns";
    }
  }
  EXPECT_GT(*std::max_element(r2.begin(), r2.end()), 0.1) << "the test must not sum zeros alone";
  EXPECT_NE(zs::test::error_of([&] {
              zs::DeviceFloats x("x", 4);
              zs::kernels::BiasActLaunch<zs::ExecSpace>({{x.data(), x.data(), 4, 1}}, 1, 9);
            }).find("cols_in_flight = 9; expected 1 to 8"),
            std::string::npos);
}

// Many buffers in one launch: entries shorter, as long as and longer than a team's chunk, each
// copied whole, and not a float past its count (the destination's tail keeps its NaN).
TEST(DenseBatch, CopyLaunchCopiesEachEntryAndNothingPast) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  zs::Stream stream;
  const std::vector<int> counts{1, zs::kernels::kCopyChunk, zs::kernels::kCopyChunk + 3, 3 * zs::kernels::kCopyChunk - 5};
  std::vector<zs::DeviceFloats> src, dst;
  std::vector<zs::kernels::CopyEntry> entries;
  std::vector<std::vector<float>> want;
  for (std::size_t e = 0; e < counts.size(); ++e) {
    want.push_back(random_normal(counts[e], seed + e));
    src.emplace_back("src", counts[e]);
    dst.emplace_back("dst", counts[e] + 7);
    zs::upload(src.back(), want.back());
    Kokkos::deep_copy(dst.back(), std::numeric_limits<float>::quiet_NaN());
    entries.push_back({src.back().data(), dst.back().data(), counts[e]});
  }
  const zs::kernels::CopyLaunch<zs::ExecSpace> copy(entries);
  copy(stream.exec());
  stream.synchronize();
  for (std::size_t e = 0; e < counts.size(); ++e) {
    const auto got = to_host(dst[e]);
    EXPECT_TRUE(zs::test::same_bits(std::vector<float>(got.begin(), got.begin() + counts[e]), want[e])) << "entry " << e;
    for (std::size_t i = counts[e]; i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << "entry " << e << ", float " << i;
  }
  EXPECT_NE(zs::test::error_of([&] { zs::kernels::CopyLaunch<zs::ExecSpace>({{src[0].data(), dst[0].data(), 0}}); })
                .find("entry 0 has a null source or destination, or 0 floats"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::kernels::CopyLaunch<zs::ExecSpace>(std::vector<zs::kernels::CopyEntry>{}); }).find("0 entries"), std::string::npos);
}

namespace {

zs::Config plan_config(std::uint64_t seed) {
  // Three trunk layers and branches of repeated widths: several products per GEMM batch.
  return zs::Config::from_json({{"state_dim", 7}, {"trunk", {33, 20, 24}}, {"head_hidden", 16},
                                {"branches", {4, 2, 4, 3}}, {"atoms", 5}, {"v_min", -2}, {"v_max", 2},
                                {"seed", seed}, {"precision", "fp32"}});
}

void fill(const zs::DeviceFloats& d, std::uint64_t seed, float scale) {
  const auto h = random_normal(d.extent(0), seed, scale);
  Kokkos::deep_copy(d, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()));
}

// What the plan tests start from: the plan config's network with random online and target
// parameters, and 2B random states (s, then s′) in one buffer.
struct PlanSetup {
  PlanSetup(std::uint64_t seed, int batch)
      : c(plan_config(seed)),
        B(batch),
        layout(c),
        gemm(stream, zs::Precision::fp32),
        side(stream, zs::Precision::fp32),
        net(c, layout),
        online(layout, "online"),
        target(layout, "target"),
        states("states", std::size_t(2) * batch * c.state_dim),
        s(states.data(), batch, c.state_dim),
        s2(states.data() + std::size_t(batch) * c.state_dim, batch, c.state_dim) {
    fill(online.flat(), seed + 1, 0.4f);
    fill(target.flat(), seed + 2, 0.4f);
    fill(states, seed + 3, 1.f);
  }
  const zs::Config c;
  const int B;
  const zs::ParamLayout layout;
  zs::Stream stream;
  zs::Gemm gemm;
  const zs::SideLane side;  // the plans' second stream (CUDA), for the tests that compare with and without
  const zs::Network net;
  zs::ParamBuffer online, target;
  zs::DeviceFloats states;
  const zs::ConstMatrixView s, s2;
};

// Every tensor of a plan's gradient against the reference's, each on its own scale (a plan writes
// every tensor), and none of the reference's all zeros.
void expect_each_tensor_near(const zs::ParamLayout& layout, const zs::ParamBuffer& grad, const zs::ParamBuffer& ref,
                             const std::string& how) {
  const auto got = to_host(grad.flat()), want = to_host(ref.flat());
  for (const auto& t : layout.tensors()) {
    std::vector<float> a(got.begin() + t.offset, got.begin() + t.offset + t.size());
    std::vector<double> b(want.begin() + t.offset, want.begin() + t.offset + t.size());
    EXPECT_LT(max_rel(a, b), 1e-5) << how << ", " << t.name;
    double largest = 0;
    for (double v : b) largest = std::max(largest, std::abs(v));
    EXPECT_GT(largest, 0.0) << how << ", " << t.name << ": a gradient of zeros tests nothing";
  }
}

// Head h's hidden activations [rows, head_hidden], per head or stacked alike.
std::vector<float> head_hidden(const zs::Activations& a, int h, int H) {
  if (a.stacked == 0) return to_host(h == 0 ? a.value_hidden : a.branch_hidden[h - 1]);
  const auto all = to_host(a.heads_hidden);
  std::vector<float> out;
  for (int r = 0; r < a.rows; ++r)
    for (int j = 0; j < H; ++j) out.push_back(all[(std::size_t(r) * a.stacked + h) * H + j]);
  return out;
}

// A plan's forward against the same plan with a side lane (the same bits) and the plain plan's
// (to rounding): log-probabilities and every head's hidden activations; and the ReLU cut
// something in the last head's and left something.
void expect_forward_matches(const zs::Activations& a, const zs::Activations& a_side, const zs::Activations& ref,
                            int heads, int H, const std::string& how) {
  EXPECT_TRUE(zs::test::same_bits(to_host(a.logp), to_host(a_side.logp))) << how;
  EXPECT_LT(max_rel(to_host(a.logp), as_double(to_host(ref.logp))), 1e-5) << how;
  for (int h = 0; h < heads; ++h) {
    const auto got = head_hidden(a, h, H);
    EXPECT_TRUE(zs::test::same_bits(got, head_hidden(a_side, h, H))) << how << ", head " << h;
    EXPECT_LT(max_rel(got, as_double(head_hidden(ref, h, H))), 1e-5) << how << ", head " << h;
  }
  const auto relu = head_hidden(a, heads - 1, H);
  EXPECT_GT(std::count(relu.begin(), relu.end(), 0.f), 0) << how << ": the ReLU must have cut something";
  EXPECT_GT(*std::max_element(relu.begin(), relu.end()), 0.f) << how;
}

// Runs `run` directly and checks it, then captures it into a graph and replays it twice with new
// states and online and target parameters (and whatever `refill` changes), checking each replay:
// a replay that read stale data, or a step a capture refused, shows.
void run_then_replay(PlanSetup& x, std::uint64_t seed, const std::function<void()>& run,
                     const std::function<void(const std::string&)>& compare,
                     const std::function<void(int)>& refill = {}) {
  run();
  compare("enqueued directly");
  zs::Graph graph;
  graph.capture(x.stream, run);
  for (int r = 0; r < 2; ++r) {
    fill(x.states, seed + 10 + r, 1.f);
    fill(x.online.flat(), seed + 20 + r, 0.4f);
    fill(x.target.flat(), seed + 30 + r, 0.4f);
    if (refill) refill(r);
    x.stream.synchronize();
    graph.replay(x.stream);
    compare("replay " + std::to_string(r));
  }
}

}  // namespace

TEST(NetworkPlan, ForwardAndBackwardEqualNetworksPerLayerPasses) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  PlanSetup x(seed, 19);
  const auto& [c, B, layout, net, s, s2] = std::tie(x.c, x.B, x.layout, x.net, x.s, x.s2);
  zs::Stream& stream = x.stream;
  zs::ParamBuffer &online = x.online, &target = x.target;
  const auto& exec = stream.exec();
  const zs::Gemm& gemm = x.gemm;
  zs::ParamBuffer grad(layout, "grad"), grad_ref(layout, "gref");
  const zs::ConstMatrixView all(x.states.data(), 2 * B, c.state_dim);

  zs::Activations on(c, 2 * B), tg(c, B), on_ref(c, 2 * B), tg_ref(c, B);
  const zs::ForwardPlan fwd(net, {{&online, s, &on, 0}, {&online, s2, &on, B}, {&target, s2, &tg, 0}});
  fwd.enqueue(exec, gemm);
  net.forward(exec, gemm, online, all, on_ref);
  net.forward(exec, gemm, target, s2, tg_ref);
  stream.synchronize();
  EXPECT_LT(max_rel(to_host(on.logp), as_double(to_host(on_ref.logp))), 1e-5);
  EXPECT_LT(max_rel(to_host(tg.logp), as_double(to_host(tg_ref.logp))), 1e-5);
  EXPECT_LT(max_rel(to_host(on.trunk.back()), as_double(to_host(on_ref.trunk.back()))), 1e-5);
  EXPECT_LT(max_rel(to_host(tg.branch_hidden[3]), as_double(to_host(tg_ref.branch_hidden[3]))), 1e-5);

  zs::Gradients g(c, B), g_ref(c, B);
  for (auto* grads : {&g, &g_ref}) {
    fill(grads->d_value_out, seed + 4, 1.f);
    fill(grads->d_branch_out, seed + 5, 1.f);
  }
  const zs::BackwardPlan bwd(net, online, s, on_ref, g, grad);
  bwd.enqueue(exec, gemm);
  net.backward(exec, gemm, online, s, on_ref, g_ref, grad_ref);
  stream.synchronize();
  expect_each_tensor_near(layout, grad, grad_ref, "per-head plan");
  // Output widths 5 (value), 20, 10, 15 (branches of 4, 2, 4, 3 actions): 4 GEMM batches.
  // Forward: 3 trunk layers × 2 + hidden 2 + 4 output batches + one dueling launch for all
  // passes, which adds the output biases.
  EXPECT_EQ(fwd.launches(), 3 * 2 + 2 + 4 + 1);
  // Backward: 2 × 4 output batches + bias sums + hidden 2 + trunk 3 × 3 − 1.
  EXPECT_EQ(bwd.launches(), 2 * 4 + 1 + 2 + 3 * 3 - 1);

}

TEST(NetworkPlan, PassesThatDoNotFitAreRefused) {
  const auto c = plan_config(1);
  const zs::ParamLayout layout(c);
  const zs::Network net(c, layout);
  zs::ParamBuffer online(layout, "online");
  zs::DeviceFloats states("states", std::size_t(8) * c.state_dim);
  zs::Activations acts(c, 4);
  const zs::ConstMatrixView four(states.data(), 4, c.state_dim), eight(states.data(), 8, c.state_dim);
  EXPECT_NE(zs::test::error_of([&] { zs::ForwardPlan(net, {{&online, four, &acts, 2}}); }).find("rows 2..6"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::ForwardPlan(net, {}); }).find("0 passes"), std::string::npos);
  const zs::ConstMatrixView narrow(states.data(), 4, c.state_dim - 1);
  EXPECT_NE(zs::test::error_of([&] { zs::ForwardPlan(net, {{&online, narrow, &acts, 0}}); }).find("expected [4, 7]"),
            std::string::npos);
  (void)eight;
}

// With a side lane the weight gradients and every other output width run on a second stream
// (CUDA), forked and joined by events. Each product computes exactly what it computed on the
// main stream, so the results are the same bits, enqueued directly and replayed from a captured
// graph: a missing fork would read half-written inputs, a missing join would race the next
// replay, and a side never joined fails the capture.
TEST(NetworkPlan, ASideLaneChangesNoBitDirectlyOrInAGraph) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  PlanSetup x(seed, 23);
  const int B = x.B;
  const auto& exec = x.stream.exec();
  const zs::SideLane& side = x.side;
  zs::ParamBuffer grad(x.layout, "grad"), grad_side(x.layout, "gside");
  zs::Activations on(x.c, 2 * B), tg(x.c, B), on_side(x.c, 2 * B), tg_side(x.c, B);
  const zs::ForwardPlan fwd(x.net, {{&x.online, x.s, &on, 0}, {&x.online, x.s2, &on, B}, {&x.target, x.s2, &tg, 0}});
  const zs::ForwardPlan fwd_side(
      x.net, {{&x.online, x.s, &on_side, 0}, {&x.online, x.s2, &on_side, B}, {&x.target, x.s2, &tg_side, 0}});
  zs::Gradients g(x.c, B), g_side(x.c, B);
  const zs::BackwardPlan bwd(x.net, x.online, x.s, on, g, grad);
  const zs::BackwardPlan bwd_side(x.net, x.online, x.s, on_side, g_side, grad_side);
  // Output widths 5, 20, 10, 15: two of the four forward output batches go to the side; so do
  // the four output and the one hidden weight-gradient batches and the 3 trunk layers'.
  EXPECT_EQ(fwd_side.side_launches(), 2);
  EXPECT_EQ(bwd_side.side_launches(), 4 + 1 + 3);

  auto compare = [&](const char* how) {
    x.stream.synchronize();
    EXPECT_TRUE(zs::test::same_bits(to_host(on.logp), to_host(on_side.logp))) << how;
    EXPECT_TRUE(zs::test::same_bits(to_host(tg.logp), to_host(tg_side.logp))) << how;
    EXPECT_TRUE(zs::test::same_bits(to_host(grad.flat()), to_host(grad_side.flat()))) << how;
    EXPECT_TRUE(zs::test::same_bits(to_host(g.d_trunk[0]), to_host(g_side.d_trunk[0]))) << how;
  };
  auto plain = [&] {
    fwd.enqueue(exec, x.gemm);
    bwd.enqueue(exec, x.gemm);
  };
  auto beside = [&] {
    fwd_side.enqueue(exec, x.gemm, &side);
    bwd_side.enqueue(exec, x.gemm, &side);
  };
  for (auto* grads : {&g, &g_side}) {
    fill(grads->d_value_out, seed + 4, 1.f);
    fill(grads->d_branch_out, seed + 5, 1.f);
  }
  plain();
  beside();
  compare("enqueued directly");

  // New inputs each replay, so a replay that read stale data would differ.
  zs::Graph with_side, without;
  with_side.capture(x.stream, beside);
  without.capture(x.stream, plain);
  for (int r = 0; r < 3; ++r) {
    fill(x.states, seed + 10 + r, 1.f);
    fill(x.online.flat(), seed + 20 + r, 0.4f);
    for (auto* grads : {&g, &g_side}) fill(grads->d_branch_out, seed + 30 + r, 1.f);
    x.stream.synchronize();
    without.replay(x.stream);
    with_side.replay(x.stream);
    compare("replayed from a graph");
  }
}

// The backward's heads as one stacked layer (stacked_heads): ∂loss/∂hidden side by side in one
// [B, heads·H] buffer, one product for every hidden weight gradient (copied out to each head's),
// one for ∂loss/∂features over every head's units, from a stacked copy of the hidden weights.
// Every gradient tensor equals Network::backward's to rounding, with and without a side lane the
// same bits, and replays of a captured graph with new parameters, states and output gradients
// still match the reference (a stale stacked copy of the weights would not).
TEST(NetworkPlan, StackedHeadsMatchThePerHeadBackward) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  PlanSetup x(seed, 17);
  const int B = x.B;
  const auto& exec = x.stream.exec();
  const zs::SideLane& side = x.side;
  zs::ParamBuffer grad(x.layout, "grad"), grad_side(x.layout, "gside"), grad_ref(x.layout, "gref");
  zs::Activations on(x.c, B);
  zs::Gradients g(x.c, B), g_side(x.c, B), g_ref(x.c, B);
  const zs::BackwardPlan plain(x.net, x.online, x.s, on, g_ref, grad_ref);
  const zs::BackwardPlan stacked(x.net, x.online, x.s, on, g, grad, zs::BackwardShape{true});
  const zs::BackwardPlan stacked_side(x.net, x.online, x.s, on, g_side, grad_side, zs::BackwardShape{true});
  // Plus the weights' stacked copy and the weight gradients' copy-out; the hidden layers' two
  // batches become two products. On the side: the four output batches, the stacked weight
  // gradient and its copy-out, the trunk's three.
  EXPECT_EQ(stacked.launches(), plain.launches() + 2);
  EXPECT_EQ(stacked_side.side_launches(), 4 + 2 + 3);

  auto run = [&] {
    x.net.forward(exec, x.gemm, x.online, x.s, on);
    plain.enqueue(exec, x.gemm);
    stacked.enqueue(exec, x.gemm);
    stacked_side.enqueue(exec, x.gemm, &side);
  };
  auto compare = [&](const std::string& how) {
    x.stream.synchronize();
    EXPECT_TRUE(zs::test::same_bits(to_host(grad.flat()), to_host(grad_side.flat()))) << how;
    EXPECT_TRUE(zs::test::same_bits(to_host(g.d_trunk[0]), to_host(g_side.d_trunk[0]))) << how;
    expect_each_tensor_near(x.layout, grad, grad_ref, how);
    EXPECT_LT(max_rel(to_host(g.d_trunk[0]), as_double(to_host(g_ref.d_trunk[0]))), 1e-5) << how;
  };
  auto fill_out = [&](std::uint64_t s) {
    for (auto* grads : {&g, &g_side, &g_ref}) {
      fill(grads->d_value_out, s, 1.f);
      fill(grads->d_branch_out, s + 1, 1.f);
    }
  };
  fill_out(seed + 4);
  run_then_replay(x, seed, run, compare, [&](int r) { fill_out(seed + 40 + 2 * r); });
  EXPECT_NE(zs::test::error_of([&] {
              zs::DeviceFloats d("d", 8);
              zs::kernels::ColumnSumLaunch<zs::ExecSpace>({{d.data(), 0, 1, nullptr, nullptr, d.data(), 4, 3, 0}}, 2);
            }).find("rows 3 and activation rows 0 floats apart for 4 columns"),
            std::string::npos);
}

// The forward's heads as one stacked layer (ForwardShape::stacked_heads): a product per run of
// passes for every head into stacked activations, from a stacked copy of the hidden weights and
// biases. The same log-probabilities and hidden activations as the plain plan to rounding, the
// same bits with and without a side lane, a backward from the stacked activations (per head and
// stacked) equal to the one from the plain plan's to rounding, and graph replays with new
// parameters that still match (a stale stacked copy would not). Mixed shapes are refused.
TEST(NetworkPlan, StackedForwardMatchesThePlainPlan) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  PlanSetup x(seed, 15);
  const int B = x.B, H = x.c.head_hidden, heads = 1 + static_cast<int>(x.c.branches.size());
  const auto& exec = x.stream.exec();
  zs::Activations on(x.c, 2 * B), tg(x.c, B), on_side(x.c, 2 * B), tg_side(x.c, B), on_ref(x.c, 2 * B),
      tg_ref(x.c, B);
  for (auto* a : {&on, &tg, &on_side, &tg_side}) a->stack_heads(x.c);
  EXPECT_EQ(on.stacked, heads);
  EXPECT_EQ(on.value_hidden.size(), 0u);
  const zs::ForwardShape shape{true, false, true, true};
  const zs::ForwardPlan fused(x.net, {{&x.online, x.s, &on, 0}, {&x.online, x.s2, &on, B}, {&x.target, x.s2, &tg, 0}},
                              shape);
  const zs::ForwardPlan fused_side(
      x.net, {{&x.online, x.s, &on_side, 0}, {&x.online, x.s2, &on_side, B}, {&x.target, x.s2, &tg_side, 0}}, shape);
  const zs::ForwardPlan plain(
      x.net, {{&x.online, x.s, &on_ref, 0}, {&x.online, x.s2, &on_ref, B}, {&x.target, x.s2, &tg_ref, 0}});
  zs::ParamBuffer grad(x.layout, "grad"), grad_stacked(x.layout, "gstacked"), grad_ref(x.layout, "gref");
  zs::Gradients g(x.c, B), g_stacked(x.c, B), g_ref(x.c, B);
  const zs::BackwardPlan bwd(x.net, x.online, x.s, on, g, grad);
  const zs::BackwardPlan bwd_stacked(x.net, x.online, x.s, on, g_stacked, grad_stacked, zs::BackwardShape{true});
  const zs::BackwardPlan bwd_ref(x.net, x.online, x.s, on_ref, g_ref, grad_ref);
  // The stacked backward reading the forward's stacked copy of the online hidden weights.
  zs::ParamBuffer grad_shared(x.layout, "gshared");
  zs::Gradients g_shared(x.c, B);
  const float* shared_w = fused.stacked_hidden_weights(x.online);
  ASSERT_NE(shared_w, nullptr);
  EXPECT_NE(fused.stacked_hidden_weights(x.target), shared_w);
  EXPECT_EQ(plain.stacked_hidden_weights(x.online), nullptr);
  const zs::BackwardPlan bwd_shared(x.net, x.online, x.s, on, g_shared, grad_shared, zs::BackwardShape{true, shared_w});
  EXPECT_EQ(bwd_shared.launches(), bwd_stacked.launches() - 1) << "no copy of its own";
  auto run = [&] {
    fused.enqueue(exec, x.gemm);
    fused_side.enqueue(exec, x.gemm, &x.side);
    plain.enqueue(exec, x.gemm);
    bwd.enqueue(exec, x.gemm);
    bwd_stacked.enqueue(exec, x.gemm);
    bwd_ref.enqueue(exec, x.gemm);
    bwd_shared.enqueue(exec, x.gemm);
  };
  auto compare = [&](const std::string& how) {
    x.stream.synchronize();
    expect_forward_matches(on, on_side, on_ref, heads, H, how + ", online");
    expect_forward_matches(tg, tg_side, tg_ref, heads, H, how + ", target");
    expect_each_tensor_near(x.layout, grad, grad_ref, how + ", backward per head");
    expect_each_tensor_near(x.layout, grad_stacked, grad_ref, how + ", backward stacked");
    // The same weights in the same layout: the same bits as the plan's own copy.
    EXPECT_TRUE(zs::test::same_bits(to_host(grad_shared.flat()), to_host(grad_stacked.flat()))) << how;
    EXPECT_TRUE(zs::test::same_bits(to_host(g_shared.d_trunk[0]), to_host(g_stacked.d_trunk[0]))) << how;
  };
  for (auto* grads : {&g, &g_stacked, &g_ref, &g_shared}) {
    fill(grads->d_value_out, seed + 4, 1.f);
    fill(grads->d_branch_out, seed + 5, 1.f);
  }
  run_then_replay(x, seed, run, compare);
  EXPECT_NE(zs::test::error_of([&] { zs::ForwardPlan(x.net, {{&x.online, x.s, &on_ref, 0}}, shape); })
                .find("pass 0's head activations are per head and the plan's heads stacked"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::ForwardPlan(x.net, {{&x.online, x.s, &tg, 0}}); })
                .find("pass 0's head activations are stacked and the plan's heads per head"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { x.net.forward(exec, x.gemm, x.online, x.s2, tg); })
                .find("Network::forward: the heads' hidden activations are stacked"),
            std::string::npos);
  // Two sets of the main heads, the second on `second`'s activations.
  auto two_sets = [&](const zs::Activations& second) {
    return std::vector<zs::HeadSetGrads>{
        {x.net.main_heads(), on.heads(), g.d_value_out.data(), g.d_branch_out.data()},
        {x.net.main_heads(), second.heads(), g.d_value_out.data(), g.d_branch_out.data()}};
  };
  EXPECT_NE(zs::test::error_of([&] { zs::BackwardPlan(x.net, x.online, x.s, on, two_sets(on_ref), g, grad); }).find("head set 1's hidden activations have rows " + std::to_string(H) + " floats apart, set 0's " +
                    std::to_string(heads * H)),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::BackwardPlan(x.net, x.online, x.s, on, g, grad, zs::BackwardShape{false, shared_w}); })
                .find("stacked weights given for 1 head set(s) with the heads not stacked"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] {
              zs::BackwardPlan(x.net, x.online, x.s, on, two_sets(on), g, grad, zs::BackwardShape{true, shared_w});
            }).find("stacked weights given for 2 head set(s); expected the stacked shape and the main head set alone"),
            std::string::npos);
}

// Each trunk layer's bias and ReLU inside its products (cuBLASLt epilogues on CUDA): the online
// net's two passes as one product of 2B rows, the target's on the side lane. The same values as
// the per-layer passes to rounding; with and without a side lane the same bits, enqueued
// directly and replayed from a captured graph with new inputs.
TEST(NetworkPlan, FusedBiasMatchesThePerLayerPassesWithAndWithoutASideLane) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  PlanSetup x(seed, 21);
  const int B = x.B;
  const auto& exec = x.stream.exec();
  const zs::SideLane& side = x.side;
  zs::Activations on(x.c, 2 * B), tg(x.c, B), on_side(x.c, 2 * B), tg_side(x.c, B), on_ref(x.c, 2 * B),
      tg_ref(x.c, B);
  const zs::ForwardPlan fused(x.net, {{&x.online, x.s, &on, 0}, {&x.online, x.s2, &on, B}, {&x.target, x.s2, &tg, 0}},
                              zs::ForwardShape{true});
  const zs::ForwardPlan fused_side(
      x.net, {{&x.online, x.s, &on_side, 0}, {&x.online, x.s2, &on_side, B}, {&x.target, x.s2, &tg_side, 0}},
      zs::ForwardShape{true});
  const zs::ForwardPlan plain(x.net,
                              {{&x.online, x.s, &on_ref, 0}, {&x.online, x.s2, &on_ref, B}, {&x.target, x.s2, &tg_ref, 0}});
  // Per trunk layer two products (the online pair, the target) instead of a batch and a bias pass;
  // the target's three go to the side lane.
  EXPECT_EQ(fused.launches(), plain.launches());
  EXPECT_EQ(fused_side.side_launches(), 3 + plain.side_launches());

  auto run = [&] {
    fused.enqueue(exec, x.gemm);
    fused_side.enqueue(exec, x.gemm, &side);
    plain.enqueue(exec, x.gemm);
  };
  auto compare = [&](const std::string& how) {
    x.stream.synchronize();
    EXPECT_TRUE(zs::test::same_bits(to_host(on.logp), to_host(on_side.logp))) << how;
    EXPECT_TRUE(zs::test::same_bits(to_host(tg.logp), to_host(tg_side.logp))) << how;
    EXPECT_LT(max_rel(to_host(on.logp), as_double(to_host(on_ref.logp))), 1e-5) << how;
    EXPECT_LT(max_rel(to_host(tg.logp), as_double(to_host(tg_ref.logp))), 1e-5) << how;
    for (int i = 0; i < 3; ++i) {
      EXPECT_LT(max_rel(to_host(on.trunk[i]), as_double(to_host(on_ref.trunk[i]))), 1e-5) << how << ", layer " << i;
      EXPECT_LT(max_rel(to_host(tg.trunk[i]), as_double(to_host(tg_ref.trunk[i]))), 1e-5) << how << ", layer " << i;
    }
    const auto relu = to_host(on.trunk[0]);
    EXPECT_GT(std::count(relu.begin(), relu.end(), 0.f), 0) << "the ReLU must have cut something";
    EXPECT_GT(*std::max_element(relu.begin(), relu.end()), 0.f);
  };
  run_then_replay(x, seed, run, compare);
}

// The heads' hidden layers with their bias and ReLU in the products too (heads_bias: a product
// per head for the online net's two passes together and one for the target's, instead of one
// batch over every head and pass and a bias pass), and the output layers' rows padded to 16 bytes
// in the plan's own buffers, computed from padded weights (padded_outputs), alone and together. The same values as the plain
// plan to rounding (hidden activations and log-probabilities), the same bits with and without a
// side lane, enqueued directly and replayed from a captured graph with new inputs.
TEST(NetworkPlan, HeadsBiasAndPaddedOutputsMatchThePlainPlan) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  PlanSetup x(seed, 13);
  const int B = x.B, heads = 1 + static_cast<int>(x.c.branches.size());
  const auto& exec = x.stream.exec();
  const zs::SideLane& side = x.side;
  for (const zs::ForwardShape shape : {zs::ForwardShape{true, true, false}, zs::ForwardShape{false, false, true},
                                       zs::ForwardShape{true, true, true}}) {
    SCOPED_TRACE(testing::Message() << "trunk bias " << shape.trunk_bias << ", heads bias " << shape.heads_bias
                                    << ", padded " << shape.padded_outputs);
    zs::Activations on(x.c, 2 * B), tg(x.c, B), on_side(x.c, 2 * B), tg_side(x.c, B), on_ref(x.c, 2 * B),
        tg_ref(x.c, B);
    const zs::ForwardPlan fused(x.net, {{&x.online, x.s, &on, 0}, {&x.online, x.s2, &on, B}, {&x.target, x.s2, &tg, 0}},
                                shape);
    const zs::ForwardPlan fused_side(
        x.net, {{&x.online, x.s, &on_side, 0}, {&x.online, x.s2, &on_side, B}, {&x.target, x.s2, &tg_side, 0}}, shape);
    const zs::ForwardPlan plain(
        x.net, {{&x.online, x.s, &on_ref, 0}, {&x.online, x.s2, &on_ref, B}, {&x.target, x.s2, &tg_ref, 0}});
    // The heads' batch and bias pass become a product per head for each of the two runs (online
    // pair, target); they stay on the main stream. The trunk's bias puts the target's three
    // layers on the side lane. Padding adds one launch: the copy of the output weights.
    EXPECT_EQ(fused.launches(),
              plain.launches() - (shape.heads_bias ? 2 - 2 * heads : 0) + (shape.padded_outputs ? 1 : 0));
    EXPECT_EQ(fused_side.side_launches(), (shape.trunk_bias ? 3 : 0) + plain.side_launches());

    auto run = [&] {
      fused.enqueue(exec, x.gemm);
      fused_side.enqueue(exec, x.gemm, &side);
      plain.enqueue(exec, x.gemm);
    };
    auto compare = [&](const std::string& how) {
      x.stream.synchronize();
      expect_forward_matches(on, on_side, on_ref, heads, x.c.head_hidden, how + ", online");
      expect_forward_matches(tg, tg_side, tg_ref, heads, x.c.head_hidden, how + ", target");
    };
    run_then_replay(x, seed, run, compare);
  }
}
