#include "core/error.hpp"
#include "json_input.hpp"
#include "rl/train_config.hpp"
#include "targets.hpp"

namespace zs::fuzz {

int train_config(const std::uint8_t* data, std::size_t size) {
  const auto j = json_input(data, size);
  if (!j) return 0;
  TrainConfig c;
  try {
    c = TrainConfig::from_json(*j);
  } catch (const Error&) {
    return 0;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    finding("train_config", e.what());
  }
  // A run's config.json is this text, and --resume reads it back: it must be the same run.
  const nlohmann::json out = c.to_json();
  if (TrainConfig::from_json(nlohmann::json::parse(out.dump())).to_json() != out)
    finding("train_config", "config.json as written read back as another config");
  return 0;
}

}  // namespace zs::fuzz
