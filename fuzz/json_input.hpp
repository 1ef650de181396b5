// The JSON value of a fuzz input, as the config readers' callers get it from a file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

namespace zs::fuzz {

// nullopt when the bytes are not one JSON value: parsing is nlohmann::json's, and what it
// refuses (a syntax error, a number beyond double) never reaches the readers under test.
inline std::optional<nlohmann::json> json_input(const std::uint8_t* data, std::size_t size) {
  try {
    return nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace zs::fuzz
