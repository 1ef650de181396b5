// The elementwise and column-wise pieces of a dense layer around its GEMM: bias + ReLU after
// the forward product, the ReLU mask and the bias gradient (column sums) in the backward pass.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::kernels {

template <class Exec>
using Mat = Kokkos::View<float**, Kokkos::LayoutRight, typename Exec::memory_space, Kokkos::MemoryUnmanaged>;
template <class Exec>
using ConstMat =
    Kokkos::View<const float**, Kokkos::LayoutRight, typename Exec::memory_space, Kokkos::MemoryUnmanaged>;
template <class Exec>
using Vec = Kokkos::View<float*, typename Exec::memory_space, Kokkos::MemoryUnmanaged>;
template <class Exec>
using ConstVec = Kokkos::View<const float*, typename Exec::memory_space, Kokkos::MemoryUnmanaged>;

// A 2-D index space over a row-major matrix: no integer division per element (which cost the
// host step ~5 ms at B = 256), and on CUDA the fast index still runs along a row.
template <class Exec>
Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>> rows_by_cols(const Exec& exec, std::size_t rows, std::size_t cols) {
  return Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {static_cast<std::int64_t>(rows),
                                                                    static_cast<std::int64_t>(cols)});
}

template <class Exec>
struct BiasAct {
  Mat<Exec> y;
  ConstVec<Exec> b;
  bool relu;
  KOKKOS_INLINE_FUNCTION void operator()(const int r, const int c) const {
    const float v = y(r, c) + b(c);
    y(r, c) = (relu && v < 0.f) ? 0.f : v;  // NaN stays NaN: the guard must see it in the loss
  }
};

// y[r, c] += b[c], then ReLU if asked.
template <class Exec>
void bias_act(const Exec& exec, const Mat<Exec>& y, const ConstVec<Exec>& b, bool relu) {
  require(b.extent(0) == y.extent(1), "bias_act: bias has ", b.extent(0), " entries; expected ", y.extent(1),
          " (the output width)");
  Kokkos::parallel_for("zs::bias_act", rows_by_cols(exec, y.extent(0), y.extent(1)), BiasAct<Exec>{y, b, relu});
}

template <class Exec>
struct ReluMask {
  Mat<Exec> dy;
  ConstMat<Exec> y;
  KOKKOS_INLINE_FUNCTION void operator()(const int r, const int c) const {
    if (y(r, c) <= 0.f) dy(r, c) = 0.f;  // a NaN activation keeps its (NaN) gradient
  }
};

// dy *= (y > 0), where y is the layer's post-ReLU output.
template <class Exec>
void relu_backward(const Exec& exec, const Mat<Exec>& dy, const ConstMat<Exec>& y) {
  require(dy.extent(0) == y.extent(0) && dy.extent(1) == y.extent(1), "relu_backward: gradient is [",
          dy.extent(0), ", ", dy.extent(1), "]; expected the activation's shape [", y.extent(0), ", ",
          y.extent(1), "]");
  Kokkos::parallel_for("zs::relu_backward", rows_by_cols(exec, dy.extent(0), dy.extent(1)), ReluMask<Exec>{dy, y});
}

template <class Exec>
struct ColumnSum {
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ConstMat<Exec> dz;
  Vec<Exec> db;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const int c = team.league_rank();
    float s = 0.f;
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, static_cast<int>(dz.extent(0))),
                            [&](const int r, float& acc) { acc += dz(r, c); }, s);
    Kokkos::single(Kokkos::PerTeam(team), [&]() { db(c) = s; });
  }
};

// db[c] = Σ_r dz[r, c]: the bias gradient. One team per column, its threads over the batch
// rows; a team reduction has a fixed order, so the result is the same on every run.
template <class Exec>
void column_sum(const Exec& exec, const ConstMat<Exec>& dz, const Vec<Exec>& db) {
  require(db.extent(0) == dz.extent(1), "column_sum: output has ", db.extent(0), " entries; expected ",
          dz.extent(1));
  Kokkos::parallel_for("zs::column_sum", Kokkos::TeamPolicy<Exec>(exec, static_cast<int>(dz.extent(1)), kAtomTeam),
                       ColumnSum<Exec>{dz, db});
}

}  // namespace zs::kernels
