#include "nn/fused_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>

#include "backends/cluster_mlp.hpp"
#include "backends/host_copy.hpp"
#include "backends/warp_tile.hpp"
#include "core/error.hpp"

namespace zs {

namespace {
using Product = kernels::TileProduct<ExecSpace>;  // what does not depend on the tile's rows
template <int Rows, int Cols, int Stages = 3>
using ProductOf = kernels::TileProduct<ExecSpace, Rows, Cols, Stages>;

// What the builder needs of a tile shape; tiles: that shape's TileProduct::tiles.
struct ProductShape {
  int rows = 64, cols = 32, stages = 3;
  std::size_t partial_floats = 0, scratch_bytes = 0;
  int (*tiles)(int m, int n, int& tiles_m, int& tiles_n) = nullptr;
};
template <int Rows, int Cols, int Stages = 3>
ProductShape shape_of() {
  using P = ProductOf<Rows, Cols, Stages>;
  return {Rows, Cols, Stages, P::kPartialFloats, P::kScratchBytes, &P::tiles};
}
// The shapes the kernels are compiled for: 64 × 32, 32 × 32 and 32 × 16 in 3 stages, the 32-row
// ones in 4 too (4 stages of 64 × 32 would pass the scratch budget). Any other: no tiles().
ProductShape product_shape(int rows, int cols, int stages) {
  if (rows == 64 && cols == 32 && stages == 3) return shape_of<64, 32>();
  if (rows != 32 || (stages != 3 && stages != 4)) return {};
  if (cols == 32) return stages == 4 ? shape_of<32, 32, 4>() : shape_of<32, 32>();
  if (cols == 16) return stages == 4 ? shape_of<32, 16, 4>() : shape_of<32, 16>();
  return {};
}
bool known_shape(int rows, int cols, int stages) { return product_shape(rows, cols, stages).tiles != nullptr; }
const char* const kKnownShapes = "expected 64 × 32, 32 × 32 or 32 × 16 in 3 stages, or 32 × 32 or 32 × 16 in 4";

using kernels::FusedTileKind;
using kernels::kind_bit;
constexpr int kProducts = kind_bit(FusedTileKind::product) | kind_bit(FusedTileKind::c51_finish);
constexpr int kDueling = kind_bit(FusedTileKind::dueling);
constexpr int kLoss = kind_bit(FusedTileKind::c51_branch);
constexpr int kHeadLoss = kind_bit(FusedTileKind::c51_head_branch);
using kernels::kAllKinds;

// The fused program with tile() compiled for the kinds in Kinds only and products of Rows × Cols
// tiles in Stages stages (FusedProgram::tile_of).
template <int Kinds, int Rows, int Cols, int Stages = 3>
struct PhaseOfKinds {
  using Member = FusedProgramOnDevice::Member;
  // tile() waits for the grids its launch follows itself (FusedProgram::tile_of): a launch of
  // one phase need not wait first thing.
  static constexpr bool kWaitsForPriorGrids = true;
  // A kernel of only 32-row products: four teams a multiprocessor (at most 128 registers a thread
  // on CUDA), so that the widest product phase of the B = 256 step (480 tiles) stays one wave on
  // 132 multiprocessors. At 136 registers (the timeline's stamps, unbounded) three fit, and that
  // phase's last tiles waited for a second wave: the step took 107.5 µs against 104.1 (H100).
  static constexpr unsigned kMinTeamsPerSm = Kinds == kProducts && Rows == 32 ? 4 : 0;
  static constexpr unsigned kTeamThreads = kernels::TileProduct<ExecSpace, Rows, Cols, Stages>::kThreads;
  FusedProgramOnDevice f;
  KOKKOS_INLINE_FUNCTION int phases() const { return f.phases(); }
  KOKKOS_INLINE_FUNCTION int tiles(int p) const { return f.tiles(p); }
  KOKKOS_INLINE_FUNCTION void tile(const Member& team, int p, int t, void* scratch) const {
    f.template tile_of<Kinds, Rows, Cols, Stages>(team, p, t, scratch);
  }
};

// Kokkos passes a functor of less than 4 KiB (its CudaTraits::KernelArgumentLimit, with the
// policy beside it) as the kernel's parameters; a larger one goes through constant memory,
// which a launch must wait for: a host synchronisation in every step.
static_assert(sizeof(phased_detail::EveryPhase<ExecSpace, PhaseOfKinds<kAllKinds, 64, 32>>) <= 3584,
              "the fused kernel's functor must stay a kernel parameter");

// A small kernel's team as the backend runs it: the options' on a device, one thread of one lane
// on the host (where every fused tile runs on one thread). Bad values are refused on every backend.
struct SmallTeam {
  int threads = 1, lanes = 1;
};
bool small_team_ok(int threads, int lanes) {
  return threads >= 1 && lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0 && threads * lanes <= 1024;
}
SmallTeam small_team(int threads, int lanes, const char* kind) {
  require(small_team_ok(threads, lanes), "FusedBuilder: the ", kind, " kernel's team of ", threads, " threads × ",
          lanes, " lanes; expected at least 1 thread, lanes a power of two up to 32, at most 1024 in all");
  if (WarpTile<ExecSpace>::kVectorLength == 1) return {};
  return {threads, lanes};
}
}  // namespace

int fused_step_items(const Config& c) {
  // Forward, three passes (online on s and s', target on s'): a job per trunk layer and per
  // head's two layers, and the dueling head's tiles. The loss: one. Backward: each head's input
  // and weight gradients and the loss's totals; the features' gradient and each head's hidden
  // weights; each trunk layer's weight gradient and, above the first, its input gradient.
  const int T = static_cast<int>(c.trunk.size()), heads = 1 + static_cast<int>(c.branches.size());
  return 3 * (T + 2 * heads) + 1 + 1 + (2 * heads + 1) + (1 + heads) + (2 * T - 1);
}

int stages_four_at_a_time(const kernels::ProductOperand& o) {
  const std::int64_t other = o.k_stride == 1 ? o.row_stride : o.k_stride;
  return reinterpret_cast<std::uintptr_t>(o.ptr) % 16 == 0 && other % 4 == 0 ? 1 : 0;
}

PhasedMode fused_mode(const FusedOptions& o) { return kCanPersist ? o.mode : PhasedMode::launches; }

bool fused_supports(const Config& c, const FusedOptions& o, std::string* reason) {
  auto no = [&](const std::string& why) {
    if (reason) *reason = why;
    return false;
  };
  const int T = static_cast<int>(c.trunk.size());
  // The C51 step's phases: T trunk layers, the heads' two layers and the dueling head forward;
  // the loss; the output layers, the hidden layers, T − 1 trunk layers and the first layer's
  // weights backward.
  if (2 * T + 6 > kernels::kFusedMaxPhases)
    return no(str("the fused step takes at most ", (kernels::kFusedMaxPhases - 6) / 2, " trunk layers; the config has ",
                  T));
  if (WarpTile<ExecSpace>::kRoundsToTf32 && c.precision != Precision::tf32)
    return no(str("the fused step's products round to TF32 on this backend; the config asks for ",
                  to_string(c.precision)));
  if (o.row_block_forward != 0 && o.row_block_forward != 16 && o.row_block_forward != 32)
    return no(str("row_block_forward = ", o.row_block_forward, "; expected 0 (off), 16 or 32 rows a block"));
  if (o.row_block_forward != 0 && !o.fuse_head_loss)
    return no("row_block_forward needs fuse_head_loss: the row blocks leave the dueling head to the loss");
  if (o.cluster_forward && !o.fuse_head_loss)
    return no("cluster_forward needs fuse_head_loss: the clusters leave the dueling head to the loss");
  if (o.cluster_forward && o.row_block_forward != 0)
    return no(str("cluster_forward and row_block_forward = ", o.row_block_forward,
                  " both asked for; expected one forward"));
  if (o.cluster_forward && !cluster_mlp_available())
    return no("cluster_forward needs thread-block clusters (CUDA, sm_90); this backend has none");
  if (o.row_block_backward != 0 && o.row_block_backward != 16 && o.row_block_backward != 32)
    return no(str("row_block_backward = ", o.row_block_backward, "; expected 0 (off), 16 or 32 rows a block"));
  if (o.row_block_backward != 0 && o.mode == PhasedMode::persistent)
    return no("row_block_backward needs mode launches: its launch goes between two phases");
  const kernels::BranchTable table = kernels::BranchTable::of(c.branches);
  const int fit = kernels::dueling_tile_fit(table, c.atoms);
  if (o.dueling_rows < 1 || o.dueling_rows > fit)
    return no(str("dueling_rows = ", o.dueling_rows, "; expected 1 to ", fit, " (rows of ", table.actions,
                  " actions × ", c.atoms, " atoms that fit in team scratch)"));
  for (const auto& [what, threads, lanes] :
       {std::tuple<const char*, int, int>{"dueling", o.dueling_threads, o.dueling_lanes},
        std::tuple<const char*, int, int>{"loss", o.loss_threads, o.loss_lanes}})
    if (!small_team_ok(threads, lanes))
      return no(str("the ", what, " kernel's team of ", threads, " threads × ", lanes,
                    " lanes; expected at least 1 thread, lanes a power of two up to 32, at most 1024 in all"));
  const int loss_threads = WarpTile<ExecSpace>::kVectorLength == 1 ? 1 : o.loss_threads;
  const int widest = table.widest();
  using Loss = kernels::C51BranchLoss<ExecSpace>;
  const int loss_team = std::max(Product::kTeamSize, loss_threads);
  const std::size_t loss = Loss::phase_scratch_bytes(o.fuse_head_loss, loss_team, c.atoms, widest);
  const std::string head =
      o.fuse_head_loss ? str(" with its dueling head (", widest, " actions in the widest branch)") : std::string();
  if (loss > kFusedScratchBudget)
    return no(str("the C51 loss of ", c.atoms, " atoms", head, " needs ", loss,
                  " bytes of team scratch; the budget is ", kFusedScratchBudget));
  if (o.teams_per_sm < 1)
    return no(str("teams_per_sm = ", o.teams_per_sm, "; expected at least 1"));
  if (!known_shape(o.tile_rows, o.tile_cols, o.tile_stages))
    return no(str("tiles of ", o.tile_rows, " × ", o.tile_cols, " in ", o.tile_stages,
                  " stages (tile_rows × tile_cols, tile_stages); ", kKnownShapes));
  if (fused_step_items(c) > kernels::kFusedMaxItems)
    return no(str("the fused step of ", T, " trunk layers and ", c.branches.size(), " branches has ",
                  fused_step_items(c), " runs of tiles; it takes at most ", kernels::kFusedMaxItems));
  return true;
}

void FusedBuilder::phase() {
  require(phases() < kernels::kFusedMaxPhases, "FusedBuilder: more than ",
          kernels::kFusedMaxPhases, " phases");
  phase_item_.push_back(static_cast<int>(items_.size()));
}

void FusedBuilder::tiles(kernels::FusedTileKind kind, int count) {
  require(!phase_item_.empty(), "FusedBuilder: tiles added before the first phase()");
  require(count >= 0, "FusedBuilder: ", count, " tiles; expected at least 0");
  if (count == 0) return;
  // Where the run starts in its phase is counted in build(), once the products' splits are known.
  items_.push_back({static_cast<int>(kind), 0, 0, count});
}

void FusedBuilder::product(kernels::ProductJob job, const std::vector<kernels::ProductSegment>& segments,
                           int norm, int split_chunks) {
  require(norm >= -1 && norm < kernels::kMaxTerms, "FusedBuilder: a product's norm ", norm, "; expected -1 (none) to ",
          kernels::kMaxTerms - 1);
  require(split_chunks >= -1, "FusedBuilder: a product's split_chunks = ", split_chunks,
          "; expected -1 (the options') or at least 0");
  require(job.m >= 1 && job.n >= 1 && job.out != nullptr && !segments.empty(), "FusedBuilder: a product of [",
          job.m, ", ", job.n, "] with ", segments.size(), " segments; expected at least 1 × 1, an output and a segment");
  for (const auto& s : segments) {
    const bool a = s.a.ptr && (s.a.row_stride == 1 || s.a.k_stride == 1);
    const bool b = s.b.ptr && (s.b.row_stride == 1 || s.b.k_stride == 1);
    require(a && b && s.k >= 0, "FusedBuilder: a product segment with an operand that is neither k- nor "
            "row-contiguous (strides ", s.a.row_stride, "/", s.a.k_stride, ", ", s.b.row_stride, "/", s.b.k_stride, ")");
  }
  // One layout a job: the tile's chunk loop is compiled for it and for whether every operand
  // stages four floats at a time (TileProduct::run).
  const auto row_contiguous = [](const kernels::ProductOperand& o) { return o.k_stride != 1 ? 1 : 0; };
  job.a_km = row_contiguous(segments[0].a);
  job.b_km = row_contiguous(segments[0].b);
  job.vec = 1;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    require(row_contiguous(s.a) == job.a_km && row_contiguous(s.b) == job.b_km, "FusedBuilder: segment ", i,
            " of a product has A ", row_contiguous(s.a) ? "row" : "k", "-contiguous and B ",
            row_contiguous(s.b) ? "row" : "k", "-contiguous; expected the layouts of segment 0 (A ",
            job.a_km ? "row" : "k", "-contiguous, B ", job.b_km ? "row" : "k", "-contiguous)");
    job.vec = job.vec && stages_four_at_a_time(s.a) && stages_four_at_a_time(s.b) ? 1 : 0;
  }
  job.seg0 = static_cast<int>(segments_.size());
  job.segs = static_cast<int>(segments.size());
  segments_.insert(segments_.end(), segments.begin(), segments.end());
  const int count = Product::tiles(job.m, job.n, job.tiles_m, job.tiles_n);
  jobs_.push_back(job);
  job_phase_.push_back(phases() - 1);
  norm_of_.push_back(norm);
  split_chunks_.push_back(split_chunks);
  tiles(kernels::FusedTileKind::product, count);
  items_.back().job = static_cast<int>(jobs_.size()) - 1;
}

FusedKernel FusedBuilder::build(FusedProgramOnDevice program, std::size_t scratch_bytes,
                                const FusedOptions& options) const {
  require(!phase_item_.empty(), "FusedBuilder: no phases");
  require(scratch_bytes <= kFusedScratchBudget, "FusedBuilder: ", scratch_bytes,
          " bytes of team scratch; the budget is ", kFusedScratchBudget);
  require(options.split_chunks >= 0 && options.split_tiles >= 1, "FusedBuilder: split_chunks = ",
          options.split_chunks, ", split_tiles = ", options.split_tiles, "; expected at least 0 and 1");
  require(known_shape(options.tile_rows, options.tile_cols, options.tile_stages), "FusedBuilder: tiles of ",
          options.tile_rows, " × ", options.tile_cols, " in ", options.tile_stages,
          " stages (tile_rows × tile_cols, tile_stages); ", kKnownShapes);
  for (const kernels::ProductJob& job : jobs_) {
    if (job.scale == nullptr && job.group_sums == nullptr) continue;
    require(job.group >= 1 && options.tile_rows % job.group == 0 && job.scale != nullptr &&
                (job.group_sums == nullptr || job.mask != nullptr),
            "FusedBuilder: a product of [", job.m, ", ", job.n, "] in groups of ", job.group, " rows",
            job.scale ? "" : " without its scale", job.group_sums && !job.mask ? " without its mask" : "",
            "; expected groups that divide the tiles' ", options.tile_rows,
            " rows, a scale, and a mask beside the group sums");
  }
  if (items_.size() > static_cast<std::size_t>(kernels::kFusedMaxItems))
    throw FusedTooLarge(str("FusedBuilder: ", items_.size(), " runs of tiles; the kernel's parameters hold at most ",
                            kernels::kFusedMaxItems));
  const ProductShape shape = product_shape(options.tile_rows, options.tile_cols, options.tile_stages);
  using MS = ExecSpace::memory_space;
  FusedKernel k;
  // Split-K: each job's chunks and splits and the workspace they need; then every phase's tiles
  // (a split job has splits tiles per output tile).
  std::vector<kernels::ProductJob> jobs = jobs_;
  std::int64_t partial_floats = 0, counters = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    kernels::ProductJob& j = jobs[i];
    const int split_chunks = split_chunks_[i] >= 0 ? split_chunks_[i] : options.split_chunks;
    shape.tiles(j.m, j.n, j.tiles_m, j.tiles_n);
    j.chunks = 0;
    for (int s = 0; s < j.segs; ++s) j.chunks += Product::chunks_of(segments_[j.seg0 + s].k);
    const int tiles = j.tiles_m * j.tiles_n;
    j.splits = 1;
    if (split_chunks > 0 && j.chunks > split_chunks) {
      const int by_chunks = (j.chunks + split_chunks - 1) / split_chunks;
      j.splits = std::max(1, std::min(by_chunks, options.split_tiles / tiles));
    }
    if (j.splits > 1) {
      partial_floats += static_cast<std::int64_t>(tiles) * j.splits * static_cast<std::int64_t>(shape.partial_floats);
      counters += tiles;
      ++k.split_jobs_;
    }
  }
  if (k.split_jobs_ > 0) {
    k.partials_ = DeviceFloats("zs::fused::split_partials", static_cast<std::size_t>(partial_floats));
    k.counters_ = Kokkos::View<int*, MemSpace>("zs::fused::split_counters", static_cast<std::size_t>(counters));
    std::int64_t at = 0, c = 0;
    for (auto& j : jobs) {
      if (j.splits < 2) continue;
      const int tiles = j.tiles_m * j.tiles_n;
      j.partials = k.partials_.data() + at;
      j.counters = k.counters_.data() + c;
      at += static_cast<std::int64_t>(tiles) * j.splits * static_cast<std::int64_t>(shape.partial_floats);
      c += tiles;
    }
  }
  // The norms' partial sums: a slot per output tile of every counted job (its last split stores
  // it), norm by norm, added by the last tile of the last phase that has such a job.
  program.norm = {};
  if (options.norm_in_backward) {
    int norms = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i)
      if (norm_of_[i] >= 0) {
        norms = std::max(norms, norm_of_[i] + 1);
        program.norm.phase = std::max(program.norm.phase, job_phase_[i]);
      }
    if (norms > 0) {
      std::int64_t slots = 0;
      std::vector<std::int64_t> first(static_cast<std::size_t>(norms) + 1, 0);
      for (int t = 0; t < norms; ++t) {
        first[static_cast<std::size_t>(t)] = slots;
        for (std::size_t i = 0; i < jobs.size(); ++i)
          if (norm_of_[i] == t) slots += static_cast<std::int64_t>(jobs[i].tiles_m) * jobs[i].tiles_n;
        require(slots > first[static_cast<std::size_t>(t)], "FusedBuilder: norm ", t, " of ", norms,
                " has no product counted in it; expected every norm up to the last to have one");
      }
      first[static_cast<std::size_t>(norms)] = slots;
      k.squares_ = Kokkos::View<double*, MemSpace>("zs::fused::norm_squares", static_cast<std::size_t>(slots));
      k.arrived_ = Kokkos::View<int, MemSpace>("zs::fused::norm_arrived");
      k.norms_.clear();
      for (int t = 0; t < norms; ++t) k.norms_.emplace_back("zs::fused::norm");
      std::vector<std::int64_t> at(first.begin(), first.end() - 1);
      for (std::size_t i = 0; i < jobs.size(); ++i)
        if (norm_of_[i] >= 0) {
          const std::size_t t = static_cast<std::size_t>(norm_of_[i]);
          jobs[i].squares = k.squares_.data() + at[t];
          at[t] += static_cast<std::int64_t>(jobs[i].tiles_m) * jobs[i].tiles_n;
        }
      program.norm.squares = k.squares_.data();
      program.norm.norms = norms;
      for (int t = 0; t <= norms; ++t) program.norm.first[t] = static_cast<int>(first[static_cast<std::size_t>(t)]);
      program.norm.arrived = k.arrived_.data();
      for (int t = 0; t < norms; ++t) program.norm.out[t] = k.norms_[static_cast<std::size_t>(t)].data();
    }
  }
  std::vector<kernels::FusedItem> items = items_;
  for (int& kinds : program.phase_kinds) kinds = 0;
  std::vector<int> phase_tiles(phase_item_.size(), 0);
  for (std::size_t p = 0; p < phase_tiles.size(); ++p) {
    const std::size_t end = p + 1 < phase_item_.size() ? static_cast<std::size_t>(phase_item_[p + 1]) : items.size();
    for (std::size_t i = static_cast<std::size_t>(phase_item_[p]); i < end; ++i) {
      auto& it = items[i];
      if (it.kind == static_cast<int>(kernels::FusedTileKind::product)) {
        const auto& j = jobs[static_cast<std::size_t>(it.job)];
        it.tiles = j.tiles_m * j.tiles_n * j.splits;
      }
      it.tile0 = phase_tiles[p];
      phase_tiles[p] += it.tiles;
      program.phase_kinds[p] |= kernels::kind_bit(static_cast<kernels::FusedTileKind>(it.kind));
    }
  }
  // Kokkos refuses empty tables' device copies no more than full ones; one dummy entry keeps a
  // table that has no entry a valid pointer.
  if (jobs.empty()) jobs.resize(1);
  auto segments = segments_.empty() ? std::vector<kernels::ProductSegment>(1) : segments_;
  program.jobs = device_table<MS>("zs::fused::jobs", jobs);
  program.segments = device_table<MS>("zs::fused::segments", segments);
  for (std::size_t i = 0; i < items.size(); ++i) {
    program.item_tile0[i] = items[i].tile0;
    program.item_code[i] = FusedProgramOnDevice::item_code_of(items[i].kind, items[i].job);
    const bool product = items[i].kind == static_cast<int>(kernels::FusedTileKind::product);
    program.item_seg0[i] = product ? jobs[static_cast<std::size_t>(items[i].job)].seg0 : 0;
  }
  program.n_phases = phases();
  program.tile_rows = shape.rows;
  program.tile_cols = shape.cols;
  program.tile_stages = shape.stages;
  program.tables_before_wait = options.tables_before_wait ? 1 : 0;
  require(options.dependents_early >= 0 && options.dependents_early <= 2, "FusedBuilder: dependents_early = ",
          options.dependents_early, "; expected 0, 1 or 2");
  program.dependents_early = options.dependents_early;
  for (int p = 0; p < phases(); ++p) {
    program.phase_item[p] = phase_item_[p];
    program.phase_tiles[p] = phase_tiles[p];
  }
  program.phase_item[phases()] = static_cast<int>(items.size());
  if (options.timeline) {
    const std::size_t all = std::accumulate(phase_tiles.begin(), phase_tiles.end(), std::size_t{0});
    k.timeline_ = Kokkos::View<std::uint64_t*, MemSpace>("zs::fused::timeline", kernels::kTileClocks * all);
    program.timeline = k.timeline_.data();
    k.timeline_jobs_ = jobs;
  }
  k.program_ = program;
  k.shape_ = {Product::kTeamSize, WarpTile<ExecSpace>::kVectorLength, std::max(scratch_bytes, shape.scratch_bytes)};
  k.mode_ = fused_mode(options);
  k.per_kind_ = options.kernel_per_kind;
  require(between_.empty() || k.mode_ != PhasedMode::persistent, "FusedBuilder: ", between_.size(),
          " launches between phases in one persistent launch; expected phases launched one by one (mode launches)");
  k.between_ = between_;
  // A kernel of only the dueling head or only the loss needs only what the caller asked for (and
  // the loss what its own team counts), not the products' stages: more of its teams fit on a
  // multiprocessor.
  const SmallTeam dueling = small_team(options.dueling_threads, options.dueling_lanes, "dueling");
  const SmallTeam loss = small_team(options.loss_threads, options.loss_lanes, "loss");
  const int atoms = program.c51.sup.atoms;
  const int widest = program.c51.table.widest();
  const bool head_loss = std::any_of(items_.begin(), items_.end(), [](const kernels::FusedItem& it) {
    return it.kind == static_cast<int>(kernels::FusedTileKind::c51_head_branch);
  });
  const std::size_t loss_bytes =
      atoms <= 0 ? std::size_t{0}
                 : kernels::C51BranchLoss<ExecSpace>::phase_scratch_bytes(head_loss, loss.threads, atoms, widest);
  require(loss_bytes <= kFusedScratchBudget, "FusedBuilder: the loss's team of ", loss.threads, " threads needs ",
          loss_bytes, " bytes of team scratch for ", atoms, " atoms; the budget is ", kFusedScratchBudget);
  k.dueling_shape_ = {dueling.threads, dueling.lanes, scratch_bytes};
  k.loss_shape_ = {loss.threads, loss.lanes, std::max(scratch_bytes, loss_bytes)};
  if (k.mode_ == PhasedMode::persistent) {
    const int widest = *std::max_element(phase_tiles.begin(), phase_tiles.end());
    k.teams_ = std::max(1, std::min(persistent_grid_teams(options.teams_per_sm), widest));
  }
  return k;
}

void FusedBuilder::launch_before(int phase, std::function<void(const ExecSpace&)> launch) {
  require(phase >= 0 && phase <= phases(), "FusedBuilder::launch_before: phase ", phase, "; expected 0 to ", phases());
  between_.emplace_back(phase, std::move(launch));
}

void FusedKernel::set_norm_tail(Kokkos::View<double, MemSpace> out, const kernels::FusedNorm<ExecSpace>::Tail& tail) {
  require(takes_norm(), "FusedKernel::set_norm_tail: the kernel takes no norm (FusedOptions::norm_in_backward "
          "off, or no product counted in it)");
  norms_[0] = out;
  program_.norm.out[0] = out.data();
  program_.norm.tail = tail;
  program_.norm.has_tail = 1;
}

void FusedKernel::set_norm_out(int t, Kokkos::View<double, MemSpace> out) {
  require(t >= 1 && t < norms(), "FusedKernel::set_norm_out: norm ", t, "; the kernel takes ", norms(),
          " norms (0 is set_norm_tail's)");
  norms_[static_cast<std::size_t>(t)] = out;
  program_.norm.out[t] = out.data();
}

void FusedKernel::enqueue(const ExecSpace& exec) const {
  const bool four = program_.tile_stages == 4;
  if (program_.tile_rows == 64)
    enqueue_as<64, 32, 3>(exec);
  else if (program_.tile_cols == 32)
    four ? enqueue_as<32, 32, 4>(exec) : enqueue_as<32, 32, 3>(exec);
  else
    four ? enqueue_as<32, 16, 4>(exec) : enqueue_as<32, 16, 3>(exec);
}

template <int Rows, int Cols, int Stages>
void FusedKernel::enqueue_as(const ExecSpace& exec) const {
  const PhaseOfKinds<kAllKinds, Rows, Cols, Stages> all{program_};
  if (mode_ == PhasedMode::persistent) {
    phased_launch(exec, "zs::fused_step", all, shape_, mode_, teams_, barrier_);
    return;
  }
  for (int p = 0; p < program_.n_phases; ++p) {
    launch_between(exec, p);
    const int kinds = program_.phase_kinds[p];
    if (!per_kind_)
      launch_phase(exec, "zs::fused_step", all, shape_, p);
    else if ((kinds & ~kProducts) == 0)
      launch_phase(exec, "zs::fused_step::products", PhaseOfKinds<kProducts, Rows, Cols, Stages>{program_}, shape_, p);
    else if (kinds == kDueling)  // the head's and the loss's kernels have no product in them
      launch_phase(exec, "zs::fused_step::dueling", PhaseOfKinds<kDueling, 64, 32>{program_}, dueling_shape_, p);
    else if (kinds == kLoss)
      launch_phase(exec, "zs::fused_step::loss", PhaseOfKinds<kLoss, 64, 32>{program_}, loss_shape_, p);
    else if (kinds == kHeadLoss)
      launch_phase(exec, "zs::fused_step::head_loss", PhaseOfKinds<kHeadLoss, 64, 32>{program_}, loss_shape_, p);
    else
      launch_phase(exec, "zs::fused_step", all, shape_, p);
  }
  launch_between(exec, program_.n_phases);
}

void FusedKernel::launch_between(const ExecSpace& exec, int phase) const {
  for (const auto& [before, launch] : between_)
    if (before == phase) launch(exec);
}

std::vector<TileTimes> FusedKernel::timeline() const {
  std::vector<TileTimes> out;
  if (timeline_.size() == 0) return out;
  const std::vector<std::uint64_t> c = download(timeline_);
  using kernels::TileClock;
  const auto at = [&](std::size_t tile, TileClock k) { return c[kernels::kTileClocks * tile + static_cast<int>(k)]; };
  std::size_t i = 0;
  for (int p = 0; p < program_.n_phases; ++p)
    for (int t = 0; t < program_.phase_tiles[p]; ++t, ++i) {
      TileTimes x;
      x.phase = p;
      x.tile = t;
      x.sm = static_cast<int>(at(i, TileClock::sm));
      x.begin_ns = at(i, TileClock::begin_ns);
      x.end_ns = at(i, TileClock::end_ns);
      x.wait_cycles = at(i, TileClock::waited_cycles) - at(i, TileClock::begin_cycles);
      x.work_cycles = at(i, TileClock::end_cycles) - at(i, TileClock::waited_cycles);
      const int it = program_.item_of(p, t);
      x.kind = program_.item_code[it] & 7;
      if (x.kind == static_cast<int>(kernels::FusedTileKind::product)) {
        x.job = program_.item_code[it] >> 3;
        const kernels::ProductJob& j = timeline_jobs_[static_cast<std::size_t>(x.job)];
        x.m = j.m;
        x.n = j.n;
        x.chunks = j.chunks;
        x.splits = j.splits;
      }
      // A tile of no chunks stamps no landing, and only products and the loss with its head stamp
      // parts: the parts are this launch's when they are in order.
      const std::uint64_t ends[4] = {at(i, TileClock::waited_cycles), at(i, TileClock::part1),
                                     at(i, TileClock::part2), at(i, TileClock::part3)};
      if (ends[0] <= ends[1] && ends[1] <= ends[2] && ends[2] <= ends[3] && ends[3] <= at(i, TileClock::end_cycles))
        for (int q = 0; q < 3; ++q) x.parts[q] = ends[q + 1] - ends[q];
      out.push_back(x);
    }
  return out;
}

int FusedKernel::launches() const {
  if (mode_ == PhasedMode::persistent) return 1;
  int n = static_cast<int>(between_.size());
  for (int p = 0; p < program_.n_phases; ++p) n += program_.phase_tiles[p] > 0 ? 1 : 0;
  return n;
}

}  // namespace zs
