#include "core/seed.hpp"

#include <limits>

#include "core/error.hpp"

namespace zs {

std::uint64_t parse_seed(const std::string& text, const std::string& what) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  const auto refuse = [&] {
    // A hostile value can be long; the start of it is enough to recognise it.
    const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    fail(what, " = ", shown, " is invalid; expected an integer in [0, ", kMax, "]");
  };
  if (text.empty()) refuse();
  std::uint64_t v = 0;
  for (const char ch : text) {
    if (ch < '0' || ch > '9') refuse();
    const auto digit = static_cast<std::uint64_t>(ch - '0');
    if (v > (kMax - digit) / 10) refuse();
    v = v * 10 + digit;
  }
  return v;
}

}  // namespace zs
