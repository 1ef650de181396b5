// A short end-to-end check a user can run anywhere: the global gradient norm over a
// reference-config flat buffer, recorded once as a graph (a CUDA graph on CUDA), replayed on
// fresh random gradients, its result read back through the pinned mailbox and compared with a
// double-precision reference computed on the host.
#pragma once
#include <ostream>

namespace zs {

// Prints one line per check; returns true when all passed.
bool run_self_check(std::ostream& os, int replays = 3);

}  // namespace zs
