// Where every weight and bias of the BDQ-C51 network lives inside one flat float buffer.
// Online parameters, target copy, gradients and Adam's m and v all share this layout, so one
// offset names the same scalar in each of them. Computed once, on the host, from the Config.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"

namespace zs {

// One dense layer y = W x + b, W stored row-major [out, in] (PyTorch nn.Linear layout).
struct LayerDesc {
  std::string name;          // e.g. "trunk.0", "value.1", "branch.2.0"
  int in = 0, out = 0;
  std::size_t weight_offset = 0;  // floats from the start of the buffer
  std::size_t bias_offset = 0;
};

// A layer a loss term adds to the layout, after the network's own.
struct LayerShape {
  std::string name;  // e.g. "iqn.0", "ensemble.1.value.0"
  int in = 0, out = 0;
};

// One named tensor of the buffer ("trunk.0.weight", "trunk.0.bias", ...).
struct TensorDesc {
  std::string name;
  std::vector<int> shape;  // [out, in] for weights, [out] for biases
  std::size_t offset = 0;
  std::size_t size() const;
};

class ParamLayout {
 public:
  // Every tensor starts on a 32-float (128-byte) boundary, for coalesced and vector access.
  static constexpr std::size_t kAlign = 32;

  // The network's layers, then `extra` in order (the loss terms' own layers: the loss registry's
  // layout_for() lists them). Names must be unique.
  explicit ParamLayout(const Config& config, const std::vector<LayerShape>& extra = {});

  // Order: trunk.0..T-1, value.0, value.1, branch.0.0, branch.0.1, branch.1.0, ..., then `extra`.
  const std::vector<LayerDesc>& layers() const { return layers_; }
  const std::vector<TensorDesc>& tensors() const { return tensors_; }
  // Floats in the buffer, padding included (padding is zero and stays zero).
  std::size_t size() const { return size_; }
  // Parameters without padding.
  std::size_t parameter_count() const;
  // Throws zs::Error naming `name` when no tensor has it.
  const TensorDesc& tensor(const std::string& name) const;
  const LayerDesc& layer(const std::string& name) const;
  // Index of layer `name` in layers(); throws zs::Error naming it when there is none.
  int layer_index(const std::string& name) const;

  // Floats [first, last) of layers first_layer … last_layer together: from the first's weight to
  // the end of the last's bias, its padding included (the layers between lie in between).
  std::pair<std::size_t, std::size_t> layers_span(int first_layer, int last_layer) const;

  int trunk_layers() const { return trunk_layers_; }
  int branch_count() const { return branch_count_; }
  // Layers of one C51 head set (value.0, value.1, branch.k.0, branch.k.1, …): 2 + 2·branches.
  int head_set_layers() const { return 2 + 2 * branch_count_; }

 private:
  std::vector<LayerDesc> layers_;
  std::vector<TensorDesc> tensors_;
  std::size_t size_ = 0;
  int trunk_layers_ = 0, branch_count_ = 0;
};

}  // namespace zs
