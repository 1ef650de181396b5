// A 16 × 8 block of a matrix product accumulated by one team thread: C += A · Bᵀ over k-steps of 8,
// where A is [16 rows, k] and B is [8 rows, k], both row-major with their own leading dimension
// (B's rows are a dense layer's output units, as in PyTorch's W [out, in]). It is the piece a
// fused layer-stack kernel tiles its products with: on CUDA the team thread is a whole warp
// (vector length 32) and the product runs on the tensor cores in TF32 (mma.sync m16n8k8); on the
// host the team thread does it with plain FP32 loops. Only the accumulator's layout differs, and
// for_each hides it: each element is visited exactly once, by the lane that holds it.
//
// Use: WarpTile<Exec> t; t.zero(); for each k0 in steps of 8: t.mma(a + k0, lda, b + k0, ldb);
// then t.for_each([&](int m, int n, float v) {...}). Every lane of the warp must make the same
// calls (the team thread's code path), with the same pointers.
#pragma once
#include "backends/backend.hpp"

namespace zs {

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
  KOKKOS_INLINE_FUNCTION void mma(const float* a, int lda, const float* b, int ldb) {
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < kN; ++n) {
        float s = c[m * kN + n];
        for (int k = 0; k < kK; ++k) s += a[m * lda + k] * b[n * ldb + k];
        c[m * kN + n] = s;
      }
  }
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
