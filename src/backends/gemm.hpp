// Dense matrix products for the network, on the step's stream. CUDA: cuBLAS with TF32 tensor
// cores (FP32 in/out, FP32 accumulate) or exact FP32 for parity checks. Host: Kokkos Kernels
// GEMM with OpenBLAS underneath (batches: OpenBLAS directly, one product per core). Matrices are
// row-major (LayoutRight), like the parameters.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/stream.hpp"
#include "core/precision.hpp"

namespace zs {

enum class Trans { N, T };

using GemmIn = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using GemmOut = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;

// One product of a GemmBatch: C = alpha·op(A)·op(B) + beta·C on contiguous row-major matrices.
struct GemmEntry {
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

// Many products of one shape in one launch (cuBLAS batched GEMM): the step's dense layers of
// several passes and heads, each as one graph node instead of one per matrix. The pointer
// tables go to the device once, here, so running the batch allocates and copies nothing.
class GemmBatch {
 public:
  // op(A) is [m, k], op(B) is [k, n], C is [m, n], for every entry. Throws zs::Error on an empty
  // batch, a non-positive extent or a null pointer.
  GemmBatch(Trans ta, Trans tb, int m, int n, int k, float alpha, float beta, std::vector<GemmEntry> entries);
  GemmBatch() = default;

  Trans ta = Trans::N, tb = Trans::N;
  int m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  std::vector<GemmEntry> entries;
  // Device copies of the a, b and c pointers, one table each (for cuBLAS' pointer-array API).
  Kokkos::View<std::uintptr_t*, MemSpace> a_table, b_table, c_table;
  int count() const { return static_cast<int>(entries.size()); }
  // Rows of the operands stored wider than their width (e.g. padded to a multiple of 4 floats,
  // so that every row starts on 16 bytes): 0 is the dense width. Throws zs::Error on a width
  // below the dense one.
  GemmBatch& with_ld(int a, int b, int c);
  int a_ld = 0, b_ld = 0, c_ld = 0;
  // Stored widths (leading dimensions) of the row-major operands: A is [m, k] or, transposed,
  // [k, m]; B is [k, n] or [n, k]; C is [m, n].
  int lda() const { return a_ld > 0 ? a_ld : ta == Trans::N ? k : m; }
  int ldb() const { return b_ld > 0 ? b_ld : tb == Trans::N ? n : k; }
  int ldc() const { return c_ld > 0 ? c_ld : n; }
};

// One product with a bias per column of C added in the same launch, and ReLU on request:
// C = act(op(A)·op(B) + bias). CUDA: cuBLASLt's BIAS / RELU_BIAS epilogue, so no separate pass
// over C; host: each core adds the bias to the rows of C it has just multiplied.
struct GemmBias {
  Trans ta = Trans::N, tb = Trans::N;
  int m = 0, n = 0, k = 0;       // op(A) is [m, k], op(B) is [k, n], C is [m, n]
  const float* a = nullptr;      // row-major, as GemmBatch's
  const float* b = nullptr;
  float* c = nullptr;
  const float* bias = nullptr;   // [n]
  bool relu = false;
  int lda() const { return ta == Trans::N ? k : m; }
  int ldb() const { return tb == Trans::N ? n : k; }
};

class Gemm {
 public:
  Gemm(Stream& stream, Precision precision);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C = alpha · op(A) · op(B) + beta · C, enqueued on the stream; no sync, no allocation.
  // Shapes are checked: op(A) is [m, k], op(B) is [k, n], C is [m, n].
  void operator()(Trans ta, Trans tb, float alpha, const GemmIn& a, const GemmIn& b, float beta,
                  const GemmOut& c) const;

  // Every product of `batch`: one launch on CUDA (long reductions one by one, so cuBLAS can
  // split K); on the host, the products shared out over the cores.
  void operator()(const GemmBatch& batch) const;

  // C = act(op(A)·op(B) + bias), enqueued on the stream; no sync, no allocation. Throws
  // zs::Error on a non-positive extent or a null pointer.
  void operator()(const GemmBias& p) const;

  Precision precision() const { return precision_; }
  void set_precision(Precision p) { precision_ = p; }

 private:
  Precision precision_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws zs::Error naming the extents when op(A)·op(B) does not fit C. Shared by backends.
void check_gemm_shapes(Trans ta, Trans tb, const GemmIn& a, const GemmIn& b, const GemmOut& c);
// Throws zs::Error naming what is missing or not positive in a GemmBias. Shared by backends.
void check_gemm_bias(const GemmBias& p);

}  // namespace zs
