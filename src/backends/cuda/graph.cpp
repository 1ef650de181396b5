// CUDA graphs by stream capture. Global capture mode is deliberate: it is the strictest, so a
// hidden cudaMalloc, blocking copy or device synchronisation anywhere in the body fails here.
// The same SyncWatch as on the host runs around the capture: it names what fired (a deep_copy's
// Views, an allocation's label, a fence) where the capture alone would only say that it failed.
#include "backends/graph.hpp"

#include <exception>

#include "backends/cuda/check.hpp"
#include "backends/sync_watch.hpp"

namespace zs {

struct Graph::Impl {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Impl() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;

void Graph::capture(Stream& stream, const std::function<void()>& body) {
  require(!captured(), "Graph::capture: this graph is already captured; make a new Graph");
  auto s = static_cast<cudaStream_t>(stream.native());
  SyncWatch watch;
  ZS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  auto abandon = [s] {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
  };
  try {
    body();
  } catch (const std::exception& e) {
    abandon();
    // A blocking copy or fence usually fails inside Kokkos first; the watch says which it was.
    if (!watch.clean()) watch.require_clean(str("Graph::capture (the body then failed: ", e.what(), ")"));
    throw;
  } catch (...) {
    abandon();
    throw;
  }
  if (!watch.clean()) {
    abandon();
    watch.require_clean("Graph::capture");
  }
  cudaGraph_t g = nullptr;
  cudaError_t end = cudaStreamEndCapture(s, &g);
  if (end != cudaSuccess || g == nullptr) {
    cudaGetLastError();
    fail("Graph::capture: stream capture failed with ", cudaGetErrorName(end),
         " — the captured work synchronised, allocated or copied blockingly (or a launch failed)");
  }
  impl_->graph = g;
  ZS_CUDA_CHECK(cudaGraphInstantiate(&impl_->exec, g, 0));
}

void Graph::replay(Stream& stream) {
  require(captured(), "Graph::replay: nothing captured yet; call capture() first");
  ZS_CUDA_CHECK(cudaGraphLaunch(impl_->exec, static_cast<cudaStream_t>(stream.native())));
}

bool Graph::captured() const { return impl_->exec != nullptr; }

std::size_t Graph::node_count() const {
  if (!impl_->graph) return 0;
  std::size_t n = 0;
  ZS_CUDA_CHECK(cudaGraphGetNodes(impl_->graph, nullptr, &n));
  return n;
}

}  // namespace zs
