#include "nn/cluster_forward.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "backends/host_copy.hpp"
#include "core/error.hpp"

namespace zs {

namespace {

int up16(int n) { return (n + 15) / 16 * 16; }

// A row pitch ≡ 16 (mod 32) floats: a quarter warp's 16-byte loads of rows g and g + 1 fall in
// different banks.
int pitch_of(int width) { return (width + 31) / 32 * 32 + 16; }

// The launch's shape for a network, the same for every pass.
struct Stack {
  std::vector<ClusterMlpLayer> layers;
  std::vector<ClusterMlpShape> shapes;
  std::vector<ClusterMlpTile> tiles;
  int pitch[2] = {0, 0};
  int block_tiles = 0;  // a block's most tiles, every layer together

  // A block's most partial tiles in a layer (tiles × the k-shares of `warps` warps).
  int widest(int warps) const {
    int most = 0;
    for (const ClusterMlpLayer& L : layers)
      for (int rank = 0; rank < kClusterMlpBlocks; ++rank) {
        const int nt = cluster_mlp_tile_count(L.tiles, rank);
        most = std::max(most, nt * cluster_mlp_k_parts(nt, warps, L.k_steps));
      }
    return most;
  }
  // The launch's shape at `rows` rows a cluster and `warps` warps a block (what cluster_mlp_bytes
  // reads).
  ClusterMlpArgs args(int rows, int warps) const {
    ClusterMlpArgs a;
    a.layer_count = static_cast<int>(layers.size());
    a.shape_count = static_cast<int>(shapes.size());
    a.rows = rows;
    a.warps = warps;
    a.pitch[0] = pitch[0];
    a.pitch[1] = pitch[1];
    a.stage_floats = rows * 8 * widest(warps);
    a.block_tiles = block_tiles;
    return a;
  }
};

Stack stack_of(const Network& net) {
  const Config& c = net.config();
  const int T = static_cast<int>(c.trunk.size()), K = static_cast<int>(c.branches.size()), H = c.head_hidden;
  Stack s;
  std::vector<int> in_width;
  // Appends a layer of these segments reading a buffer `width` wide; returns its output's width
  // in the next buffer (each segment's outputs padded to 16 there).
  auto layer = [&](std::vector<ClusterMlpShape> segs, bool relu, bool last, int width) {
    ClusterMlpLayer L;
    L.tile0 = static_cast<int>(s.tiles.size());
    L.relu = relu ? 1 : 0;
    int out = 0;
    for (ClusterMlpShape sh : segs) {
      sh.out_c0 = out;
      out += up16(sh.n);
      const int seg = static_cast<int>(s.shapes.size());
      s.shapes.push_back(sh);
      // Past a segment's n the tiles of a layer that feeds another write the zeros of its padding.
      const int covered = last ? (sh.n + 7) / 8 * 8 : up16(sh.n);
      for (int c0 = 0; c0 < covered; c0 += 8) s.tiles.push_back({seg, c0});
      L.k_steps = std::max(L.k_steps, (sh.k + 15) / 16);
    }
    L.tiles = static_cast<int>(s.tiles.size()) - L.tile0;
    s.layers.push_back(L);
    in_width.push_back(width);
    return out;
  };
  int width = up16(c.state_dim), prev = c.state_dim;
  for (int i = 0; i < T; ++i) {
    const int n = c.trunk[static_cast<std::size_t>(i)];
    width = layer({{n, prev, 0, 0}}, true, false, width);
    prev = n;
  }
  std::vector<ClusterMlpShape> hidden, outputs;
  for (int h = 0; h <= K; ++h) {
    hidden.push_back({H, prev, 0, 0});
    outputs.push_back({net.head_width(h), H, h * up16(H), 0});
  }
  width = layer(hidden, true, false, width);
  layer(outputs, false, true, width);
  std::vector<int> tiles_of_rank(kClusterMlpBlocks, 0);
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    int& p = s.pitch[l % 2];
    p = std::max(p, pitch_of(in_width[l]));
    const ClusterMlpLayer& L = s.layers[l];
    for (int rank = 0; rank < kClusterMlpBlocks; ++rank)
      tiles_of_rank[static_cast<std::size_t>(rank)] += cluster_mlp_tile_count(L.tiles, rank);
  }
  s.block_tiles = *std::max_element(tiles_of_rank.begin(), tiles_of_rank.end());
  return s;
}

bool valid_rows(int rows) { return rows == 16 || rows == 32 || rows == 48 || rows == 64; }

}  // namespace

bool ClusterForward::supported(const Network& net, int rows, std::string* reason, int warps) {
  auto no = [&](const std::string& why) {
    if (reason) *reason = why;
    return false;
  };
  if (rows != 0 && !valid_rows(rows))
    return no(str(rows, " rows a cluster; expected 0 (the default), 16, 32, 48 or 64"));
  if (warps != 8 && warps != 16) return no(str(warps, " warps a block; expected 8 or 16"));
  const Stack s = stack_of(net);
  const int probe = rows == 0 ? 16 : rows;
  if (!cluster_mlp_available()) return no("this backend has no thread-block clusters");
  if (cluster_mlp_bytes(s.args(probe, warps)) == 0) {
    return no(str("a block of ", probe, " rows of this network (buffers of ", s.pitch[0], " and ", s.pitch[1],
                  " floats a row) does not fit a multiprocessor's shared memory"));
  }
  return true;
}

ClusterForward::ClusterForward(const Network& net, const std::vector<ForwardPass>& passes, int rows, int warps) {
  const Config& c = net.config();
  std::string why;
  require(supported(net, rows, &why, warps), "ClusterForward: ", why);
  require(!passes.empty(), "ClusterForward: 0 passes given; expected at least 1");
  const int T = static_cast<int>(c.trunk.size()), K = static_cast<int>(c.branches.size()), H = c.head_hidden;
  const HeadSet set = net.main_heads();
  const Stack s = stack_of(net);

  std::vector<ClusterMlpSegment> segments;
  std::vector<ClusterMlpInput> inputs;
  for (std::size_t p = 0; p < passes.size(); ++p) {
    const ForwardPass& x = passes[p];
    require(x.params != nullptr && x.acts != nullptr, "ClusterForward: pass ", p, " has no parameters or activations");
    const int R = static_cast<int>(x.input.extent(0));
    require(R >= 1 && static_cast<int>(x.input.extent(1)) == c.state_dim, "ClusterForward: pass ", p, " input is [",
            x.input.extent(0), ", ", x.input.extent(1), "]; expected [rows >= 1, ", c.state_dim, "]");
    require(x.row0 >= 0 && x.row0 + R <= x.acts->rows, "ClusterForward: pass ", p, " writes rows ", x.row0, "..",
            x.row0 + R, " of activations with ", x.acts->rows, " rows");
    const Activations& a = *x.acts;
    auto at = [&](const DeviceFloats& f, int cols) { return f.data() + static_cast<std::size_t>(x.row0) * cols; };
    auto dense = [&](int layer, float* out, int ld) {
      return ClusterMlpSegment{x.params->weight(layer).data(), x.params->bias(layer).data(), out, ld};
    };
    for (int i = 0; i < T; ++i) {
      const int n = c.trunk[static_cast<std::size_t>(i)];
      segments.push_back(dense(i, at(a.trunk[static_cast<std::size_t>(i)], n), n));
    }
    for (int h = 0; h <= K; ++h)
      segments.push_back(dense(set.hidden_layer(h),
                               at(h == 0 ? a.value_hidden : a.branch_hidden[static_cast<std::size_t>(h - 1)], H), H));
    for (int h = 0; h <= K; ++h)
      segments.push_back(dense(set.hidden_layer(h) + 1, net.head_out(a, h, x.row0), net.head_width(h)));
    inputs.push_back({x.input.data(), static_cast<std::int64_t>(x.input.stride(0)), R});
  }

  // The cluster's rows: the fewest that let every cluster of the launch run at once.
  auto clusters_of = [&](int r) {
    int n = 0;
    for (const ClusterMlpInput& in : inputs) n += (in.rows + r - 1) / r;
    return n;
  };
  if (rows == 0) {
    rows = kClusterMlpMaxRows;
    for (int r : {16, 32, 48, 64}) {
      const std::size_t bytes = cluster_mlp_bytes(s.args(r, warps));
      if (bytes > 0 && clusters_of(r) <= cluster_mlp_active_clusters(r, warps, bytes)) {
        rows = r;
        break;
      }
    }
    if (cluster_mlp_bytes(s.args(rows, warps)) == 0) rows = 16;  // supported() held for 16
  }
  std::vector<ClusterMlpRows> clusters;
  for (std::size_t p = 0; p < inputs.size(); ++p)
    for (int r0 = 0; r0 < inputs[p].rows; r0 += rows) clusters.push_back({static_cast<int>(p), r0});

  layers_ = device_table<MemSpace>("zs::cluster_forward::layers", s.layers);
  shapes_ = device_table<MemSpace>("zs::cluster_forward::shapes", s.shapes);
  segments_ = device_table<MemSpace>("zs::cluster_forward::segments", segments);
  tiles_ = device_table<MemSpace>("zs::cluster_forward::tiles", s.tiles);
  clusters_ = device_table<MemSpace>("zs::cluster_forward::clusters", clusters);
  inputs_ = device_table<MemSpace>("zs::cluster_forward::inputs", inputs);
  args_ = s.args(rows, warps);
  args_.layers = layers_.data();
  args_.shapes = shapes_.data();
  args_.segments = segments_.data();
  args_.tiles = tiles_.data();
  args_.clusters = clusters_.data();
  args_.inputs = inputs_.data();
  args_.cluster_count = static_cast<int>(clusters.size());
  args_.input_width = c.state_dim;
  args_.bytes = cluster_mlp_bytes(args_);
  require(args_.bytes > 0, "ClusterForward: ", rows, " rows a cluster do not fit a multiprocessor");
}

}  // namespace zs
