// Turns the exceptions of the standard library, nlohmann::json and Kokkos into a zs::Error that
// says what the program was doing, so that a failure deep in a reader or an allocation reaches
// the user as "what, where, why" instead of a bare "std::bad_alloc" or an abort.
#pragma once
#include <string>

#include "core/error.hpp"

namespace zs {

// Rethrows the exception being handled: a zs::Error as it is (it already names its input);
// anything else as a zs::Error "<doing>: <why>". Call only inside a catch block.
[[noreturn]] void rethrow_explained(const std::string& doing);

// f(), with its exceptions passed through rethrow_explained(doing).
template <class F>
auto explained(const std::string& doing, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    rethrow_explained(doing);
  }
}

}  // namespace zs
