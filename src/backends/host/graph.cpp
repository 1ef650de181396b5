// Host "graph": the recorded callable, replayed by calling it. Capture does not run the body,
// matching CUDA, where capture records work without executing it. Nothing here refuses a
// blocking copy, an allocation or a fence the way CUDA's capture does, so every replay runs
// under a SyncWatch and throws if one fired.
#include "backends/graph.hpp"

#include "backends/sync_watch.hpp"
#include "core/error.hpp"

namespace zs {

struct Graph::Impl {
  std::function<void()> body;
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;

void Graph::capture(Stream&, const std::function<void()>& body) {
  require(!captured(), "Graph::capture: this graph is already captured; make a new Graph");
  require(static_cast<bool>(body), "Graph::capture: empty body");
  impl_->body = body;
}

void Graph::replay(Stream&) {
  require(captured(), "Graph::replay: nothing captured yet; call capture() first");
  SyncWatch watch;
  impl_->body();
  watch.require_clean("Graph::replay");
}

bool Graph::captured() const { return static_cast<bool>(impl_->body); }
std::size_t Graph::node_count() const { return 0; }
void Graph::set_programmatic_edges(bool) {
  require(!captured(), "Graph::set_programmatic_edges: the graph is already captured; set it before capture()");
}
std::size_t Graph::programmatic_edges() const { return 0; }

}  // namespace zs
