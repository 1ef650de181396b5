// What the program runs on, for `zerosync` to print: backend, Kokkos version, devices.
#pragma once
#include <string>
#include <vector>

namespace zs {

struct DeviceInfo {
  std::string backend;          // "cuda" or "openmp"
  std::string kokkos_version;   // e.g. "3.4.1"
  std::vector<std::string> devices;  // one human-readable line per device
  int concurrency = 0;          // threads (host) or resident threads (GPU) of the instance
};

DeviceInfo device_info();

}  // namespace zs
