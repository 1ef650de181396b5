#include "core/param_layout.hpp"

#include "core/error.hpp"

namespace zs {

std::size_t TensorDesc::size() const {
  std::size_t n = 1;
  for (int d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

ParamLayout::ParamLayout(const Config& config, const std::vector<LayerShape>& extra) {
  config.validate();
  std::size_t cursor = 0;
  auto place = [&](std::size_t n) {
    const std::size_t at = cursor;
    cursor += (n + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  auto add = [&](const std::string& name, int in, int out) {
    LayerDesc l{name, in, out, 0, 0};
    l.weight_offset = place(static_cast<std::size_t>(in) * out);
    l.bias_offset = place(static_cast<std::size_t>(out));
    tensors_.push_back({name + ".weight", {out, in}, l.weight_offset});
    tensors_.push_back({name + ".bias", {out}, l.bias_offset});
    layers_.push_back(l);
  };

  int width = config.state_dim;
  for (std::size_t i = 0; i < config.trunk.size(); ++i) {
    add("trunk." + std::to_string(i), width, config.trunk[i]);
    width = config.trunk[i];
  }
  const int trunk_out = width;
  add("value.0", trunk_out, config.head_hidden);
  add("value.1", config.head_hidden, config.atoms);
  for (std::size_t k = 0; k < config.branches.size(); ++k) {
    const std::string b = "branch." + std::to_string(k);
    add(b + ".0", trunk_out, config.head_hidden);
    add(b + ".1", config.head_hidden, config.branches[k] * config.atoms);
  }
  // The loss terms' layers come after the network's, so its names and offsets never move.
  for (const auto& l : extra) {
    for (const auto& seen : layers_)
      require(seen.name != l.name, "ParamLayout: layer '", l.name, "' is added twice; expected unique names");
    require(l.in >= 1 && l.out >= 1, "ParamLayout: layer '", l.name, "' is ", l.out, " x ", l.in,
            "; expected positive sizes");
    add(l.name, l.in, l.out);
  }
  size_ = cursor;
  trunk_layers_ = static_cast<int>(config.trunk.size());
  branch_count_ = static_cast<int>(config.branches.size());
}

std::pair<std::size_t, std::size_t> ParamLayout::layers_span(int first_layer, int last_layer) const {
  const int n = static_cast<int>(layers_.size());
  require(first_layer >= 0 && first_layer <= last_layer && last_layer < n, "ParamLayout::layers_span: layers ",
          first_layer, " to ", last_layer, "; expected 0 <= first <= last < ", n);
  const LayerDesc& last = layers_[static_cast<std::size_t>(last_layer)];
  const std::size_t end = last.bias_offset + (static_cast<std::size_t>(last.out) + kAlign - 1) / kAlign * kAlign;
  return {layers_[static_cast<std::size_t>(first_layer)].weight_offset, end};
}

std::size_t ParamLayout::parameter_count() const {
  std::size_t n = 0;
  for (const auto& t : tensors_) n += t.size();
  return n;
}

const TensorDesc& ParamLayout::tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  fail("ParamLayout: no tensor named '", name, "'; expected a name like 'trunk.0.weight' (",
       tensors_.size(), " tensors in this layout)");
}

const LayerDesc& ParamLayout::layer(const std::string& name) const { return layers_[layer_index(name)]; }

int ParamLayout::layer_index(const std::string& name) const {
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].name == name) return static_cast<int>(i);
  fail("ParamLayout: no layer named '", name, "'; expected a name like 'trunk.0' or 'branch.1.0'");
}

}  // namespace zs
