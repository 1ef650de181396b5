// zs::WarpTile (backends/warp_tile.hpp) against a naive double-precision product: a team of one
// team thread per 16 × 8 tile of C = A·Bᵀ, fresh random inputs, FP32's tolerance on the host and
// TF32's on CUDA (where the tile runs on the tensor cores); and the accumulator's element map:
// every element of C written once, by whichever lane holds it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/stream.hpp"
#include "backends/warp_tile.hpp"
#include "test_util.hpp"

namespace {

using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, zs::MemSpace>;
using Counts = Kokkos::View<int**, Kokkos::LayoutRight, zs::MemSpace>;
using Tile = zs::WarpTile<zs::ExecSpace>;

// C = A·Bᵀ for A [M, K], B [N, K]: a league rank per tile of C, row-block major; counts(m, n)
// counts the writes of each element.
struct TileProduct {
  using Member = Kokkos::TeamPolicy<zs::ExecSpace>::member_type;
  Kokkos::View<const float**, Kokkos::LayoutRight, zs::MemSpace> a, b;
  Matrix c;
  Counts counts;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int tiles_n = static_cast<int>(b.extent(0)) / Tile::kN;
    const int m0 = team.league_rank() / tiles_n * Tile::kM, n0 = team.league_rank() % tiles_n * Tile::kN;
    const int k = static_cast<int>(a.extent(1));
    Tile t;
    t.zero();
    for (int k0 = 0; k0 < k; k0 += Tile::kK) t.mma(&a(m0, k0), k, &b(n0, k0), k);
    t.for_each([&](int m, int n, float v) {
      c(m0 + m, n0 + n) = v;
      Kokkos::atomic_add(&counts(m0 + m, n0 + n), 1);
    });
  }
};

// C = A·Bᵀ by k-steps of 16 (mma16): A staged through team scratch ([16][lda], TF32 on CUDA
// as the row blocks store it), B loaded straight from global memory with load_b16, which sees
// only the n_left × k_left corner that exists (B's rows past n and k past k must read as zero).
struct TileProduct16 {
  using Member = Kokkos::TeamPolicy<zs::ExecSpace>::member_type;
  Kokkos::View<const float**, Kokkos::LayoutRight, zs::MemSpace> a, b;
  Matrix c;
  int n = 0, k = 0;  // B's rows and columns that exist (b may be wider: junk there)
  bool vec = false;
  bool trans = false;  // b holds Bᵀ: element (n, k) at b(k, n) (load_b16_t)
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int tiles_n = static_cast<int>(c.extent(1)) / Tile::kN;
    const int m0 = team.league_rank() / tiles_n * Tile::kM, n0 = team.league_rank() % tiles_n * Tile::kN;
    const int kp = static_cast<int>(a.extent(1)), lda = kp + 4;
    float* const sa = zs::align16(team.team_scratch(0).get_shmem(sizeof(float) * Tile::kM * lda + 16));
    Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Tile::kM * kp), [&](const int i) {
      sa[i / kp * lda + i % kp] = Tile::to_operand(a(m0 + i / kp, i % kp));
    });
    team.team_barrier();
    Tile t;
    t.zero();
    for (int k0 = 0; k0 < kp; k0 += Tile::kK16) {
      typename Tile::A16 fa;
      typename Tile::B16 fb;
      Tile::load_a16(fa, sa + k0, lda);
      const bool any = n0 < n && k0 < k;
      if (trans)
        Tile::load_b16_t(fb, any ? &b(k0, n0) : b.data(), static_cast<std::int64_t>(b.extent(1)), n - n0, k - k0);
      else
        Tile::load_b16(fb, any ? &b(n0, k0) : b.data(), static_cast<std::int64_t>(b.extent(1)), n - n0, k - k0, vec);
      Tile::round_b16(fb);
      t.mma16(fa, fb);
    }
    t.for_each([&](int m, int nn, float v) { c(m0 + m, n0 + nn) = v; });
  }
};

}  // namespace

TEST(WarpTile, SixteenStepsFromScratchAndGlobalMatchADoubleReference) {
  struct Shape {
    int m, n, k, ldb;  // B has n rows of k that count, stored with ldb floats a row (trans: k rows of n)
    bool vec, trans = false;
  };
  // Whole tiles, four floats a load; n and k that end inside a tile (one float a load, and four
  // where the rows allow it); the reference trunk's 256 × 256 with four floats a load; B stored
  // the other way round (an input gradient's W), whole and ending inside a tile.
  for (const Shape s : {Shape{16, 8, 16, 16, true}, Shape{32, 24, 48, 52, true}, Shape{16, 13, 37, 37, false},
                        Shape{32, 19, 44, 44, true}, Shape{32, 256, 256, 256, true}, Shape{32, 64, 128, 64, false, true},
                        Shape{16, 21, 37, 24, false, true}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << s.m << " x " << s.n << " x " << s.k << ", vec " << s.vec << ", trans "
                                    << s.trans << ", seed " << seed);
    const int np = (s.n + Tile::kN - 1) / Tile::kN * Tile::kN, kp = (s.k + 15) / 16 * 16;
    const auto ha = zs::test::random_normal(std::size_t(s.m) * kp, seed);
    const int b_rows = s.trans ? kp : np;
    const auto hb = zs::test::random_normal(std::size_t(b_rows) * s.ldb, seed + 1, 0.5f);
    const Matrix a("zs::test::a", s.m, kp), b("zs::test::b", b_rows, s.ldb), c("zs::test::c", s.m, np);
    zs::test::upload(ha, a);
    zs::test::upload(hb, b);
    Kokkos::deep_copy(c, std::nanf(""));
    zs::Stream stream;
    Kokkos::TeamPolicy<zs::ExecSpace> policy(stream.exec(), (s.m / Tile::kM) * (np / Tile::kN), 1, Tile::kVectorLength);
    policy.set_scratch_size(0, Kokkos::PerTeam(sizeof(float) * Tile::kM * (kp + 4) + 16));
    Kokkos::parallel_for("zs::test::warp_tile16", policy, TileProduct16{a, b, c, s.n, s.k, s.vec, s.trans});
    stream.synchronize();
    const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
    const double rel = Tile::kRoundsToTf32 ? 2e-3 : 1e-5;
    int bad = 0;
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < np; ++j) {
        double ref = 0, scale = 0;
        for (int k = 0; j < s.n && k < s.k; ++k) {  // B past its n rows and k columns counts as zero
          const double p = double(ha[std::size_t(i) * kp + k]) *
                           hb[s.trans ? std::size_t(k) * s.ldb + j : std::size_t(j) * s.ldb + k];
          ref += p;
          scale += std::abs(p);
        }
        if (!(std::abs(hc(i, j) - ref) <= rel * scale + 1e-6) && ++bad <= 5)
          ADD_FAILURE() << "C(" << i << ", " << j << ") = " << hc(i, j) << ", reference " << ref << ", allowed "
                        << rel * scale + 1e-6;
      }
    EXPECT_EQ(bad, 0);
  }
}

TEST(WarpTile, ProductMatchesADoubleReferenceAndWritesEveryElementOnce) {
  struct Shape {
    int m, n, k;
  };
  // One tile; several tiles each way with a long k (accumulation over 32 steps); the reference
  // trunk's first layer (48 inputs) on 64 rows.
  for (const Shape s : {Shape{16, 8, 8}, Shape{48, 40, 256}, Shape{64, 256, 48}}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << s.m << " x " << s.n << " x " << s.k << ", seed " << seed);
    const auto ha = zs::test::random_normal(std::size_t(s.m) * s.k, seed);
    const auto hb = zs::test::random_normal(std::size_t(s.n) * s.k, seed + 1, 0.5f);
    const Matrix a("zs::test::a", s.m, s.k), b("zs::test::b", s.n, s.k);
    zs::test::upload(ha, a);  // row-major: the vectors' order
    zs::test::upload(hb, b);
    Matrix c("zs::test::c", s.m, s.n);
    Counts counts("zs::test::counts", s.m, s.n);
    Kokkos::deep_copy(c, std::nanf(""));
    zs::Stream stream;
    const int tiles = (s.m / Tile::kM) * (s.n / Tile::kN);
    Kokkos::parallel_for("zs::test::warp_tile", Kokkos::TeamPolicy<zs::ExecSpace>(stream.exec(), tiles, 1, Tile::kVectorLength),
                         TileProduct{a, b, c, counts});
    stream.synchronize();
    const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
    const auto hn = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), counts);
    // TF32 keeps 10 of FP32's 23 mantissa bits: each input is off by up to 2^-11 relative.
    const double rel = Tile::kRoundsToTf32 ? 2e-3 : 1e-5;
    int bad = 0;
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double ref = 0, scale = 0;
        for (int k = 0; k < s.k; ++k) {
          const double p = double(ha[std::size_t(i) * s.k + k]) * hb[std::size_t(j) * s.k + k];
          ref += p;
          scale += std::abs(p);
        }
        EXPECT_EQ(hn(i, j), 1) << "C(" << i << ", " << j << ") written " << hn(i, j) << " times";
        if (!(std::abs(hc(i, j) - ref) <= rel * scale + 1e-6) && ++bad <= 5)
          ADD_FAILURE() << "C(" << i << ", " << j << ") = " << hc(i, j) << ", reference " << ref << ", allowed "
                        << rel * scale + 1e-6;
      }
    EXPECT_EQ(bad, 0);
  }
}

TEST(WarpTile, TheVectorLengthFitsTheBackend) {
  // On CUDA the tile is one warp's (the lane is the vector lane); on the host a team thread
  // holds the whole accumulator.
  EXPECT_EQ(Tile::kVectorLength, Tile::kRoundsToTf32 ? 32 : 1);
  EXPECT_EQ(Tile::kM * Tile::kN, 128);
}
