// One flat device buffer laid out by ParamLayout, with per-layer views made once at
// construction so that the step never computes an offset or looks a name up.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"
#include "core/param_layout.hpp"

namespace zs {

class ParamBuffer {
 public:
  using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
  using Vector = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>;

  ParamBuffer(const ParamLayout& layout, const std::string& label)
      : ParamBuffer(layout, DeviceFloats(label, layout.size())) {}  // Kokkos zero-fills: padding starts and stays zero
  // A buffer over memory someone else allocated (a slice of a larger View, which it keeps alive):
  // exactly layout.size() floats.
  ParamBuffer(const ParamLayout& layout, const DeviceFloats& storage) : flat_(storage) {
    require(flat_.extent(0) == layout.size(), "ParamBuffer: storage of ", flat_.extent(0), " floats; expected ",
            layout.size(), ", the layout's size");
    for (const auto& l : layout.layers()) {
      weights_.emplace_back(flat_.data() + l.weight_offset, l.out, l.in);
      biases_.emplace_back(flat_.data() + l.bias_offset, l.out);
    }
  }

  const DeviceFloats& flat() const { return flat_; }
  const Matrix& weight(int layer) const { return weights_.at(layer); }
  const Vector& bias(int layer) const { return biases_.at(layer); }
  std::size_t size() const { return flat_.extent(0); }

 private:
  DeviceFloats flat_;
  std::vector<Matrix> weights_;
  std::vector<Vector> biases_;
};

// Host copies of one tensor of a buffer, and the reverse (row-major like PyTorch's). Blocking, and
// they do not wait for other work on a stream: for set-up, tools and checkpoints, never a step.
inline std::vector<float> download_tensor(const ParamBuffer& buf, const TensorDesc& t) {
  auto sub = Kokkos::subview(buf.flat(), std::make_pair(t.offset, t.offset + t.size()));
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sub);
  return std::vector<float>(host.data(), host.data() + host.size());
}
inline void upload_tensor(const ParamBuffer& buf, const TensorDesc& t, const std::vector<float>& data) {
  require(data.size() == t.size(), "upload_tensor: '", t.name, "' given ", data.size(), " values; expected ", t.size());
  auto sub = Kokkos::subview(buf.flat(), std::make_pair(t.offset, t.offset + t.size()));
  Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> host(data.data(), data.size());
  Kokkos::deep_copy(sub, host);
}

}  // namespace zs
