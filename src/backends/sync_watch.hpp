// What a recorded graph body must never do: copy blockingly (deep_copy), allocate or free, or
// fence. CUDA's stream capture refuses these by itself; on the host a "graph" is a stored
// callable, so without this watch they would pass unseen. zs::Graph keeps one around every
// recorded execution of a body, on every backend (docs/architecture.md, "The step's rules").
//
// It listens on Kokkos' tools callbacks (begin deep copy, allocate, deallocate, begin fence),
// chaining to whatever callbacks were installed before it and putting them back when the last
// watch ends. Kernel launches are what a body is for and are never findings.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace zs {

class SyncWatch {
 public:
  // Starts watching what this thread does. Watches nest: the innermost one sees the events.
  SyncWatch();
  ~SyncWatch();
  SyncWatch(const SyncWatch&) = delete;
  SyncWatch& operator=(const SyncWatch&) = delete;

  // What fired since construction, one line each in order of first appearance (repeats
  // counted); empty when nothing did.
  std::vector<std::string> findings() const;
  bool clean() const { return findings().empty(); }
  // Throws zs::Error, beginning with `where`, naming every finding; returns if there is none.
  void require_clean(const std::string& where) const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace zs
