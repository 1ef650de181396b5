#include <cstdio>
#include <cstdlib>

#include "targets.hpp"

namespace zs::fuzz {

void finding(const char* target, const char* what) {
  std::fprintf(stderr, "zerosync fuzz target '%s': %s\n", target, what);
  std::abort();
}

}  // namespace zs::fuzz
