// WarpTile on CUDA: one warp, TF32 tensor cores (PTX mma.sync.aligned.m16n8k8.row.col.f32.tf32).
// The fragment layouts are PTX's for m16n8k8 with .tf32: lane = 4·g + t (g = lane / 4, t = lane % 4);
// A holds (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B holds (k = t, n = g), (k = t + 4, n = g);
// the accumulator holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). The lane is threadIdx.x,
// which Kokkos makes the vector lane: the TeamPolicy must have vector length 32.
#pragma once
#include <cstdint>

namespace zs {

template <>
struct WarpTile<Kokkos::Cuda> {
  static constexpr int kM = 16, kN = 8, kK = 8;
  static constexpr int kVectorLength = 32;
  static constexpr bool kRoundsToTf32 = true;
  float c[4];

  KOKKOS_INLINE_FUNCTION void zero() { c[0] = c[1] = c[2] = c[3] = 0.f; }

  KOKKOS_INLINE_FUNCTION void mma(const float* a, int lda, const float* b, int ldb) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
    const std::uint32_t a0 = tf32(a[g * lda + t]), a1 = tf32(a[(g + 8) * lda + t]);
    const std::uint32_t a2 = tf32(a[g * lda + t + 4]), a3 = tf32(a[(g + 8) * lda + t + 4]);
    const std::uint32_t b0 = tf32(b[g * ldb + t]), b1 = tf32(b[g * ldb + t + 4]);
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    (void)a, (void)lda, (void)b, (void)ldb;
    Kokkos::abort("WarpTile<Cuda>::mma runs on the device only");
#endif
  }

  template <class F>
  KOKKOS_INLINE_FUNCTION void for_each(const F& f) const {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
    f(g, 2 * t, c[0]);
    f(g, 2 * t + 1, c[1]);
    f(g + 8, 2 * t, c[2]);
    f(g + 8, 2 * t + 1, c[3]);
#else
    (void)f;
    Kokkos::abort("WarpTile<Cuda>::for_each runs on the device only");
#endif
  }

 private:
#ifdef __CUDA_ARCH__
  // Round to nearest (ties away) to TF32's 10-bit mantissa, as cuBLAS' TF32 mode does.
  __device__ static std::uint32_t tf32(float x) {
    std::uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
  }
#endif
};

}  // namespace zs
