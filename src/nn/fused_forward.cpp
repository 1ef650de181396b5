#include "nn/fused_forward.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/host_copy.hpp"
#include "core/error.hpp"

namespace zs {

namespace {

using kernels::ProductJob;
using kernels::ProductSegment;

// Passes that one product covers: the same parameters and activations, adjacent rows, and (for
// the first layer) adjacent input rows.
struct Run {
  const ParamBuffer* params;
  const float* input;
  Activations* acts;
  int row0, rows;
};

std::vector<Run> runs_of(const std::vector<ForwardPass>& passes, int state_dim) {
  std::vector<Run> runs;
  for (const ForwardPass& x : passes) {
    const int R = static_cast<int>(x.input.extent(0));
    if (!runs.empty()) {
      Run& r = runs.back();
      if (x.params == r.params && x.acts == r.acts && x.row0 == r.row0 + r.rows &&
          x.input.data() == r.input + static_cast<std::size_t>(r.rows) * state_dim) {
        r.rows += R;
        continue;
      }
    }
    runs.push_back({x.params, x.input.data(), x.acts, x.row0, R});
  }
  return runs;
}

}  // namespace

std::size_t forward_scratch_bytes(const Network& net, const FusedOptions& options) {
  return sizeof(float) * options.dueling_rows * kernels::dueling_row_floats(net.table(), net.config().atoms);
}

kernels::DuelingTiles<ExecSpace, kernels::DuelingTable<MemSpace>> dueling_tiles(
    const Network& net, const std::vector<ForwardPass>& passes, const FusedOptions& options) {
  require(options.dueling_rows >= 1, "fused forward: dueling_rows = ", options.dueling_rows, "; expected at least 1");
  // One entry per run of passes, its outputs already biased.
  std::vector<kernels::DuelingEntry> entries;
  int max_rows = 0;
  for (const Run& r : runs_of(passes, net.config().state_dim)) {
    kernels::DuelingEntry e;
    e.value = r.acts->value_out.data();
    e.branch_out = r.acts->branch_out.data();
    e.logp = r.acts->logp.data();
    e.total_rows = r.acts->rows;
    e.row0 = r.row0;
    e.rows = r.rows;
    entries.push_back(e);
    max_rows = r.rows > max_rows ? r.rows : max_rows;
  }
  kernels::DuelingTiles<ExecSpace, kernels::DuelingTable<MemSpace>> d;
  d.entries = {device_table<MemSpace>("zs::fused::dueling", entries),
               device_table<MemSpace>("zs::fused::dueling_biases", std::vector<std::uintptr_t>(1, 0))};
  d.table = net.table();
  d.atoms = net.config().atoms;
  d.tile_rows = options.dueling_rows;
  d.tiles_per_entry = (max_rows + options.dueling_rows - 1) / options.dueling_rows;
  return d;
}

kernels::DuelingTiles<ExecSpace, kernels::DuelingTable<MemSpace>> add_forward_phases(
    FusedBuilder& b, const Network& net, const std::vector<ForwardPass>& passes, const FusedOptions& options,
    bool dueling_phase, const std::vector<HeadSetPass>& head_sets, const FusedPhaseHook& hook) {
  const Config& c = net.config();
  std::string why;
  require(fused_supports(c, options, &why), "fused forward: ", why);
  require(!passes.empty(), "fused forward: 0 passes given; expected at least 1");
  const int R = static_cast<int>(passes[0].input.extent(0)), T = static_cast<int>(c.trunk.size());
  const int F = c.trunk.back(), H = c.head_hidden;
  for (std::size_t p = 0; p < passes.size(); ++p) {
    const ForwardPass& x = passes[p];
    require(x.params != nullptr && x.acts != nullptr, "fused forward: pass ", p, " has no parameters or activations");
    require(static_cast<int>(x.input.extent(0)) == R && static_cast<int>(x.input.extent(1)) == c.state_dim,
            "fused forward: pass ", p, " input is [", x.input.extent(0), ", ", x.input.extent(1), "]; expected [", R,
            ", ", c.state_dim, "]");
    require(x.row0 >= 0 && x.row0 + R <= x.acts->rows, "fused forward: pass ", p, " writes rows ", x.row0, "..",
            x.row0 + R, " of activations with ", x.acts->rows, " rows");
  }
  require(R >= 1, "fused forward: passes of 0 rows; expected at least 1");
  for (std::size_t i = 0; i < head_sets.size(); ++i) {
    const HeadSetPass& x = head_sets[i];
    require(x.params != nullptr && x.features != nullptr && x.acts.rows >= 1 &&
                static_cast<int>(x.acts.branch_hidden.size()) == static_cast<int>(c.branches.size()),
            "fused forward: head set ", i, " without parameters, features or activations (", x.acts.rows,
            " rows, ", x.acts.branch_hidden.size(), " branches); expected all of them, ", c.branches.size(),
            " branches");
  }
  const std::vector<Run> runs = runs_of(passes, c.state_dim);
  auto at = [](const DeviceFloats& f, int row0, int cols) { return f.data() + static_cast<std::size_t>(row0) * cols; };

  for (int i = 0; i < T; ++i) {
    b.phase();
    const int in = i == 0 ? c.state_dim : c.trunk[i - 1], out = c.trunk[i];
    for (const Run& r : runs) {
      ProductJob j;
      j.m = r.rows;
      j.n = out;
      j.out = at(r.acts->trunk[i], r.row0, out);
      j.out_ld = out;
      j.bias = r.params->bias(i).data();
      j.relu = 1;
      const float* x = i == 0 ? r.input : at(r.acts->trunk[i - 1], r.row0, in);
      b.product(j, {{rows_of(x, in), rows_of(r.params->weight(i).data(), in), in}});
    }
    if (i == T - 1 && hook) hook(b, FusedPhase::trunk_last, -1);
  }
  // The heads: the value stream, then each branch; each a hidden layer on the features and an
  // output layer on that.
  const HeadSet set = net.main_heads();
  const int K = static_cast<int>(c.branches.size());
  auto hidden_of = [&](const Run& r, int h) {
    return at(h == 0 ? r.acts->value_hidden : r.acts->branch_hidden[h - 1], r.row0, H);
  };
  b.phase();
  for (const Run& r : runs)
    for (int h = 0; h <= K; ++h) {
      ProductJob j;
      j.m = r.rows;
      j.n = H;
      j.out = hidden_of(r, h);
      j.out_ld = H;
      j.bias = r.params->bias(set.hidden_layer(h)).data();
      j.relu = 1;
      b.product(j, {{rows_of(at(r.acts->trunk[T - 1], r.row0, F), F), rows_of(r.params->weight(set.hidden_layer(h)).data(), F), F}});
    }
  auto set_hidden = [](const HeadSetPass& x, int h) {
    return h == 0 ? x.acts.value_hidden.data() : x.acts.branch_hidden[h - 1].data();
  };
  for (const HeadSetPass& x : head_sets)
    for (int h = 0; h <= K; ++h) {
      ProductJob j;
      j.m = x.acts.rows;
      j.n = H;
      j.out = set_hidden(x, h);
      j.out_ld = H;
      j.bias = x.params->bias(x.set.hidden_layer(h)).data();
      j.relu = 1;
      b.product(j, {{rows_of(x.features, F), rows_of(x.params->weight(x.set.hidden_layer(h)).data(), F), F}});
    }
  if (hook) hook(b, FusedPhase::heads_hidden, -1);
  b.phase();
  for (const Run& r : runs)
    for (int h = 0; h <= K; ++h) {
      const int width = net.head_width(h);
      ProductJob j;
      j.m = r.rows;
      j.n = width;
      j.out = net.head_out(*r.acts, h, r.row0);
      j.out_ld = width;
      j.bias = r.params->bias(set.hidden_layer(h) + 1).data();
      b.product(j, {{rows_of(hidden_of(r, h), H), rows_of(r.params->weight(set.hidden_layer(h) + 1).data(), H), H}});
    }
  for (const HeadSetPass& x : head_sets)
    for (int h = 0; h <= K; ++h) {
      const int width = net.head_width(h);
      ProductJob j;
      j.m = x.acts.rows;
      j.n = width;
      j.out = h == 0 ? x.acts.value_out.data()
                     : x.acts.branch_out.data() + net.table().block(x.acts.rows, c.atoms, h - 1);
      j.out_ld = width;
      b.product(j, {{rows_of(set_hidden(x, h), H), rows_of(x.params->weight(x.set.hidden_layer(h) + 1).data(), H), H}});
    }
  if (hook) hook(b, FusedPhase::heads_out, -1);
  const kernels::DuelingTiles<ExecSpace, kernels::DuelingTable<MemSpace>> d = dueling_tiles(net, passes, options);
  if (dueling_phase) {
    b.phase();
    b.tiles(kernels::FusedTileKind::dueling, d.entries.count() * d.tiles_per_entry);
  }
  return d;
}

FusedForward::FusedForward(const Network& net, const std::vector<ForwardPass>& passes, const FusedOptions& options) {
  FusedBuilder b;
  FusedProgramOnDevice program;
  program.dueling = add_forward_phases(b, net, passes, options);
  kernel_ = b.build(program, forward_scratch_bytes(net, options), options);
}

}  // namespace zs
