// Two single-thread jobs run one after the other by the same thread: small bookkeeping (a record
// and its mailbox post; the guard's verdict, then Adam's t and clip scale) costs a graph one
// node, not one each.
#pragma once

#include "backends/backend.hpp"

namespace zs::kernels {

template <class First, class Second>
struct Then {
  First first;
  Second second;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    first(i);
    second(i);
  }
};

}  // namespace zs::kernels
