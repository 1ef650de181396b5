#include "core/config.hpp"
#include "core/error.hpp"
#include "json_input.hpp"
#include "targets.hpp"

namespace zs::fuzz {

int config(const std::uint8_t* data, std::size_t size) {
  const auto j = json_input(data, size);
  if (!j) return 0;
  Config c;
  try {
    c = Config::from_json(*j);
  } catch (const Error&) {
    return 0;
  }
  // Accepted means valid, and written back it reads back the same.
  try {
    c.validate();
  } catch (const Error& e) {
    finding("config", e.what());
  }
  const nlohmann::json out = c.to_json();
  if (Config::from_json(out).to_json() != out) finding("config", "to_json -> from_json changed the config");
  if (Config::from_json(nlohmann::json::parse(out.dump())).to_json() != out)
    finding("config", "the config's JSON text read back differently");
  return 0;
}

}  // namespace zs::fuzz
