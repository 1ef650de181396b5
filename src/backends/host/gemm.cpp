// Host GEMM through Kokkos Kernels, which hands LayoutRight float products to OpenBLAS' sgemm.
// Kokkos Kernels 3.4 takes no execution-space instance; on the host that is the one instance
// the step uses anyway. Both precisions are exact FP32 here.
#include <KokkosBlas3_gemm.hpp>
#include <cstdlib>

#include "backends/gemm.hpp"

namespace zs {

extern "C" void openblas_set_num_threads(int);

struct Gemm::Impl {};

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
  const int ar = g.ta == Trans::N ? g.m : g.k, ac = g.ta == Trans::N ? g.k : g.m;
  const int br = g.tb == Trans::N ? g.k : g.n, bc = g.tb == Trans::N ? g.n : g.k;
  for (const GemmEntry& e : g.entries)
    (*this)(g.ta, g.tb, g.alpha, GemmIn(e.a, ar, ac), GemmIn(e.b, br, bc), g.beta, GemmOut(e.c, g.m, g.n));
}

}  // namespace zs
