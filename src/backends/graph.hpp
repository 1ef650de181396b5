// Record once, replay many times. On CUDA: a CUDA graph made by stream capture in *global*
// mode, so any hidden synchronisation, allocation or blocking copy inside the recorded work
// makes capture fail (and capture() throws). On the host: the recorded callable itself.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "backends/stream.hpp"

namespace zs {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Runs `body` once in capture mode: what it enqueues on `stream` is recorded, not executed.
  // Arguments are frozen at capture: anything that changes per step must live in device memory.
  void capture(Stream& stream, const std::function<void()>& body);
  // Enqueues one replay on `stream`; returns without waiting.
  void replay(Stream& stream);
  // The usual way to use a graph: the first call runs `body` directly (Kokkos and cuBLAS size
  // their scratch on first use, and an allocation inside capture would fail it) and then
  // records it; every later call replays the recording.
  void run(Stream& stream, const std::function<void()>& body) {
    if (captured()) return replay(stream);
    body();
    capture(stream, body);
  }
  bool captured() const;
  // Nodes in the captured graph (0 on the host, which records no nodes).
  std::size_t node_count() const;
  // Before capture: turn every edge from a kernel into a kernel wrapped in AfterPriorGrids
  // (backends/after_prior_grids.hpp) into a programmatic edge, so that kernel's launch overlaps
  // the end of the one before it (programmatic dependent launch, sm_90). A graph that does not
  // instantiate with them is kept without. Nothing on the host.
  void set_programmatic_edges(bool on);
  // Edges the capture made programmatic (0 on the host and when off).
  std::size_t programmatic_edges() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
