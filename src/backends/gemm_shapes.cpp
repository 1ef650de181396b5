// Shape checks for zs::Gemm, one copy for every backend.
#include "backends/gemm.hpp"
#include "core/error.hpp"

namespace zs {

void check_gemm_shapes(Trans ta, Trans tb, const GemmIn& a, const GemmIn& b, const GemmOut& c) {
  const auto rows = [](const GemmIn& x, Trans t) { return t == Trans::N ? x.extent(0) : x.extent(1); };
  const auto cols = [](const GemmIn& x, Trans t) { return t == Trans::N ? x.extent(1) : x.extent(0); };
  const char* na = ta == Trans::N ? "A" : "A^T";
  const char* nb = tb == Trans::N ? "B" : "B^T";
  require(cols(a, ta) == rows(b, tb), "gemm: ", na, " is [", rows(a, ta), ", ", cols(a, ta), "] but ",
          nb, " is [", rows(b, tb), ", ", cols(b, tb), "]; expected inner dimensions to match");
  require(c.extent(0) == rows(a, ta) && c.extent(1) == cols(b, tb), "gemm: C is [", c.extent(0), ", ",
          c.extent(1), "]; expected [", rows(a, ta), ", ", cols(b, tb), "] = ", na, "·", nb);
  require(c.extent(0) > 0 && c.extent(1) > 0 && cols(a, ta) > 0,
          "gemm: empty product [", rows(a, ta), ", ", cols(a, ta), "]·[", rows(b, tb), ", ", cols(b, tb),
          "]; expected all dimensions >= 1");
}

void check_gemm_bias(const GemmBias& p) {
  require(p.m >= 1 && p.n >= 1 && p.k >= 1, "gemm with bias: [", p.m, ", ", p.k, "]·[", p.k, ", ", p.n,
          "]; expected all dimensions >= 1");
  require(p.a && p.b && p.c && p.bias, "gemm with bias: a null ", !p.a ? "A" : !p.b ? "B" : !p.c ? "C" : "bias",
          "; expected A, B, C and the bias");
}

}  // namespace zs
