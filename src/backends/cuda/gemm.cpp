// cuBLAS on the step's stream. Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ,
// so A and B swap places and nothing is transposed in memory. A fixed workspace set once keeps
// cuBLAS from allocating inside a captured graph.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

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

namespace {
// cuBLASLt's descriptors and chosen algorithm for one shape of GemmBias (host objects: creating
// them inside a stream capture is allowed). Made once per shape and kept: a direct-launch step
// would otherwise pay for the descriptors and a heuristic query on every product, every step.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t best{};
  LtCall() = default;
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Everything the descriptors and the heuristic see; the pointers (the bias's included, set per
// call) do not enter them.
using LtKey = std::tuple<int, int, int, int, int, int, int>;  // ta, tb, m, n, k, relu, precision
}  // namespace

struct Gemm::Impl {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;  // the products with a bias epilogue
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;
  std::mutex lt_mutex;  // the products are const: a Gemm shared by threads still builds one entry
  std::map<LtKey, std::unique_ptr<LtCall>> lt_calls;
  ~Impl() {
    lt_calls.clear();
    if (lt) cublasLtDestroy(lt);
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
  ZS_CUBLAS_CHECK(cublasLtCreate(&impl_->lt));
  impl_->stream = static_cast<cudaStream_t>(stream.native());
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
  // cuBLAS cannot see the pointers of a device pointer table: it picks its kernel by the leading
  // dimensions and assumes every matrix starts on 16 bytes (vector loads), which a row offset into
  // a matrix of odd width breaks (memcheck: misaligned reads in a cutlass align4 kernel). One by
  // one, cublasGemmEx checks each pointer itself.
  auto aligned = [](const float* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool all_aligned = std::all_of(g.entries.begin(), g.entries.end(), [&](const GemmEntry& e) {
    return aligned(e.a) && aligned(e.b) && aligned(e.c);
  });
  if (g.count() == 1 || !all_aligned || (g.k >= kSplitKBatchRows && g.k >= 2 * std::max(g.m, g.n))) {
    for (const GemmEntry& e : g.entries)
      ZS_CUBLAS_CHECK(cublasGemmEx(impl_->handle, op(g.tb), op(g.ta), g.n, g.m, g.k, &g.alpha, e.b, CUDA_R_32F, g.ldb(),
                                   e.a, CUDA_R_32F, g.lda(), &g.beta, e.c, CUDA_R_32F, g.ldc(), compute(precision_),
                                   CUBLAS_GEMM_DEFAULT));
    return;
  }
  ZS_CUBLAS_CHECK(cublasGemmBatchedEx(
      impl_->handle, op(g.tb), op(g.ta), g.n, g.m, g.k, &g.alpha,
      reinterpret_cast<const void* const*>(g.b_table.data()), CUDA_R_32F, g.ldb(),
      reinterpret_cast<const void* const*>(g.a_table.data()), CUDA_R_32F, g.lda(), &g.beta,
      reinterpret_cast<void* const*>(g.c_table.data()), CUDA_R_32F, g.ldc(), g.count(), compute(precision_),
      CUBLAS_GEMM_DEFAULT));
}

void Gemm::operator()(const GemmBias& p) const {
  check_gemm_bias(p);
  // Column-major, as for cublasGemmEx above: Cᵀ [n, m] = op(B)ᵀ·op(A)ᵀ, so cuBLASLt's first
  // operand is our B, its second our A, and the bias runs along Cᵀ's rows: one per column of C.
  const LtKey key{static_cast<int>(p.ta), static_cast<int>(p.tb), p.m, p.n, p.k, p.relu ? 1 : 0,
                  static_cast<int>(precision_)};
  std::lock_guard<std::mutex> lock(impl_->lt_mutex);
  auto& slot = impl_->lt_calls[key];
  if (!slot) {
    auto made = std::make_unique<LtCall>();
    LtCall& call = *made;
    ZS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.desc, compute(precision_), CUDA_R_32F));
    const cublasOperation_t first = op(p.tb), second = op(p.ta);
    ZS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof first));
    ZS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof second));
    const cublasLtEpilogue_t epilogue = p.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    ZS_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    const void* bias = p.bias;
    ZS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    // Stored (column-major) shapes: our row-major X [r, c] is Xᵀ [c, r] with leading dimension c.
    const bool b_n = p.tb == Trans::N, a_n = p.ta == Trans::N;
    ZS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, CUDA_R_32F, b_n ? p.n : p.k, b_n ? p.k : p.n, p.ldb()));
    ZS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, CUDA_R_32F, a_n ? p.k : p.m, a_n ? p.m : p.k, p.lda()));
    ZS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.c, CUDA_R_32F, p.n, p.m, p.n));
    ZS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
    const std::size_t ws = Impl::kWorkspaceBytes;
    ZS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                         sizeof ws));
    int found = 0;
    ZS_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(impl_->lt, call.desc, call.a, call.b, call.c, call.c, call.pref,
                                                   1, &call.best, &found));
    require(found >= 1, "gemm with bias: cuBLASLt has no algorithm for [", p.m, ", ", p.k, "]·[", p.k, ", ", p.n,
            "] with a ", p.relu ? "ReLU+bias" : "bias", " epilogue; expected at least one");
    slot = std::move(made);
  }
  LtCall& call = *slot;
  const void* bias = p.bias;
  ZS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  const std::size_t ws = Impl::kWorkspaceBytes;
  const float one = 1.f, zero = 0.f;
  // The workspace is the cuBLAS handle's: both run in stream order on the same stream.
  ZS_CUBLAS_CHECK(cublasLtMatmul(impl_->lt, call.desc, &one, p.b, call.a, p.a, call.b, &zero, p.c, call.c, p.c,
                                 call.c, &call.best.algo, impl_->workspace, ws, impl_->stream));
}

}  // namespace zs
