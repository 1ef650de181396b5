#include "backends/device_info.hpp"

#include <fstream>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs {

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}
}  // namespace

DeviceInfo device_info() {
  DeviceInfo info;
  info.backend = kBackendName;
  info.kokkos_version = str(KOKKOS_VERSION / 10000, ".", KOKKOS_VERSION / 100 % 100, ".",
                            KOKKOS_VERSION % 100);
  info.concurrency = ExecSpace().concurrency();
  info.devices.push_back(str("host: ", cpu_model(), ", ", info.concurrency, " threads (",
                             ExecSpace::name(), ")"));
  return info;
}

std::size_t max_team_scratch_bytes() { return std::size_t(1) << 30; }

}  // namespace zs
