// Blocking copies between a device View and a std::vector (element-wise static_cast), for
// checkpoints, tools and tests' set-up — never inside a step.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs {

template <class T, class View>
std::vector<T> download(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<T> out(h.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(h.data()[i]);
  return out;
}

// The elements in the View's own type.
template <class View>
std::vector<typename View::non_const_value_type> download(const View& v) {
  return download<typename View::non_const_value_type>(v);
}

template <class View, class T>
void upload(const View& v, const std::vector<T>& data) {
  auto h = Kokkos::create_mirror_view(v);
  require(h.size() == data.size(), "upload: ", data.size(), " values for a buffer of ", h.size());
  for (std::size_t i = 0; i < data.size(); ++i)
    h.data()[i] = static_cast<typename View::non_const_value_type>(data[i]);
  Kokkos::deep_copy(v, h);
}

// A table the kernels read (descriptors, pointers), made once from host values: a new View of
// the vector's length in memory space Mem, filled by one blocking copy.
template <class Mem, class T>
Kokkos::View<T*, Mem> device_table(const std::string& label, const std::vector<T>& host) {
  Kokkos::View<T*, Mem> t(label, host.size());
  auto h = Kokkos::create_mirror_view(t);
  for (std::size_t i = 0; i < host.size(); ++i) h(i) = host[i];
  Kokkos::deep_copy(t, h);
  return t;
}

}  // namespace zs
