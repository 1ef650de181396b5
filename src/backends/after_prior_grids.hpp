// A kernel that may start before the kernel it follows has finished. Graph capture with
// programmatic edges (Graph::set_programmatic_edges) turns the edge from a kernel into a kernel
// of a functor wrapped here into a programmatic one: the GPU launches this kernel's blocks while
// the previous kernel's last blocks drain, and each thread waits (wait_for_prior_grids) before
// its first load or store, so the results are those of the ordered launch. The graph pass finds
// these kernels by this type's name in their symbol, so the name is part of the contract.
#pragma once
#include <utility>

#include "backends/backend.hpp"

namespace zs {

// WaitsItself: F calls wait_for_prior_grids() itself, after what it may read before the grids
// it follows have finished (tables nothing in the step writes) and before anything they write.
template <class F, bool WaitsItself = false>
struct AfterPriorGrids : F {
  AfterPriorGrids() = default;
  explicit AfterPriorGrids(const F& f) : F(f) {}
  // Every operator() the functor has (a policy's index, a team member, with a reduction value):
  // what Kokkos looks up on the functor itself (value_type, init, join, team_shmem_size) is
  // inherited.
  template <class... Args>
  KOKKOS_INLINE_FUNCTION void operator()(Args&&... args) const {
    if (!WaitsItself) wait_for_prior_grids();
    F::operator()(std::forward<Args>(args)...);
  }
};

// The marker the CUDA graph pass looks for in a kernel's (mangled) symbol.
inline constexpr const char* kAfterPriorGridsMarker = "AfterPriorGrids";

}  // namespace zs
