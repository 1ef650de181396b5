#include "nn/fused_trunk.hpp"

#include <cstddef>
#include <vector>

namespace zs {

FusedTrunkPass trunk_pass(const ParamBuffer& params, const ConstMatrixView& input, const Activations& acts, int row0) {
  const int rows = static_cast<int>(input.extent(0)), T = static_cast<int>(acts.trunk.size());
  require(T >= 1, "trunk_pass: activations with ", T, " trunk layers; expected at least 1");
  require(row0 >= 0 && row0 + rows <= acts.rows, "trunk_pass: rows ", row0, "..", row0 + rows,
          " of activations with ", acts.rows, " rows");
  // Widths from the buffers: acts.trunk[i] holds acts.rows rows of trunk[i] floats.
  auto width = [&](int i) { return static_cast<int>(acts.trunk[i].extent(0) / acts.rows); };
  FusedTrunkPass p;
  p.params = &params;
  p.input = input;
  p.output = as_matrix(acts.trunk[T - 1], rows, width(T - 1), row0);
  for (int i = 0; i + 1 < T; ++i) p.hidden.push_back(as_matrix(acts.trunk[i], rows, width(i), row0));
  return p;
}

kernels::FusedMlpPass mlp_pass(const Config& c, const FusedTrunkPass& x, std::size_t p) {
  const int T = static_cast<int>(c.trunk.size()), rows = static_cast<int>(x.input.extent(0));
  require(x.params != nullptr, "FusedTrunk: pass ", p, " has no parameters");
  require(static_cast<int>(x.input.extent(1)) == c.state_dim, "FusedTrunk: pass ", p, " input is [",
          x.input.extent(0), ", ", x.input.extent(1), "]; expected [", rows, ", ", c.state_dim, "] (state_dim)");
  require(static_cast<int>(x.output.extent(0)) == rows && static_cast<int>(x.output.extent(1)) == c.trunk.back(),
          "FusedTrunk: pass ", p, " output is [", x.output.extent(0), ", ", x.output.extent(1), "]; expected [", rows,
          ", ", c.trunk.back(), "] (the input's rows, the last trunk width)");
  require(x.hidden.empty() || static_cast<int>(x.hidden.size()) == T - 1, "FusedTrunk: pass ", p, " has ",
          x.hidden.size(), " hidden outputs; expected 0 or ", T - 1, " (one per trunk layer before the last)");
  kernels::FusedMlpPass k;
  k.input = x.input.data();
  k.rows = rows;
  for (int i = 0; i < T; ++i) {
    const int in = i == 0 ? c.state_dim : c.trunk[i - 1], out = c.trunk[i];
    const auto& w = x.params->weight(i);
    require(static_cast<int>(w.extent(0)) == out && static_cast<int>(w.extent(1)) == in &&
                static_cast<int>(x.params->bias(i).extent(0)) == out,
            "FusedTrunk: pass ", p, " layer ", i, " weight is [", w.extent(0), ", ", w.extent(1), "] with ",
            x.params->bias(i).extent(0), " biases; expected [", out, ", ", in, "] and ", out);
    float* dst = x.output.data();
    if (i + 1 < T) {
      dst = nullptr;
      if (!x.hidden.empty()) {
        const MatrixView& h = x.hidden[i];
        require(static_cast<int>(h.extent(0)) == rows && static_cast<int>(h.extent(1)) == out, "FusedTrunk: pass ",
                p, " hidden output ", i, " is [", h.extent(0), ", ", h.extent(1), "]; expected [", rows, ", ", out,
                "]");
        dst = h.data();
      }
    }
    k.layers.push_back({w.data(), x.params->bias(i).data(), dst});
  }
  return k;
}

FusedTrunk::FusedTrunk(const Network& net, const std::vector<FusedTrunkPass>& passes,
                       const kernels::FusedMlpOptions& opt, TrunkKernel kernel)
    : kernel_(kernel) {
  const Config& c = net.config();
  std::vector<int> widths{c.state_dim};
  widths.insert(widths.end(), c.trunk.begin(), c.trunk.end());
  std::vector<kernels::FusedMlpPass> k;
  for (std::size_t p = 0; p < passes.size(); ++p) k.push_back(mlp_pass(c, passes[p], p));
  switch (kernel) {
    case TrunkKernel::serial_tiles:
      serial_ = kernels::FusedMlpLaunch<ExecSpace>(widths, k, kernels::FusedAct::relu, opt);
      break;
    case TrunkKernel::row_blocks_16:
    case TrunkKernel::row_blocks_32:
      rows_ = kernels::RowBlockLaunchOfRows<ExecSpace>(kernel == TrunkKernel::row_blocks_16 ? 16 : 32, widths, k,
                                                       kernels::FusedAct::relu);
      break;
  }
}

void FusedTrunk::enqueue(const ExecSpace& exec) const {
  with_launch([&](const auto& launch) { launch(exec); });
}
int FusedTrunk::rows_per_team() const {
  return with_launch([](const auto& launch) { return launch.rows_per_team(); });
}
int FusedTrunk::teams() const {
  return with_launch([](const auto& launch) { return launch.teams(); });
}
std::size_t FusedTrunk::scratch_bytes() const {
  return with_launch([](const auto& launch) { return launch.scratch_bytes(); });
}

}  // namespace zs
