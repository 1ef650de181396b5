// Which actions belong to which branch, and where a branch's outputs live. Every branch's output
// layer writes into one flat buffer, branch k as a contiguous [rows, n_k·atoms] matrix starting at
// rows·offset[k]·atoms, so each branch's GEMM writes a plain row-major matrix and a kernel finds
// any (row, action, atom) by arithmetic. Fixed for a run, so it travels by value in every launch
// that needs it: the one definition of branch offsets for kernels and host code alike.
#pragma once
#include <cstddef>
#include <vector>

#include "backends/backend.hpp"
#include "core/error.hpp"

namespace zs::kernels {

inline constexpr int kMaxBranches = 32;

struct BranchTable {
  int branches = 0, actions = 0;
  int offset[kMaxBranches + 1] = {};  // branch k: global actions [offset[k], offset[k + 1])

  // The table of branches with `sizes` actions each; throws zs::Error naming `who` otherwise.
  static BranchTable of(const std::vector<int>& sizes, const char* who = "branches") {
    require(!sizes.empty() && sizes.size() <= static_cast<std::size_t>(kMaxBranches), who, ": ", sizes.size(),
            " branches given; expected 1..", kMaxBranches);
    BranchTable t;
    t.branches = static_cast<int>(sizes.size());
    for (int k = 0; k < t.branches; ++k) {
      require(sizes[k] >= 1, who, ": branch ", k, " has ", sizes[k], " actions; expected at least 1");
      t.offset[k + 1] = t.offset[k] + sizes[k];
    }
    t.actions = t.offset[t.branches];
    return t;
  }

  // First global action of branch k (k = branches: the total).
  KOKKOS_INLINE_FUNCTION int cum(int k) const { return offset[k]; }
  KOKKOS_INLINE_FUNCTION int size(int k) const { return offset[k + 1] - offset[k]; }
  // Actions of the largest branch.
  KOKKOS_INLINE_FUNCTION int widest() const {
    int w = 0;
    for (int k = 0; k < branches; ++k) w = size(k) > w ? size(k) : w;
    return w;
  }
  // The branch global action g belongs to.
  KOKKOS_INLINE_FUNCTION int branch_of(int g) const {
    int k = 0;
    while (k + 1 < branches && offset[k + 1] <= g) ++k;
    return k;
  }
  // Where (row r, action a of branch k, atom j) lives in a flat branch buffer of `rows` rows.
  KOKKOS_INLINE_FUNCTION std::size_t index(int rows, int atoms, int k, int r, int a, int j) const {
    return block(rows, atoms, k) + (static_cast<std::size_t>(r) * size(k) + a) * atoms + j;
  }
  // First float of branch k's [rows, n_k·atoms] block.
  KOKKOS_INLINE_FUNCTION std::size_t block(int rows, int atoms, int k) const {
    return static_cast<std::size_t>(rows) * offset[k] * atoms;
  }
  // A padded layout's: branch k's rows n_k·atoms rounded up to a multiple of `pad` floats (so a
  // product stores whole 16-byte vectors at 4), each branch's block after the one before.
  KOKKOS_INLINE_FUNCTION int row_floats(int atoms, int k, int pad) const {
    return (size(k) * atoms + pad - 1) / pad * pad;
  }
  KOKKOS_INLINE_FUNCTION std::size_t padded_block(int rows, int atoms, int k, int pad) const {
    std::size_t first = 0;
    for (int b = 0; b < k; ++b) first += static_cast<std::size_t>(rows) * row_floats(atoms, b, pad);
    return first;
  }
};

}  // namespace zs::kernels
