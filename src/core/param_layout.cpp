#include "core/param_layout.hpp"

#include "core/error.hpp"

namespace zs {

std::size_t TensorDesc::size() const {
  std::size_t n = 1;
  for (int d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

ParamLayout::ParamLayout(const Config& config) {
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
  // Auxiliaries (issue 6) come after the network, so its names and offsets never move.
  if (config.iqn.on) {
    iqn_layer_ = static_cast<int>(layers_.size());
    add("iqn.embed", config.iqn.embed_dim, trunk_out);
    add("iqn.0", trunk_out, config.head_hidden);
    add("iqn.1", config.head_hidden, config.total_actions());
  }
  for (int e = 0; e < config.ensemble.k; ++e) {
    const std::string m = "ensemble." + std::to_string(e);
    if (e == 0) ensemble_layer_ = static_cast<int>(layers_.size());
    add(m + ".value.0", trunk_out, config.head_hidden);
    add(m + ".value.1", config.head_hidden, config.atoms);
    for (std::size_t k = 0; k < config.branches.size(); ++k) {
      const std::string b = m + ".branch." + std::to_string(k);
      add(b + ".0", trunk_out, config.head_hidden);
      add(b + ".1", config.head_hidden, config.branches[k] * config.atoms);
    }
  }
  size_ = cursor;
  trunk_layers_ = static_cast<int>(config.trunk.size());
  branch_count_ = static_cast<int>(config.branches.size());
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

const LayerDesc& ParamLayout::layer(const std::string& name) const {
  for (const auto& l : layers_)
    if (l.name == name) return l;
  fail("ParamLayout: no layer named '", name, "'; expected a name like 'trunk.0' or 'branch.1.0'");
}

}  // namespace zs
