// cuBLAS on the step's stream. Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ,
// so A and B swap places and nothing is transposed in memory. A fixed workspace set once keeps
// cuBLAS from allocating inside a captured graph.
#include <cublas_v2.h>

#include <algorithm>
#include <cstddef>

#include "backends/cuda/check.hpp"
#include "backends/gemm.hpp"

#define ZS_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    cublasStatus_t zs_st_ = (call);                                                    \
    if (zs_st_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::zs::fail(#call, " failed: ", cublasGetStatusName(zs_st_), " at ", __FILE__, ":", __LINE__); \
  } while (0)

namespace zs {

namespace {
// From this reduction length on, products of a batch run one by one (see below).
constexpr int kSplitKBatchRows = 1024;

cublasOperation_t op(Trans t) { return t == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T; }
cublasComputeType_t compute(Precision p) {
  return p == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}
}  // namespace

struct Gemm::Impl {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;
  ~Impl() {
    if (handle) cublasDestroy(handle);
    if (workspace) cudaFree(workspace);
  }
};

Gemm::Gemm(Stream& stream, Precision precision) : precision_(precision), impl_(std::make_unique<Impl>()) {
  ZS_CUBLAS_CHECK(cublasCreate(&impl_->handle));
  ZS_CUBLAS_CHECK(cublasSetStream(impl_->handle, static_cast<cudaStream_t>(stream.native())));
  ZS_CUDA_CHECK(cudaMalloc(&impl_->workspace, Impl::kWorkspaceBytes));
  ZS_CUBLAS_CHECK(cublasSetWorkspace(impl_->handle, impl_->workspace, Impl::kWorkspaceBytes));
  ZS_CUBLAS_CHECK(cublasSetPointerMode(impl_->handle, CUBLAS_POINTER_MODE_HOST));
}

Gemm::~Gemm() = default;

void Gemm::operator()(Trans ta, Trans tb, float alpha, const GemmIn& a, const GemmIn& b, float beta,
                      const GemmOut& c) const {
  check_gemm_shapes(ta, tb, a, b, c);
  const int m = static_cast<int>(c.extent(0)), n = static_cast<int>(c.extent(1));
  const int k = static_cast<int>(ta == Trans::N ? a.extent(1) : a.extent(0));
  ZS_CUBLAS_CHECK(cublasGemmEx(impl_->handle, op(tb), op(ta), n, m, k, &alpha, b.data(), CUDA_R_32F,
                               static_cast<int>(b.extent(1)), a.data(), CUDA_R_32F,
                               static_cast<int>(a.extent(1)), &beta, c.data(), CUDA_R_32F, n, compute(precision_),
                               CUBLAS_GEMM_DEFAULT));
}

void Gemm::operator()(const GemmBatch& g) const {
  // A batched call takes no split-K: a weight gradient (k = the batch, a small m × n output)
  // would then run on a handful of blocks. Long reductions over small outputs and single
  // products go one by one.
  if (g.count() == 1 || (g.k >= kSplitKBatchRows && g.k >= 2 * std::max(g.m, g.n))) {
    for (const GemmEntry& e : g.entries) (*this)(g.ta, g.tb, g.alpha, g.a_of(e), g.b_of(e), g.beta, g.c_of(e));
    return;
  }
  ZS_CUBLAS_CHECK(cublasGemmBatchedEx(
      impl_->handle, op(g.tb), op(g.ta), g.n, g.m, g.k, &g.alpha,
      reinterpret_cast<const void* const*>(g.b_table.data()), CUDA_R_32F, g.ldb(),
      reinterpret_cast<const void* const*>(g.a_table.data()), CUDA_R_32F, g.lda(), &g.beta,
      reinterpret_cast<void* const*>(g.c_table.data()), CUDA_R_32F, g.n, g.count(), compute(precision_),
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace zs
