#include "app/build_info.hpp"

#include "backends/device_info.hpp"
#include "core/config.hpp"
#include "core/param_layout.hpp"

namespace zs {

void print_build_info(std::ostream& os) {
  const DeviceInfo info = device_info();
  os << "zerosync " << ZEROSYNC_VERSION << "\n"
     << "  backend:        " << info.backend << "\n"
     << "  Kokkos:         " << info.kokkos_version << "\n"
     << "  concurrency:    " << info.concurrency << "\n";
  for (const auto& d : info.devices) os << "  device:         " << d << "\n";
  const Config ref;
  const ParamLayout layout(ref);
  os << "  reference net:  state " << ref.state_dim << ", trunk " << ref.trunk[0] << "x"
     << ref.trunk.size() << ", heads " << ref.head_hidden << ", branches " << ref.branches.size()
     << ", atoms " << ref.atoms << ": " << layout.parameter_count() << " parameters in "
     << layout.layers().size() << " layers (" << layout.size() << " floats with padding)\n";
}

}  // namespace zs
