#include "nn/row_block_chain.hpp"

#include <cstddef>
#include <vector>

#include "core/error.hpp"

namespace zs {

RowBlockChain::RowBlockChain(const Network& net, const ParamBuffer& params, const Activations& acts, int rows,
                             const ChainBuffers& buffers, int rows_per_block) {
  const Config& c = net.config();
  require(rows_per_block == 16 || rows_per_block == 32, "RowBlockChain: ", rows_per_block,
          " rows a block; expected 16 or 32");
  const int T = static_cast<int>(c.trunk.size()), K = static_cast<int>(c.branches.size()), heads = 1 + K;
  const int H = c.head_hidden;
  require(rows >= 1 && rows <= acts.rows, "RowBlockChain: ", rows, " rows of activations with ", acts.rows,
          "; expected 1 to ", acts.rows);
  require(static_cast<int>(buffers.d_out.size()) == heads, "RowBlockChain: output gradients for ",
          buffers.d_out.size(), " heads; expected ", heads, " (the value stream and ", K, " branches)");
  require(static_cast<int>(buffers.d_trunk.size()) == T, "RowBlockChain: gradients for ", buffers.d_trunk.size(),
          " trunk layers; expected ", T);
  require(buffers.dz_hidden != nullptr, "RowBlockChain: no buffer for the heads' hidden gradients");
  for (int i = 0; i < T; ++i)
    require(buffers.d_trunk[static_cast<std::size_t>(i)] != nullptr, "RowBlockChain: no gradient buffer for trunk layer ", i);
  const HeadSet set = net.main_heads();
  const int F = c.trunk.back();

  std::vector<int> widths;
  for (int h = 0; h < heads; ++h) widths.push_back(net.head_width(h));
  // A layer of the chain: no bias, no ReLU (the mask is the forward's), its output kept.
  auto masked = [](const float* w, const float* mask, float* out) {
    kernels::RowBlockSegment y;
    y.w = w;
    y.mask = mask;
    y.out = out;
    return y;
  };
  std::vector<kernels::RowBlockLayerShape> shape;
  kernels::RowBlockPass pass;
  pass.rows = rows;
  pass.inputs = buffers.d_out;
  // Each head's output layer: W [its width, H] read as [k, n].
  kernels::RowBlockLayerShape hidden{{}, {}, false, {}};
  std::vector<kernels::RowBlockSegment> hs;
  for (int h = 0; h < heads; ++h) {
    hidden.n.push_back(H);
    hidden.from.push_back(h);
    const float* mask = h == 0 ? acts.value_hidden.data() : acts.branch_hidden[static_cast<std::size_t>(h - 1)].data();
    hs.push_back(masked(params.weight(set.hidden_layer(h) + 1).data(), mask,
                        buffers.dz_hidden + static_cast<std::size_t>(h) * rows * H));
  }
  shape.push_back(hidden);
  pass.layers.push_back(hs);
  // The features: every head's hidden layer, W [H, F], summed.
  kernels::RowBlockSegment features =
      masked(params.weight(set.hidden_layer(0)).data(), acts.trunk[static_cast<std::size_t>(T - 1)].data(),
             buffers.d_trunk[static_cast<std::size_t>(T - 1)]);
  for (int h = 1; h < heads; ++h) features.more_w.push_back(params.weight(set.hidden_layer(h)).data());
  shape.push_back({{F}, {0}, false, {heads}});
  pass.layers.push_back({features});
  // Down the trunk: layer i's W [trunk[i], trunk[i − 1]] takes its gradient to layer i − 1's.
  for (int i = T - 1; i >= 1; --i) {
    const std::size_t below = static_cast<std::size_t>(i - 1);
    shape.push_back({{c.trunk[below]}, {0}, false, {}});
    pass.layers.push_back({masked(params.weight(i).data(), acts.trunk[below].data(), buffers.d_trunk[below])});
  }
  launch_ = kernels::RowBlockLaunchOfRows<ExecSpace, true>(rows_per_block, widths, shape,
                                                            std::vector<kernels::RowBlockPass>{pass});
}

}  // namespace zs
