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

  struct AFragment {
    std::uint32_t x[4];
  };
  struct BFragment {
    std::uint32_t x[2];
  };
  // a(m, k) = a[m·RS + k·KS]: this lane's four elements of A, rounded to TF32.
  template <int RS, int KS>
  KOKKOS_INLINE_FUNCTION static void load_a(AFragment& f, const float* a) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
    const float* p = a + g * RS + t * KS;
    f.x[0] = tf32(p[0]);
    f.x[1] = tf32(p[8 * RS]);
    f.x[2] = tf32(p[4 * KS]);
    f.x[3] = tf32(p[8 * RS + 4 * KS]);
#else
    (void)f, (void)a;
#endif
  }
  // b(n, k) = b[n·RS + k·KS]: this lane's two elements of B.
  template <int RS, int KS>
  KOKKOS_INLINE_FUNCTION static void load_b(BFragment& f, const float* b) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
    const float* p = b + g * RS + t * KS;
    f.x[0] = tf32(p[0]);
    f.x[1] = tf32(p[4 * KS]);
#else
    (void)f, (void)b;
#endif
  }
  KOKKOS_INLINE_FUNCTION void mma(const AFragment& a, const BFragment& b) {
#ifdef __CUDA_ARCH__
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
#else
    (void)a, (void)b;
    Kokkos::abort("WarpTile<Cuda>::mma runs on the device only");
#endif
  }

  // The k-step of 16 (warp_tile.hpp says what for). Lane (g, t) holds k 4t .. 4t + 3 of A's rows g
  // and g + 8 (one 16-byte scratch load each) and of B's row g (one 16-byte global load): the
  // first m16n8k8 takes k 4t and 4t + 1 as its t and t + 4, the second 4t + 2 and 4t + 3. A's
  // values are TF32 already (to_operand); B's are rounded once a step by round_b16, after they
  // have landed.
  static constexpr int kK16 = 16;
  struct A16 {
    std::uint32_t x[8];  // row g's four, then row g + 8's
  };
  struct B16 {
    float x[4];
  };
  KOKKOS_INLINE_FUNCTION static void load_a16(A16& f, const float* a, int lda) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
    const uint4 lo = *reinterpret_cast<const uint4*>(a + g * lda + 4 * t);
    const uint4 hi = *reinterpret_cast<const uint4*>(a + (g + 8) * lda + 4 * t);
    f.x[0] = lo.x, f.x[1] = lo.y, f.x[2] = lo.z, f.x[3] = lo.w;
    f.x[4] = hi.x, f.x[5] = hi.y, f.x[6] = hi.z, f.x[7] = hi.w;
#else
    (void)f, (void)a, (void)lda;
#endif
  }
  KOKKOS_INLINE_FUNCTION static void load_b16(B16& f, const float* b, std::int64_t ldb, int n_left, int k_left,
                                              bool vec) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, k = 4 * (lane & 3);
    f.x[0] = f.x[1] = f.x[2] = f.x[3] = 0.f;
    if (g >= n_left || k >= k_left) return;
    const float* const p = b + g * ldb + k;
    if (vec && k + 4 <= k_left) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p));
      f.x[0] = v.x, f.x[1] = v.y, f.x[2] = v.z, f.x[3] = v.w;
    } else {
      for (int i = 0; i < 4; ++i)
        if (k + i < k_left) f.x[i] = __ldcg(p + i);
    }
#else
    (void)f, (void)b, (void)ldb, (void)n_left, (void)k_left, (void)vec;
#endif
  }
  // B n-contiguous (element (n, k) at b[k·ldb + n]): lane (g, t) loads column g's k 4t .. 4t + 3,
  // four floats ldb apart; the 8 lanes of one t read 8 consecutive floats, one 32-byte sector.
  KOKKOS_INLINE_FUNCTION static void load_b16_t(B16& f, const float* b, std::int64_t ldb, int n_left, int k_left) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, k = 4 * (lane & 3);
    ZS_UNROLL
    for (int i = 0; i < 4; ++i) f.x[i] = g < n_left && k + i < k_left ? __ldcg(b + (k + i) * ldb + g) : 0.f;
#else
    (void)f, (void)b, (void)ldb, (void)n_left, (void)k_left;
#endif
  }
  KOKKOS_INLINE_FUNCTION static void round_b16(B16& f) {
#ifdef __CUDA_ARCH__
    ZS_UNROLL
    for (int i = 0; i < 4; ++i) f.x[i] = __uint_as_float(tf32(f.x[i]));
#else
    (void)f;
#endif
  }
  KOKKOS_INLINE_FUNCTION void mma16(const A16& a, const B16& b) {
#ifdef __CUDA_ARCH__
    const std::uint32_t b0 = __float_as_uint(b.x[0]), b1 = __float_as_uint(b.x[1]);
    const std::uint32_t b2 = __float_as_uint(b.x[2]), b3 = __float_as_uint(b.x[3]);
    mma(AFragment{{a.x[0], a.x[4], a.x[1], a.x[5]}}, BFragment{{b0, b1}});
    mma(AFragment{{a.x[2], a.x[6], a.x[3], a.x[7]}}, BFragment{{b2, b3}});
#else
    (void)a, (void)b;
    Kokkos::abort("WarpTile<Cuda>::mma16 runs on the device only");
#endif
  }
  KOKKOS_INLINE_FUNCTION static float to_operand(float x) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(tf32(x));
#else
    return x;
#endif
  }

  // a(m, k) = a[m·a_rs + k·a_ks], b(n, k) = b[n·b_rs + k·b_ks].
  KOKKOS_INLINE_FUNCTION void mma(const float* a, int a_rs, int a_ks, const float* b, int b_rs, int b_ks) {
#ifdef __CUDA_ARCH__
    const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
    AFragment fa;
    BFragment fb;
    fa.x[0] = tf32(a[g * a_rs + t * a_ks]);
    fa.x[1] = tf32(a[(g + 8) * a_rs + t * a_ks]);
    fa.x[2] = tf32(a[g * a_rs + (t + 4) * a_ks]);
    fa.x[3] = tf32(a[(g + 8) * a_rs + (t + 4) * a_ks]);
    fb.x[0] = tf32(b[g * b_rs + t * b_ks]);
    fb.x[1] = tf32(b[g * b_rs + (t + 4) * b_ks]);
    mma(fa, fb);
#else
    (void)a, (void)a_rs, (void)a_ks, (void)b, (void)b_rs, (void)b_ks;
    Kokkos::abort("WarpTile<Cuda>::mma runs on the device only");
#endif
  }
  KOKKOS_INLINE_FUNCTION void mma(const float* a, int lda, const float* b, int ldb) { mma(a, lda, 1, b, ldb, 1); }

  KOKKOS_INLINE_FUNCTION static int lane() {
#ifdef __CUDA_ARCH__
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  // ld.global.cg: L2 only. A multiprocessor's L1 is not kept coherent with other
  // multiprocessors' stores, and a persistent launch reads what other blocks stored in its
  // earlier phases.
  KOKKOS_INLINE_FUNCTION static float load_shared(const float* p) {
#ifdef __CUDA_ARCH__
    return __ldcg(p);
#else
    return *p;
#endif
  }

  // cp.async.cg: 16 bytes, L2 only (as load_shared), zero-filled past src-size.
  KOKKOS_INLINE_FUNCTION static void copy4_async(float* dst, const float* src, int valid) {
#ifdef __CUDA_ARCH__
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid * 4) : "memory");
#else
    (void)dst, (void)src, (void)valid;
#endif
  }
  KOKKOS_INLINE_FUNCTION static void commit_copies() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
  }
  template <int N>
  KOKKOS_INLINE_FUNCTION static void wait_copies() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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
