// Dense matrix products for the network, on the step's stream. CUDA: cuBLAS with TF32 tensor
// cores (FP32 in/out, FP32 accumulate) or exact FP32 for parity checks. Host: Kokkos Kernels
// GEMM with OpenBLAS underneath. Matrices are row-major (LayoutRight), like the parameters.
#pragma once
#include <memory>

#include "backends/stream.hpp"
#include "config.hpp"

namespace zs {

enum class Trans { N, T };

using GemmIn = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using GemmOut = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;

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

  Precision precision() const { return precision_; }
  void set_precision(Precision p) { precision_ = p; }

 private:
  Precision precision_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws zs::Error naming the extents when op(A)·op(B) does not fit C. Shared by backends.
void check_gemm_shapes(Trans ta, Trans tb, const GemmIn& a, const GemmIn& b, const GemmOut& c);

}  // namespace zs
