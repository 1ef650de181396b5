// A 16 × 8 block of a matrix product accumulated by one team thread: C += A · Bᵀ over k-steps of 8,
// where A is [16 rows, k] and B is [8 rows, k] (B's rows are a dense layer's output units, as in
// PyTorch's W [out, in]). Either operand may be k-contiguous (row-major with its leading
// dimension) or row-contiguous (the transpose): mma() takes each operand's row and k strides.
// It is the piece the fused step's tile products are built from: on CUDA the team thread is a
// whole warp (vector length 32) and the product runs on the tensor cores in TF32 (mma.sync
// m16n8k8); on the host the team thread does it with plain FP32 loops. Only the accumulator's
// layout differs, and for_each hides it: each element is visited exactly once, by the lane that
// holds it.
//
// Use: WarpTile<Exec> t; t.zero(); for each k0 in steps of 8: t.mma(a + k0, lda, b + k0, ldb)
// (or load_a / load_b into fragments and t.mma(fa, fb)); then t.for_each([&](int m, int n, float v) {...}). Every lane of the warp must make the same
// calls (the team thread's code path), with the same pointers.
#pragma once
#include <cstdint>

#include "backends/backend.hpp"

namespace zs {

// p moved up to the next multiple of 16 bytes: team scratch for 16-byte loads and copies (the
// caller asked for 16 bytes more than it uses).
KOKKOS_INLINE_FUNCTION float* align16(void* p) {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<float*>((a + 15) & ~static_cast<std::uintptr_t>(15));
}

// The host's (and any non-CUDA execution space's) tile: the whole 16 × 8 accumulator.
template <class Exec>
struct WarpTile {
  static constexpr int kM = 16, kN = 8, kK = 8;
  static constexpr int kVectorLength = 1;     // the TeamPolicy's vector length it needs
  static constexpr bool kRoundsToTf32 = false;  // the inputs' precision: FP32
  float c[kM * kN];

  KOKKOS_INLINE_FUNCTION void zero() {
    for (int i = 0; i < kM * kN; ++i) c[i] = 0.f;
  }
  // a(m, k) = a[m·a_rs + k·a_ks], b(n, k) = b[n·b_rs + k·b_ks].
  KOKKOS_INLINE_FUNCTION void mma(const float* a, int a_rs, int a_ks, const float* b, int b_rs, int b_ks) {
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < kN; ++n) {
        float s = c[m * kN + n];
        for (int k = 0; k < kK; ++k) s += a[m * a_rs + k * a_ks] * b[n * b_rs + k * b_ks];
        c[m * kN + n] = s;
      }
  }
  KOKKOS_INLINE_FUNCTION void mma(const float* a, int lda, const float* b, int ldb) { mma(a, lda, 1, b, ldb, 1); }
  // The same product from operands loaded once and used for several tiles (a 2 × 2 block of
  // tiles reuses each A for two B and each B for two A). The strides are template arguments so
  // that on CUDA each load is one instruction with a constant offset.
  struct AFragment {
    const float* p;
    int rs, ks;
  };
  struct BFragment {
    const float* p;
    int rs, ks;
  };
  template <int RS, int KS>
  KOKKOS_INLINE_FUNCTION static void load_a(AFragment& f, const float* a) {
    f = {a, RS, KS};
  }
  template <int RS, int KS>
  KOKKOS_INLINE_FUNCTION static void load_b(BFragment& f, const float* b) {
    f = {b, RS, KS};
  }
  KOKKOS_INLINE_FUNCTION void mma(const AFragment& a, const BFragment& b) { mma(a.p, a.rs, a.ks, b.p, b.rs, b.ks); }
  // This thread's lane in its team thread (0 on the host, where a team thread is one thread).
  KOKKOS_INLINE_FUNCTION static int lane() { return 0; }
  // A load of memory that other teams of the same launch may have stored to since it started (a
  // persistent launch's earlier phases): on CUDA it bypasses the multiprocessor's L1.
  KOKKOS_INLINE_FUNCTION static float load_shared(const float* p) { return *p; }
  // Copies `valid` (0 to 4) floats from src to 16-byte aligned team scratch at dst and zeroes
  // the rest of the four, on its way while the caller goes on (CUDA: cp.async, L2 only); it has
  // landed after commit_copies() and wait_copies<N>() with N younger commits outstanding. Here
  // the copy is done at once.
  KOKKOS_INLINE_FUNCTION static void copy4_async(float* dst, const float* src, int valid) {
    for (int i = 0; i < 4; ++i) dst[i] = i < valid ? src[i] : 0.f;
  }
  KOKKOS_INLINE_FUNCTION static void commit_copies() {}
  template <int N>
  KOKKOS_INLINE_FUNCTION static void wait_copies() {}
  // A k-step of 16 for a row block whose activations sit in team scratch (A: 16 rows, k-contiguous,
  // lda a multiple of 4, 16-byte aligned) and whose weights come straight from global memory (B:
  // W's rows are the 8 output units, k-contiguous with leading dimension ldb). load_b16 reads the
  // n_left × k_left corner that exists (zero elsewhere); vec says the rows are 16-byte aligned,
  // which lets CUDA load four floats at once. On CUDA B lands in registers and waits there for
  // round_b16 and mma16, so a caller can keep several steps of loads on their way. Each side of
  // the product sums the same 16 k, in an order of its own.
  static constexpr int kK16 = 16;
  struct A16 {
    const float* p;
    int ld;
  };
  struct B16 {
    const float* p;
    std::int64_t ld;
    int n_left, k_left;
    bool trans;  // element (n, k) at p[k·ld + n] (load_b16_t)
  };
  KOKKOS_INLINE_FUNCTION static void load_a16(A16& f, const float* a, int lda) { f = {a, lda}; }
  KOKKOS_INLINE_FUNCTION static void load_b16(B16& f, const float* b, std::int64_t ldb, int n_left, int k_left,
                                              bool /*vec*/) {
    f = {b, ldb, n_left, k_left, false};
  }
  // The same k-step of B stored the other way round, n-contiguous: element (n, k) at b[k·ldb + n]
  // (W [out, in] read as the B of an input gradient dz·W, whose n is W's in and k its out).
  KOKKOS_INLINE_FUNCTION static void load_b16_t(B16& f, const float* b, std::int64_t ldb, int n_left, int k_left) {
    f = {b, ldb, n_left, k_left, true};
  }
  KOKKOS_INLINE_FUNCTION static void round_b16(B16&) {}
  KOKKOS_INLINE_FUNCTION void mma16(const A16& a, const B16& b) {
    const int nn = b.n_left < kN ? b.n_left : kN, kk = b.k_left < kK16 ? b.k_left : kK16;
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < nn; ++n) {
        float s = c[m * kN + n];
        for (int k = 0; k < kk; ++k) s += a.p[m * a.ld + k] * (b.trans ? b.p[k * b.ld + n] : b.p[n * b.ld + k]);
        c[m * kN + n] = s;
      }
  }
  // What an activation becomes as an A operand (stored so into scratch once, read by every
  // k-step): itself here, TF32 on CUDA.
  KOKKOS_INLINE_FUNCTION static float to_operand(float x) { return x; }

  template <class F>
  KOKKOS_INLINE_FUNCTION void for_each(const F& f) const {
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < kN; ++n) f(m, n, c[m * kN + n]);
  }
};

}  // namespace zs

#if defined(KOKKOS_ENABLE_CUDA)
#include "backends/cuda/tf32_mma_tile.hpp"
#endif
