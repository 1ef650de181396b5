// What the program runs on, for `zerosync` to print: backend, Kokkos version, devices.
#pragma once
#include <cstddef>
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

// The most team scratch one team may ask for: on CUDA the current device's opt-in shared memory
// a block (227 KiB on Hopper; cmake/bootstrap/patch_kokkos.py lets Kokkos give it) less 1 KiB
// that Kokkos keeps for itself; on the host no limit that a kernel here could reach.
std::size_t max_team_scratch_bytes();

}  // namespace zs
