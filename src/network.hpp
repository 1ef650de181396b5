// Forward and backward of the BDQ-C51 network over a flat parameter buffer: GEMMs through the
// backend, bias/ReLU/dueling/log-softmax through Kokkos kernels. Buffers for activations are
// made once per row count (Activations) and reused by every step.
#pragma once
#include <vector>

#include "backends/gemm.hpp"
#include "kernels/c51_head.hpp"
#include "param_buffer.hpp"

namespace zs {

using MatrixView = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using ConstMatrixView = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
using LogProbs = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;

// Row-major [rows, cols] view of a flat buffer, starting `row0` rows in.
MatrixView as_matrix(const DeviceFloats& flat, int rows, int cols, int row0 = 0);

// Everything a forward pass leaves behind, for `rows` input rows.
struct Activations {
  int rows = 0;
  std::vector<DeviceFloats> trunk;          // [rows, trunk[i]] post-ReLU
  DeviceFloats value_hidden, value_out;     // [rows, head_hidden] post-ReLU, [rows, atoms]
  std::vector<DeviceFloats> branch_hidden;  // per branch [rows, head_hidden] post-ReLU
  DeviceFloats branch_out;                  // flat, branch k = [rows, n_k·atoms] (BranchTable)
  LogProbs logp;                            // [rows, A, atoms]
  Activations(const Config& c, int rows);
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

class Network {
 public:
  Network(const Config& config, const ParamLayout& layout);

  const Config& config() const { return config_; }
  const kernels::BranchTable<ExecSpace>& table() const { return table_; }
  int actions() const { return table_.actions; }

  // acts ← net(params, input); input is [acts.rows, state_dim].
  void forward(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params, const ConstMatrixView& input,
               Activations& acts) const;

  // grad ← ∂loss/∂params from g.d_value_out and g.d_branch_out, for the first g.rows rows of
  // `acts` (whose input was `input`). Every gradient tensor is overwritten (none accumulated).
  void backward(const ExecSpace& exec, const Gemm& gemm, const ParamBuffer& params, const ConstMatrixView& input,
                const Activations& acts, Gradients& g, const ParamBuffer& grad) const;

 private:
  // First float of branch k's [rows, n_k·atoms] block in a flat branch buffer (BranchTable).
  std::size_t branch_block(int rows, int k) const {
    return static_cast<std::size_t>(rows) * cum_host_[k] * config_.atoms;
  }

  Config config_;
  std::vector<int> cum_host_;
  int trunk_layers_, value0_, branch0_;  // layer indices into the layout
  Kokkos::View<int*, MemSpace> cum_, branch_of_;
  kernels::BranchTable<ExecSpace> table_;
};

}  // namespace zs
