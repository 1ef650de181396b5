// zerosync's one error type, and a helper that builds messages naming the bad value and the
// expected one. Every check that can fail at a call site throws zs::Error.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace zs {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(str(parts...));
}

// The message is formatted only on failure, but the parts are evaluated at the call either way:
// for a costly part (a JSON dump, a list) write `if (!ok) fail(...)` instead.
template <class... Parts>
void require(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}

}  // namespace zs
