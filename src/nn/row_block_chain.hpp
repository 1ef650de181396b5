// The input-gradient chain of the main head set and the trunk as one row-block launch
// (kernels/row_block_mlp.hpp, weights read transposed): from ∂loss/∂(each head's output) through
// each output layer's W to its hidden layer, the hidden layers' gradients through their W summed
// into the features, then down the trunk, each layer masked by its forward's ReLU. It writes
// what the fused step's input-gradient products write (each head's gradient below its ReLU, every
// trunk layer's), for the weight gradients to read; FusedOptions::row_block_backward puts it in
// the C51 step between the loss and one phase of every weight gradient.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/row_block_mlp.hpp"
#include "nn/network.hpp"

namespace zs {

struct ChainBuffers {
  // Per head (0: the value stream, 1 + k: branch k), the sources summed into ∂loss/∂(its output),
  // [B, its width] each, rows of its own leading dimension.
  std::vector<std::vector<kernels::RowBlockSource>> d_out;
  float* dz_hidden = nullptr;        // [1 + K][B][head_hidden]: each head's gradient below its ReLU
  std::vector<float*> d_trunk;       // per trunk layer [B, trunk[i]], below its ReLU
};

class RowBlockChain {
 public:
  // The first `rows` rows of `acts` (the online net on s): its masks. rows_per_block: 16 or 32.
  // Throws zs::Error naming what does not fit the network.
  RowBlockChain(const Network& net, const ParamBuffer& params, const Activations& acts, int rows,
                const ChainBuffers& buffers, int rows_per_block = 32);
  // One launch; no allocation, no sync. clocks: RowBlockMlpLaunch's, when given.
  void enqueue(const ExecSpace& exec, std::uint64_t* clocks = nullptr) const { launch_(exec, clocks); }

  int teams() const { return launch_.teams(); }
  int layers() const { return launch_.layers(); }
  std::size_t scratch_bytes() const { return launch_.scratch_bytes(); }

 private:
  kernels::RowBlockLaunchOfRows<ExecSpace, true> launch_;
};

}  // namespace zs
