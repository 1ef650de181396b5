#include "nn/row_block_forward.hpp"

#include <cstddef>
#include <vector>

#include "core/error.hpp"

namespace zs {

RowBlockForward::RowBlockForward(const Network& net, const std::vector<ForwardPass>& passes, int rows) {
  const Config& c = net.config();
  require(rows == 16 || rows == 32, "RowBlockForward: ", rows, " rows a block; expected 16 or 32");
  require(!passes.empty(), "RowBlockForward: 0 passes given; expected at least 1");
  const int T = static_cast<int>(c.trunk.size()), K = static_cast<int>(c.branches.size());
  const int H = c.head_hidden;
  const HeadSet set = net.main_heads();

  std::vector<kernels::RowBlockLayerShape> shape;
  for (int i = 0; i < T; ++i) shape.push_back({{c.trunk[static_cast<std::size_t>(i)]}, {0}, true, {}});
  kernels::RowBlockLayerShape hidden{{}, {}, true, {}}, outputs{{}, {}, false, {}};
  for (int h = 0; h <= K; ++h) {
    hidden.n.push_back(H);
    hidden.from.push_back(0);
    outputs.n.push_back(net.head_width(h));
    outputs.from.push_back(h);
  }
  shape.push_back(hidden);
  shape.push_back(outputs);

  // A dense layer's segment: its weights and biases, its output rows.
  auto dense = [](const float* w, const float* b, float* out, int ld) {
    kernels::RowBlockSegment y;
    y.w = w;
    y.b = b;
    y.out = out;
    y.out_ld = ld;
    return y;
  };
  std::vector<kernels::RowBlockPass> ps;
  for (std::size_t p = 0; p < passes.size(); ++p) {
    const ForwardPass& x = passes[p];
    require(x.params != nullptr && x.acts != nullptr, "RowBlockForward: pass ", p,
            " has no parameters or activations");
    const int R = static_cast<int>(x.input.extent(0));
    require(R >= 1 && static_cast<int>(x.input.extent(1)) == c.state_dim, "RowBlockForward: pass ", p,
            " input is [", x.input.extent(0), ", ", x.input.extent(1), "]; expected [rows >= 1, ", c.state_dim, "]");
    require(x.row0 >= 0 && x.row0 + R <= x.acts->rows, "RowBlockForward: pass ", p, " writes rows ", x.row0, "..",
            x.row0 + R, " of activations with ", x.acts->rows, " rows");
    const Activations& a = *x.acts;
    auto at = [&](const DeviceFloats& f, int cols) { return f.data() + static_cast<std::size_t>(x.row0) * cols; };
    kernels::RowBlockPass q{x.input.data(), R, {}, {}};
    for (int i = 0; i < T; ++i) {
      const int out = c.trunk[static_cast<std::size_t>(i)];
      q.layers.push_back({dense(x.params->weight(i).data(), x.params->bias(i).data(), at(a.trunk[static_cast<std::size_t>(i)], out), out)});
    }
    std::vector<kernels::RowBlockSegment> hs, os;
    for (int h = 0; h <= K; ++h) {
      const int l = set.hidden_layer(h);
      hs.push_back(dense(x.params->weight(l).data(), x.params->bias(l).data(),
                         at(h == 0 ? a.value_hidden : a.branch_hidden[static_cast<std::size_t>(h - 1)], H), H));
      os.push_back(dense(x.params->weight(l + 1).data(), x.params->bias(l + 1).data(), net.head_out(a, h, x.row0),
                         net.head_width(h)));
    }
    q.layers.push_back(hs);
    q.layers.push_back(os);
    ps.push_back(q);
  }
  launch_ = kernels::RowBlockLaunchOfRows<ExecSpace>(rows, std::vector<int>{c.state_dim}, shape, ps);
}

}  // namespace zs
