#include "nn/network.hpp"

#include <cstddef>

#include "kernels/dense.hpp"

namespace zs {

namespace {
using kernels::ConstMat;
using kernels::ConstVec;
using kernels::Mat;
using kernels::Vec;

ConstMatrixView as_const(const MatrixView& m) { return ConstMatrixView(m.data(), m.extent(0), m.extent(1)); }
ConstVec<ExecSpace> as_const(const ParamBuffer::Vector& v) { return ConstVec<ExecSpace>(v.data(), v.extent(0)); }
}  // namespace

MatrixView as_matrix(const DeviceFloats& flat, int rows, int cols, int row0) {
  require(static_cast<std::size_t>(row0 + rows) * cols <= flat.extent(0), "as_matrix: rows ", row0, "..",
          row0 + rows, " of width ", cols, " exceed a buffer of ", flat.extent(0), " floats");
  return MatrixView(flat.data() + static_cast<std::size_t>(row0) * cols, rows, cols);
}

HeadActs::HeadActs(const Config& c, int r, LogProbs lp) : rows(r) {
  require(r >= 1, "HeadActs: rows = ", r, "; expected at least 1");
  value_hidden = DeviceFloats("zs::act::value_hidden", std::size_t(r) * c.head_hidden);
  value_out = DeviceFloats("zs::act::value_out", std::size_t(r) * c.atoms);
  for (std::size_t k = 0; k < c.branches.size(); ++k)
    branch_hidden.emplace_back("zs::act::branch_hidden", std::size_t(r) * c.head_hidden);
  branch_out = DeviceFloats("zs::act::branch_out", std::size_t(r) * c.total_actions() * c.atoms);
  if (lp.data() == nullptr) lp = LogProbs("zs::act::logp", r, c.total_actions(), c.atoms);
  require(static_cast<int>(lp.extent(0)) == r && static_cast<int>(lp.extent(1)) == c.total_actions() &&
              static_cast<int>(lp.extent(2)) == c.atoms,
          "HeadActs: logp is [", lp.extent(0), ", ", lp.extent(1), ", ", lp.extent(2), "]; expected [", r, ", ",
          c.total_actions(), ", ", c.atoms, "]");
  logp = lp;
}

Activations::Activations(const Config& c, int r) : rows(r) {
  require(r >= 1, "Activations: rows = ", r, "; expected at least 1");
  for (int w : c.trunk) trunk.emplace_back("zs::act::trunk", std::size_t(r) * w);
  value_hidden = DeviceFloats("zs::act::value_hidden", std::size_t(r) * c.head_hidden);
  value_out = DeviceFloats("zs::act::value_out", std::size_t(r) * c.atoms);
  for (std::size_t k = 0; k < c.branches.size(); ++k)
    branch_hidden.emplace_back("zs::act::branch_hidden", std::size_t(r) * c.head_hidden);
  branch_out = DeviceFloats("zs::act::branch_out", std::size_t(r) * c.total_actions() * c.atoms);
  logp = LogProbs("zs::act::logp", r, c.total_actions(), c.atoms);
}

HeadActs Activations::heads() const {
  HeadActs h;
  h.rows = rows;
  h.value_hidden = value_hidden;
  h.value_out = value_out;
  h.branch_hidden = branch_hidden;
  h.branch_out = branch_out;
  h.logp = logp;
  h.heads_hidden = heads_hidden;
  h.stacked = stacked;
  return h;
}

void Activations::stack_heads(const Config& c) {
  stacked = 1 + static_cast<int>(c.branches.size());
  heads_hidden = DeviceFloats("zs::act::heads_hidden", std::size_t(rows) * stacked * c.head_hidden);
  value_hidden = DeviceFloats();
  for (auto& b : branch_hidden) b = DeviceFloats();
}

Gradients::Gradients(const Config& c, int r) : rows(r) {
  require(r >= 1, "Gradients: rows = ", r, "; expected at least 1");
  d_value_out = DeviceFloats("zs::grad::d_value_out", std::size_t(r) * c.atoms);
  d_branch_out = DeviceFloats("zs::grad::d_branch_out", std::size_t(r) * c.total_actions() * c.atoms);
  d_hidden = DeviceFloats("zs::grad::d_hidden", std::size_t(r) * c.head_hidden);
  for (int w : c.trunk) d_trunk.emplace_back("zs::grad::d_trunk", std::size_t(r) * w);
}

Network::Network(const Config& config, const ParamLayout& layout)
    : config_(config),
      trunk_layers_(layout.trunk_layers()),
      value0_(layout.trunk_layers()),
      branch0_(layout.trunk_layers() + 2),
      table_(kernels::BranchTable::of(config.branches, "Network")) {}

int Network::head_width(int h) const {
  return h == 0 ? config_.atoms : config_.branches[static_cast<std::size_t>(h - 1)] * config_.atoms;
}

float* Network::head_out(const Activations& a, int h, int row0) const {
  const std::size_t row_offset = static_cast<std::size_t>(row0) * head_width(h);
  if (h == 0) return a.value_out.data() + row_offset;
  return a.branch_out.data() + table_.block(a.rows, config_.atoms, h - 1) + row_offset;
}

namespace {
// The per-layer passes write and read each head's own buffer.
void refuse_stacked(const char* who, int stacked) {
  require(stacked == 0, who, ": the heads' hidden activations are stacked (", stacked,
          " heads side by side); expected per-head buffers (stacked ones are the launch plans')");
}
}  // namespace

void Network::forward(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& p, const ConstMatrixView& input,
                      Activations& acts) const {
  refuse_stacked("Network::forward", acts.stacked);
  const Config& c = config_;
  const int R = acts.rows;
  require(static_cast<int>(input.extent(0)) == R && static_cast<int>(input.extent(1)) == c.state_dim,
          "Network::forward: input is [", input.extent(0), ", ", input.extent(1), "]; expected [", R, ", ",
          c.state_dim, "]");
  // Dense layer: y = x·Wᵀ, then + b and ReLU.
  auto dense = [&](const ConstMatrixView& x, int layer, const MatrixView& y, bool relu) {
    gemm(Trans::N, Trans::T, 1.f, x, as_const(p.weight(layer)), 0.f, y);
    kernels::bias_act<ExecSpace>(exec, y, as_const(p.bias(layer)), relu);
  };
  ConstMatrixView x = input;
  for (int i = 0; i < trunk_layers_; ++i) {
    auto y = as_matrix(acts.trunk[i], R, c.trunk[i]);
    dense(x, i, y, true);
    x = as_const(y);
  }
  HeadActs h = acts.heads();
  forward_heads(exec, gemm, p, x, main_heads(), h);
}

void Network::forward_heads(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& p,
                            const ConstMatrixView& features, HeadSet set, HeadActs& h) const {
  const Config& c = config_;
  const int R = h.rows;
  refuse_stacked("Network::forward_heads", h.stacked);
  require(static_cast<int>(features.extent(0)) == R && static_cast<int>(features.extent(1)) == c.trunk.back(),
          "Network::forward_heads: features are [", features.extent(0), ", ", features.extent(1), "]; expected [", R,
          ", ", c.trunk.back(), "]");
  auto dense = [&](const ConstMatrixView& x, int layer, const MatrixView& y, bool relu) {
    gemm(Trans::N, Trans::T, 1.f, x, as_const(p.weight(layer)), 0.f, y);
    kernels::bias_act<ExecSpace>(exec, y, as_const(p.bias(layer)), relu);
  };
  auto vh = as_matrix(h.value_hidden, R, c.head_hidden);
  dense(features, set.value0, vh, true);
  auto vo = as_matrix(h.value_out, R, c.atoms);
  dense(as_const(vh), set.value0 + 1, vo, false);
  for (int k = 0; k < table_.branches; ++k) {
    auto bh = as_matrix(h.branch_hidden[k], R, c.head_hidden);
    dense(features, set.branch0 + 2 * k, bh, true);
    const int width = c.branches[k] * c.atoms;
    MatrixView bo(h.branch_out.data() + table_.block(R, c.atoms, k), R, width);
    dense(as_const(bh), set.branch0 + 2 * k + 1, bo, false);
  }
  kernels::dueling_log_softmax<ExecSpace>(
      exec, as_const(vo), ConstVec<ExecSpace>(h.branch_out.data(), h.branch_out.extent(0)), h.logp, table_);
}

void Network::backward(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& p, const ConstMatrixView& input,
                       const Activations& acts, Gradients& g, const ParamBuffer& grad) const {
  const Config& c = config_;
  const int B = g.rows, T = trunk_layers_, F = c.trunk.back();
  require(B <= acts.rows, "Network::backward: ", B, " gradient rows but only ", acts.rows, " activation rows");
  require(static_cast<int>(input.extent(0)) == B && static_cast<int>(input.extent(1)) == c.state_dim,
          "Network::backward: input is [", input.extent(0), ", ", input.extent(1), "]; expected [", B, ", ",
          c.state_dim, "]");
  const ConstMatrixView features = as_const(as_matrix(acts.trunk[T - 1], B, F));
  backward_heads(exec, gemm, p, features, main_heads(), acts.heads(), g, grad, as_matrix(g.d_trunk[T - 1], B, F), false);
  backward_trunk(exec, gemm, p, input, acts, g, grad);
}

void Network::backward_heads(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& p,
                             const ConstMatrixView& features, HeadSet set, const HeadActs& h, Gradients& g,
                             const ParamBuffer& grad, const MatrixView& d_features, bool accumulate) const {
  const Config& c = config_;
  const int B = g.rows, H = c.head_hidden;
  refuse_stacked("Network::backward_heads", h.stacked);
  require(B <= h.rows && static_cast<int>(features.extent(0)) == B && static_cast<int>(d_features.extent(0)) == B,
          "Network::backward_heads: ", B, " gradient rows, ", h.rows, " activation rows, features ",
          features.extent(0), ", d_features ", d_features.extent(0), "; expected ", B, " each (activations >= ", B, ")");
  // The first B rows of each activation: the s-half of a stacked forward pass.
  auto first_rows = [&](const DeviceFloats& f, int cols) { return as_const(as_matrix(f, B, cols)); };
  const MatrixView dh = as_matrix(g.d_hidden, B, H);

  // Output layer l0+1 and hidden layer l0 of one head; the head's input gradient goes into
  // d_features, overwritten by the first head (beta 0) and accumulated by the others.
  auto head = [&](const ConstMatrixView& d_out, const ConstMatrixView& hidden, int l0, float beta) {
    gemm(Trans::T, Trans::N, 1.f, d_out, hidden, 0.f, grad.weight(l0 + 1));
    kernels::column_sum<ExecSpace>(exec, d_out, grad.bias(l0 + 1));
    gemm(Trans::N, Trans::N, 1.f, d_out, as_const(p.weight(l0 + 1)), 0.f, dh);
    kernels::relu_backward<ExecSpace>(exec, dh, hidden);
    gemm(Trans::T, Trans::N, 1.f, as_const(dh), features, 0.f, grad.weight(l0));
    kernels::column_sum<ExecSpace>(exec, as_const(dh), grad.bias(l0));
    gemm(Trans::N, Trans::N, 1.f, as_const(dh), as_const(p.weight(l0)), beta, d_features);
  };
  head(first_rows(g.d_value_out, c.atoms), first_rows(h.value_hidden, H), set.value0, accumulate ? 1.f : 0.f);
  for (int k = 0; k < table_.branches; ++k) {
    const ConstMatrixView d_out(g.d_branch_out.data() + table_.block(B, c.atoms, k), B, c.branches[k] * c.atoms);
    head(d_out, first_rows(h.branch_hidden[k], H), set.branch0 + 2 * k, 1.f);
  }
}

void Network::backward_trunk(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& p, const ConstMatrixView& input,
                             const Activations& acts, Gradients& g, const ParamBuffer& grad) const {
  const Config& c = config_;
  const int B = g.rows, T = trunk_layers_;
  require(B <= acts.rows && static_cast<int>(input.extent(0)) == B, "Network::backward_trunk: ", B,
          " gradient rows, ", acts.rows, " activation rows, ", input.extent(0), " input rows; expected ", B,
          " (activations >= ", B, ")");
  auto first_rows = [&](const DeviceFloats& f, int cols) { return as_const(as_matrix(f, B, cols)); };
  for (int i = T - 1; i >= 0; --i) {
    const MatrixView dz = as_matrix(g.d_trunk[i], B, c.trunk[i]);
    kernels::relu_backward<ExecSpace>(exec, dz, first_rows(acts.trunk[i], c.trunk[i]));
    const ConstMatrixView x = i == 0 ? input : first_rows(acts.trunk[i - 1], c.trunk[i - 1]);
    gemm(Trans::T, Trans::N, 1.f, as_const(dz), x, 0.f, grad.weight(i));
    kernels::column_sum<ExecSpace>(exec, as_const(dz), grad.bias(i));
    if (i > 0) gemm(Trans::N, Trans::N, 1.f, as_const(dz), as_const(p.weight(i)), 0.f, as_matrix(g.d_trunk[i - 1], B, c.trunk[i - 1]));
  }
}

}  // namespace zs
