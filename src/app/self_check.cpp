#include "app/self_check.hpp"

#include <cmath>
#include <cstddef>
#include <random>
#include <string>

#include "backends/graph.hpp"
#include "backends/stream.hpp"
#include "kernels/grad_norm.hpp"
#include "backends/mailbox.hpp"
#include "nn/param_buffer.hpp"

namespace zs {

bool run_self_check(std::ostream& os, int replays) {
  const ParamLayout layout{Config{}};
  ParamBuffer grad(layout, "zs::self_check::grad");
  Kokkos::View<double*, MemSpace> record("zs::self_check::record", 1);
  Mailbox mailbox(1);
  Stream stream;
  auto norm = Kokkos::subview(record, 0);
  const auto scratch = kernels::make_grad_norms_scratch(stream.exec());
  auto step = [&] {
    kernels::global_grad_norm(stream.exec(), ConstDeviceFloats(grad.flat()), norm, scratch);
    mailbox.post(stream.exec(), record);
  };
  // One direct run first: Kokkos sizes its team scratch on first use, and an allocation inside
  // capture would (rightly) fail it.
  step();
  stream.synchronize();
  Graph graph;
  graph.capture(stream, step);

  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.f, 1.f);
  auto host = Kokkos::create_mirror_view(grad.flat());
  bool ok = true;
  for (int r = 0; r < replays; ++r) {
    double ref = 0.0;
    const float scale = std::ldexp(1.f, r * 3 - 4);
    for (const auto& t : layout.tensors())
      for (std::size_t i = 0; i < t.size(); ++i) {
        const float g = scale * normal(rng);
        host(t.offset + i) = g;
        ref += static_cast<double>(g) * g;
      }
    ref = std::sqrt(ref);
    Kokkos::deep_copy(grad.flat(), host);
    graph.replay(stream);
    stream.synchronize();
    const auto rec = mailbox.read();
    const bool fresh = rec && rec->seq == r + 2;
    const double rel = rec ? std::abs(rec->values[0] - ref) / ref : INFINITY;
    const bool pass = fresh && rel < 1e-9;
    os << "  self-check replay " << r + 1 << ": grad norm " << (rec ? rec->values[0] : NAN)
       << " vs reference " << ref << " (rel. error " << rel << ", mailbox seq "
       << (rec ? rec->seq : 0) << ") " << (pass ? "ok" : "FAILED") << "\n";
    ok = ok && pass;
  }
  os << "  graph: " << (graph.node_count() ? std::to_string(graph.node_count()) + " nodes" : "host replay")
     << "\n";
  return ok;
}

}  // namespace zs
