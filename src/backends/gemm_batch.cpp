#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "backends/host_copy.hpp"

namespace zs {

GemmBatch::GemmBatch(Trans ta_, Trans tb_, int m_, int n_, int k_, float alpha_, float beta_,
                     std::vector<GemmEntry> entries_)
    : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), alpha(alpha_), beta(beta_), entries(std::move(entries_)) {
  require(!entries.empty(), "GemmBatch: 0 products given; expected at least 1");
  require(m >= 1 && n >= 1 && k >= 1, "GemmBatch: m, n, k = ", m, ", ", n, ", ", k, "; expected each >= 1");
  auto table = [&](const std::string& label, auto pick) {
    std::vector<std::uintptr_t> t;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const void* p = pick(entries[i]);
      require(p != nullptr, "GemmBatch: product ", i, " has a null ", label, " pointer; expected a matrix");
      t.push_back(reinterpret_cast<std::uintptr_t>(p));
    }
    return device_table<MemSpace>(label, t);
  };
  a_table = table("zs::gemm_batch::a", [](const GemmEntry& e) -> const void* { return e.a; });
  b_table = table("zs::gemm_batch::b", [](const GemmEntry& e) -> const void* { return e.b; });
  c_table = table("zs::gemm_batch::c", [](const GemmEntry& e) -> const void* { return e.c; });
}

GemmBatch& GemmBatch::with_ld(int a, int b, int c) {
  const int da = ta == Trans::N ? k : m, db = tb == Trans::N ? n : k;
  require((a == 0 || a >= da) && (b == 0 || b >= db) && (c == 0 || c >= n), "GemmBatch: row widths ", a, ", ", b,
          ", ", c, " for A, B, C; expected 0 (dense) or at least the dense widths ", da, ", ", db, ", ", n);
  a_ld = a;
  b_ld = b;
  c_ld = c;
  return *this;
}

}  // namespace zs
