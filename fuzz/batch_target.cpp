#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.hpp"
#include "core/host_batch.hpp"
#include "targets.hpp"

namespace zs::fuzz {

const char* fuzz_batch_config() {
  return R"({"state_dim": 4, "trunk": [8], "head_hidden": 4, "branches": [2, 3], "atoms": 5, "precision": "fp32"})";
}

int batch(const std::uint8_t* data, std::size_t size) {
  static const Config c = Config::from_json(nlohmann::json::parse(fuzz_batch_config()));
  HostBatch b;
  try {
    b = batch_from(safetensors::parse(std::vector<std::uint8_t>(data, data + size), "fuzz"), c);
  } catch (const Error&) {
    return 0;
  }
  const auto B = static_cast<std::size_t>(b.size), S = static_cast<std::size_t>(c.state_dim), K = c.branches.size();
  if (b.size < 1) finding("batch", "accepted an empty batch");
  if (b.states.size() != B * S || b.next_states.size() != B * S || b.actions.size() != B * K ||
      b.rewards.size() != B || b.dones.size() != B || b.weights.size() != B)
    finding("batch", "accepted a batch whose tensors disagree with its size");
  return 0;
}

}  // namespace zs::fuzz
