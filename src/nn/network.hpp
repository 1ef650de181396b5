// Forward and backward of the BDQ-C51 network over a flat parameter buffer: GEMMs through the
// backend, bias/ReLU/dueling/log-softmax through Kokkos kernels. Buffers for activations are
// made once per row count (Activations) and reused by every step.
#pragma once
#include <cstddef>
#include <vector>

#include "backends/gemm.hpp"
#include "kernels/c51_head.hpp"
#include "nn/param_buffer.hpp"

namespace zs {

using MatrixView = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using ConstMatrixView = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using LogProbs = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;

// Row-major [rows, cols] view of a flat buffer, starting `row0` rows in.
MatrixView as_matrix(const DeviceFloats& flat, int rows, int cols, int row0 = 0);

// What one C51 head set (value stream + branches, dueling, log-softmax) leaves behind for
// `rows` rows. Views are shared, not copied: Activations::heads() and the ensemble hand these out.
struct HeadActs {
  int rows = 0;
  DeviceFloats value_hidden, value_out;
  std::vector<DeviceFloats> branch_hidden;
  DeviceFloats branch_out;
  LogProbs logp;
  // Stacked (Activations::stack_heads): every head's hidden activations side by side, [rows,
  // stacked·head_hidden], head h (0 the value stream, 1 + k branch k) at column h·head_hidden;
  // value_hidden and branch_hidden are then empty. stacked = 0: the per-head buffers.
  DeviceFloats heads_hidden;
  int stacked = 0;
  // Head h's hidden activations at row 0, and how many floats apart its rows are.
  float* hidden(int h, int head_hidden) const {
    if (stacked > 0) return heads_hidden.data() + static_cast<std::size_t>(h) * head_hidden;
    return h == 0 ? value_hidden.data() : branch_hidden[h - 1].data();
  }
  int hidden_ld(int head_hidden) const { return stacked > 0 ? stacked * head_hidden : head_hidden; }
  HeadActs() = default;
  // Own buffers; logp given (e.g. a slice of a larger buffer) or allocated when empty.
  HeadActs(const Config& c, int rows, LogProbs logp = LogProbs());
};

// Everything a forward pass leaves behind, for `rows` input rows.
struct Activations {
  int rows = 0;
  std::vector<DeviceFloats> trunk;          // [rows, trunk[i]] post-ReLU
  DeviceFloats value_hidden, value_out;     // [rows, head_hidden] post-ReLU, [rows, atoms]
  std::vector<DeviceFloats> branch_hidden;  // per branch [rows, head_hidden] post-ReLU
  DeviceFloats branch_out;                  // flat, branch k = [rows, n_k·atoms] (BranchTable)
  LogProbs logp;                            // [rows, A, atoms]
  DeviceFloats heads_hidden;                // stacked: [rows, heads·head_hidden] (HeadActs::heads_hidden)
  int stacked = 0;                          // heads in heads_hidden; 0: the per-head buffers
  Activations(const Config& c, int rows);
  HeadActs heads() const;
  // The heads' hidden activations side by side in heads_hidden, value_hidden and branch_hidden
  // freed: what the launch plans' stacked forward (ForwardShape::stacked_heads) writes and only
  // the launch plans read.
  void stack_heads(const Config& c);
};

// Gradient buffers of the backward pass for `rows` rows (the s-half of the batch).
struct Gradients {
  int rows = 0;
  DeviceFloats d_value_out;     // [rows, atoms]   — written by the loss
  DeviceFloats d_branch_out;    // flat like Activations::branch_out — written by the loss
  DeviceFloats d_hidden;        // [rows, head_hidden], reused head by head
  std::vector<DeviceFloats> d_trunk;  // [rows, trunk[i]]
  Gradients(const Config& c, int rows);
};

// The layers of one C51 head set: value.0 = value0, value.1 = value0 + 1, branch k's two
// layers = branch0 + 2k, branch0 + 2k + 1 (indices into the layout).
struct HeadSet {
  int value0 = 0, branch0 = 0;
  // Head h's hidden layer (its output layer is the next): h = 0 the value stream, h = 1 + k branch k.
  int hidden_layer(int h) const { return h == 0 ? value0 : branch0 + 2 * (h - 1); }
};

class Network {
 public:
  Network(const Config& config, const ParamLayout& layout);

  const Config& config() const { return config_; }
  const kernels::BranchTable& table() const { return table_; }
  int actions() const { return table_.actions; }

  // acts ← net(params, input); input is [acts.rows, state_dim].
  void forward(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params, const ConstMatrixView& input,
               Activations& acts) const;

  // grad ← ∂loss/∂params from g.d_value_out and g.d_branch_out, for the first g.rows rows of
  // `acts` (whose input was `input`). Every gradient tensor is overwritten (none accumulated).
  // One launch per layer and head: the step runs BackwardPlan instead, and the tests hold the
  // plan to this path and this path to finite differences.
  void backward(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params, const ConstMatrixView& input,
                const Activations& acts, Gradients& g, const ParamBuffer& grad) const;

  // The layers of the main head set (network_plan.hpp takes these).
  HeadSet main_heads() const { return {value0_, branch0_}; }
  // Head h's output columns (h as in HeadSet::hidden_layer): atoms, or n_k·atoms for branch k.
  int head_width(int h) const;
  // Where head h's output rows start in `a`, `row0` rows in (value_out, or branch k's block).
  float* head_out(const Activations& a, int h, int row0) const;

 private:
  // The pieces of forward/backward. h ← head set `set` on `features` [h.rows, trunk.back()].
  void forward_heads(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params, const ConstMatrixView& features,
                     HeadSet set, HeadActs& h) const;
  // Gradients of head set `set` from g.d_value_out / g.d_branch_out (g.rows rows, the first rows of
  // h) into `grad`; its input gradient into d_features [g.rows, trunk.back()], overwritten or,
  // with accumulate, added.
  void backward_heads(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params,
                      const ConstMatrixView& features, HeadSet set, const HeadActs& h, Gradients& g,
                      const ParamBuffer& grad, const MatrixView& d_features, bool accumulate) const;
  // Trunk gradients into `grad` from g.d_trunk.back() (∂loss/∂features, g.rows rows); uses the
  // other g.d_trunk buffers as scratch.
  void backward_trunk(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params, const ConstMatrixView& input,
                      const Activations& acts, Gradients& g, const ParamBuffer& grad) const;

  Config config_;
  int trunk_layers_, value0_, branch0_;  // layer indices into the layout
  kernels::BranchTable table_;
};

}  // namespace zs
