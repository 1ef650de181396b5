// Host GEMM through Kokkos Kernels, which hands LayoutRight float products to OpenBLAS' sgemm;
// a batch of products goes straight to OpenBLAS, one product per core.
// Kokkos Kernels 3.4 takes no execution-space instance; on the host that is the one instance
// the step uses anyway. Both precisions are exact FP32 here.
#include <KokkosBlas3_gemm.hpp>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>

#include "backends/gemm.hpp"

namespace zs {

extern "C" void openblas_set_num_threads(int);

struct Gemm::Impl {};

namespace {
// Rows [r0, r0 + rows) of C = alpha·op(A)·op(B) + beta·C, row-major, one single-threaded sgemm:
// a core's share of a product.
void sgemm_rows(Trans ta, Trans tb, int r0, int rows, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc) {
  // Rows r0.. of op(A): rows of A, or columns of a transposed A.
  const float* const a0 = a + (ta == Trans::N ? static_cast<std::size_t>(r0) * lda : static_cast<std::size_t>(r0));
  cblas_sgemm(CblasRowMajor, ta == Trans::N ? CblasNoTrans : CblasTrans, tb == Trans::N ? CblasNoTrans : CblasTrans,
              rows, n, k, alpha, a0, lda, b, ldb, beta, c + static_cast<std::size_t>(r0) * ldc, ldc);
}
}  // namespace

Gemm::Gemm(Stream&, Precision precision) : precision_(precision), impl_(std::make_unique<Impl>()) {
  // OpenBLAS' own threads fight Kokkos' OpenMP threads, which keep spinning between kernels:
  // on 2 cores that made a step 3x slower (docs/performance.md). One BLAS thread, unless the
  // user asked for more.
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
}
Gemm::~Gemm() = default;

void Gemm::operator()(Trans ta, Trans tb, float alpha, const GemmIn& a, const GemmIn& b, float beta,
                      const GemmOut& c) const {
  check_gemm_shapes(ta, tb, a, b, c);
  KokkosBlas::gemm(ta == Trans::N ? "N" : "T", tb == Trans::N ? "N" : "T", alpha, a, b, beta, c);
}

void Gemm::operator()(const GemmBatch& g) const {
  // The products of a batch are independent: the cores take them, one single-threaded OpenBLAS
  // call each (Kokkos Kernels' gemm takes no thread of its own to run on), instead of one
  // product after another on one core. When there are fewer products than twice the cores,
  // each is cut into row bands of C so that the cores finish together.
  const int count = g.count(), threads = omp_get_max_threads();
  const int bands = std::max(1, std::min((2 * threads + count - 1) / count, g.m / 16));
  const int band_rows = (g.m + bands - 1) / bands;
#pragma omp parallel for schedule(dynamic, 1) if (count * bands > 1)
  for (int t = 0; t < count * bands; ++t) {
    const GemmEntry& e = g.entries[t / bands];
    const int r0 = (t % bands) * band_rows, rows = std::min(band_rows, g.m - r0);
    if (rows > 0)
      sgemm_rows(g.ta, g.tb, r0, rows, g.n, g.k, g.alpha, e.a, g.lda(), e.b, g.ldb(), g.beta, e.c, g.ldc());
  }
}

void Gemm::operator()(const GemmBias& p) const {
  check_gemm_bias(p);
  // Row bands of C across the cores; each core adds the bias (and ReLU) to its band while it is
  // still in its cache.
  const int threads = omp_get_max_threads();
  const int bands = std::max(1, std::min(2 * threads, p.m / 16));
  const int band_rows = (p.m + bands - 1) / bands;
#pragma omp parallel for schedule(dynamic, 1) if (bands > 1)
  for (int t = 0; t < bands; ++t) {
    const int r0 = t * band_rows, rows = std::min(band_rows, p.m - r0);
    if (rows <= 0) continue;
    sgemm_rows(p.ta, p.tb, r0, rows, p.n, p.k, 1.f, p.a, p.lda(), p.b, p.ldb(), 0.f, p.c, p.n);
    float* const c = p.c + static_cast<std::size_t>(r0) * p.n;
    for (std::size_t i = 0; i < static_cast<std::size_t>(rows) * p.n; ++i) {
      const float y = c[i] + p.bias[i % p.n];
      c[i] = p.relu && y < 0.f ? 0.f : y;  // NaN stays NaN, as in kernels::BiasActBatch
    }
  }
}

}  // namespace zs
