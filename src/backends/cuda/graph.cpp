// CUDA graphs by stream capture. Global capture mode is deliberate: it is the strictest, so a
// hidden cudaMalloc, blocking copy or device synchronisation anywhere in the body fails here.
// The same SyncWatch as on the host runs around the capture: it names what fired (a deep_copy's
// Views, an allocation's label, a fence) where the capture alone would only say that it failed.
#include "backends/graph.hpp"

#include <cstring>
#include <exception>
#include <vector>

#include "backends/after_prior_grids.hpp"
#include "backends/cuda/check.hpp"
#include "backends/sync_watch.hpp"

namespace zs {

struct Graph::Impl {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool programmatic = false;
  std::size_t programmatic_edges = 0;
  ~Impl() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

namespace {

bool is_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type{};
  return cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel;
}

// Whether a kernel node runs a functor wrapped in AfterPriorGrids (its symbol names the wrapper).
bool waits_for_prior_grids(cudaGraphNode_t node) {
  cudaKernelNodeParams p{};
  const char* name = nullptr;
  if (cudaGraphKernelNodeGetParams(node, &p) != cudaSuccess || cudaFuncGetName(&name, p.func) != cudaSuccess ||
      name == nullptr) {
    cudaGetLastError();
    return false;
  }
  return std::strstr(name, kAfterPriorGridsMarker) != nullptr;
}

// Makes every full-completion edge from a kernel into a kernel that waits for prior grids a
// programmatic edge; returns how many it changed.
std::size_t make_programmatic(cudaGraph_t g) {
  std::size_t n = 0;
  ZS_CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  ZS_CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  std::size_t changed = 0;
  for (std::size_t e = 0; e < n; ++e) {
    if (data[e].type != cudaGraphDependencyTypeDefault || data[e].from_port != cudaGraphKernelNodePortDefault ||
        !is_kernel(from[e]) || !is_kernel(to[e]) || !waits_for_prior_grids(to[e]))
      continue;
    cudaGraphEdgeData programmatic{};
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    ZS_CUDA_CHECK(cudaGraphRemoveDependencies(g, &from[e], &to[e], &data[e], 1));
    ZS_CUDA_CHECK(cudaGraphAddDependencies(g, &from[e], &to[e], &programmatic, 1));
    ++changed;
  }
  return changed;
}

}  // namespace

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
  if (impl_->programmatic) {
    // On a copy: a driver that refuses the edges at instantiation leaves the plain graph.
    cudaGraph_t pdl = nullptr;
    ZS_CUDA_CHECK(cudaGraphClone(&pdl, g));
    const std::size_t changed = make_programmatic(pdl);
    cudaGraphExec_t exec = nullptr;
    if (cudaGraphInstantiate(&exec, pdl, 0) == cudaSuccess) {
      cudaGraphDestroy(g);
      impl_->graph = pdl;
      impl_->exec = exec;
      impl_->programmatic_edges = changed;
      return;
    }
    cudaGetLastError();
    cudaGraphDestroy(pdl);
  }
  ZS_CUDA_CHECK(cudaGraphInstantiate(&impl_->exec, g, 0));
}

void Graph::set_programmatic_edges(bool on) {
  require(!captured(), "Graph::set_programmatic_edges: the graph is already captured; set it before capture()");
  impl_->programmatic = on;
}

std::size_t Graph::programmatic_edges() const { return impl_->programmatic_edges; }

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
