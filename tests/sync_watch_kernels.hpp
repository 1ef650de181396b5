// What the SyncWatch tests record in a graph body: a flat kernel and a reduction over device
// floats (both legal inside a step), and the watch's findings as one printable text.
#pragma once
#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace zs::test {

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

struct Iota {
  DeviceFloats x;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const { x(i) = static_cast<float>(i); }
};

struct Sum {
  DeviceFloats x;
  KOKKOS_INLINE_FUNCTION void operator()(const int i, float& s) const { s += x(i); }
};

}  // namespace zs::test
