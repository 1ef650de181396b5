#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/budget_sum.hpp"
#include "backends/then.hpp"
#include "losses/registry.hpp"

namespace zs {

namespace {
// Whether the plans take heads_bias and stacked_heads whatever those say (TrainerOptions::wide_heads_from).
bool wide_heads(const TrainerOptions& o) { return o.batch_size >= o.wide_heads_from; }

// The pieces of a term's gradient buffer that its norm reads (LossTerm::gradient_spans).
kernels::NormPieces<ExecSpace> norm_pieces(const LossTerm& t) {
  const auto spans = t.gradient_spans();
  const std::size_t n = t.grad().flat().extent(0);
  require(!spans.empty() && spans.size() <= 2, "loss term '", t.name(), "': ", spans.size(),
          " gradient spans; expected 1 or 2");
  kernels::NormPieces<ExecSpace> p;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const auto [begin, end] = spans[i];
    require(begin < end && end <= n && (i == 0 || begin >= spans[0].second), "loss term '", t.name(),
            "': gradient span ", i, " is [", begin, ", ", end, "); expected a non-empty piece of the ", n,
            "-float layout after the one before");
    (i == 0 ? p.first : p.second) = Kokkos::subview(t.grad().flat(), std::make_pair(begin, end));
  }
  return p;
}

// Whether the batch is one the fused step is meant for (TrainerOptions::fused_max_batch).
bool fused_batch_fits(const TrainerOptions& o, std::string* reason) {
  if (o.batch_size <= o.fused_max_batch) return true;
  *reason = str("batch ", o.batch_size, " is above fused_max_batch ", o.fused_max_batch,
                " (the launch plans' products win at large batches on this backend)");
  return false;
}
}  // namespace

const TermMetrics* StepMetrics::term(const std::string& name) const {
  for (const auto& t : terms)
    if (t.name == name) return &t;
  return nullptr;
}

Trainer::Trainer(const Config& config, const TrainerOptions& options)
    : config_((config.validate(), config)),
      options_(options),
      layout_(layout_for(config_)),
      gemm_(stream_, config_.precision),
      side_(options.side_lane ? std::make_unique<SideLane>(stream_, config_.precision) : nullptr),
      net_(config_, layout_),
      online_(layout_, "zs::online"),
      target_(layout_, "zs::target"),
      batch_(config_, options.batch_size),
      acts_online_(config_, 2 * options.batch_size),
      acts_target_(config_, options.batch_size),
      buffers_(layout_, 1 + static_cast<int>(enabled_terms(config_).size())),
      c51_(config_, options.batch_size, buffers_.loss(0)),
      fused_(options.fused_step && fused_batch_fits(options, &fused_off_reason_) &&
             fused_supports(config_, options.fused, &fused_off_reason_)),
      ctx_{config_,      layout_, net_, online_,   target_,
           batch_,       acts_online_, acts_target_, c51_, buffers_,
           options.group ? std::int64_t{options.group->rank()} * options.batch_size : 0, side_.get(),
           fused_ ? &options_.fused : nullptr, options.narrow_gather,
           options.stacked_heads || wide_heads(options)},
      optimizer_(config_, layout_),
      guard_(options.guard),
      unit_scale_("zs::unit_scale"),
      norm_scratch_(kernels::make_grad_norms_scratch(stream_.exec())),
      term_record_("zs::term_record") {
  require(options.c51_min_blocks == 0 || options.c51_min_blocks == 10 || options.c51_min_blocks == 12,
          "Trainer: c51_min_blocks = ", options.c51_min_blocks, "; expected 0 (no launch bound), 10 or 12");
  ctx_.c51_min_blocks = options.c51_min_blocks;
  const auto auxiliaries = enabled_terms(config_);
  require(auxiliaries.size() + 1 <= static_cast<std::size_t>(kernels::kMaxTerms), "Trainer: ", auxiliaries.size() + 1,
          " loss terms; expected at most ", kernels::kMaxTerms);
  // The fused kernel takes the norms only where the norms' launch would have nothing else to do:
  // every term's gradient written by its products (the auxiliaries all ride it, below), no
  // all-reduce between the loss and the norms, the posts beside the update.
  const bool reduces = (options_.group && options_.group->size() > 1) || options_.always_reduce;
  if (reduces || !posts_beside()) options_.fused.norm_in_backward = false;
  if (!fused_) {  // fused, the C51 term's kernel runs the forward
    if (options_.stacked_forward) {  // before the terms, whose plans read the activations
      acts_online_.stack_heads(config_);
      acts_target_.stack_heads(config_);
    }
    forward_plan_ = std::make_unique<ForwardPlan>(
        net_, std::vector<ForwardPass>{{&online_, batch_.states(), &acts_online_, 0},
                                       {&online_, batch_.next_states(), &acts_online_, options.batch_size},
                                       {&target_, batch_.next_states(), &acts_target_, 0}},
        ForwardShape{options.fused_bias, options.heads_bias || wide_heads(options),
                     options.padded_outputs, options.stacked_forward});
    if (ctx_.stacked_heads) ctx_.stacked_hidden_weights = forward_plan_->stacked_hidden_weights(online_);
  }
  terms_.push_back(std::make_unique<C51Term>(ctx_, c51_budget(config_)));
  for (const auto& spec : auxiliaries) {
    terms_.push_back(spec.make(ctx_, spec.budget(config_)));
    require(terms_.back() && terms_.back()->name() == spec.name, "Trainer: loss term '", spec.name,
            "' made a term called '", terms_.back() ? terms_.back()->name() : std::string("(none)"),
            "'; expected its own name");
  }
  if (auto* c51 = dynamic_cast<C51Term*>(terms_.front().get()); c51 && fused_) {
    // The auxiliaries that can run their backward inside the fused kernel's phases do (one launch a
    // layer for every term); the others keep their own launches after it.
    std::vector<FusedRider> riders;
    if (FusedC51::carries_riders(options_.fused))
      for (std::size_t i = 1; i < terms_.size(); ++i) {
        const auto& except = options_.fused.ride_except;
        if (std::find(except.begin(), except.end(), terms_[i]->name()) != except.end()) continue;
        if (auto r = terms_[i]->ride_fused(options_.fused, gemm_)) riders.push_back(std::move(*r));
      }
    if (riders.size() + 1 != terms_.size()) options_.fused.norm_in_backward = false;
    if (c51->fuse(riders) + 1 != terms_.size()) options_.fused.norm_in_backward = false;
  }
  Kokkos::deep_copy(unit_scale_, 1.f);
  if (terms_.size() > 1) applied_ = std::make_unique<ParamBuffer>(layout_, "zs::applied_grad");
  if (config_.spectral_norm > 0.f)
    spectral_ = std::make_unique<SpectralNorm>(layout_, config_.spectral_norm, config_.seed ^ 0x5eed5eedull);
  if ((options_.group && options_.group->size() > 1) || options_.always_reduce)
    comm_ = make_communicator(options_.group ? *options_.group : ProcessGroup::solo(), stream_);
  if (auto* c51 = dynamic_cast<C51Term*>(terms_.front().get());
      c51 && c51->fused() && c51->fused()->kernel().takes_norm() && options_.fused.norm_in_backward) {
    const LossTerm& t = *c51;
    FusedKernel& k = c51->fused()->kernel();
    require(k.norms() == static_cast<int>(terms_.size()), "Trainer: the fused kernel takes ", k.norms(),
            " norms; expected one a term (", terms_.size(), ")");
    k.set_norm_tail(t.norm(), {guard_.verdict_kernel(t.loss(), t.norm(), optimizer_.lr()),
                               optimizer_.prepare_kernel(guard_.skip_flag(), DeviceScalar<const double>(t.norm()),
                                                         t.budget() * config_.max_grad_norm)});
    for (std::size_t i = 1; i < terms_.size(); ++i) k.set_norm_out(static_cast<int>(i), terms_[i]->norm());
    norm_in_step_ = true;
  }
  init_params(config_.seed);
}

Trainer::~Trainer() {
  // Work still queued reads these buffers; let it finish before they go.
  stream_.synchronize();
}

const LossTerm* Trainer::term(const std::string& name) const {
  for (const auto& t : terms_)
    if (t->name() == name) return t.get();
  return nullptr;
}

void Trainer::set_lr(float lr) { optimizer_.set_lr(stream_.exec(), lr); }

void Trainer::init_params(std::uint64_t seed) {
  stream_.synchronize();
  std::mt19937_64 rng(seed);
  auto host = Kokkos::create_mirror_view(online_.flat());
  Kokkos::deep_copy(host, 0.f);
  for (const auto& l : layout_.layers()) {
    const float bound = 1.f / std::sqrt(static_cast<float>(l.in));
    std::uniform_real_distribution<float> u(-bound, bound);
    for (std::size_t i = 0; i < std::size_t(l.in) * l.out; ++i) host(l.weight_offset + i) = u(rng);
    for (int i = 0; i < l.out; ++i) host(l.bias_offset + i) = u(rng);
  }
  Kokkos::deep_copy(online_.flat(), host);
  Kokkos::deep_copy(target_.flat(), host);
  optimizer_.reset();
  for (auto& t : terms_) {
    Kokkos::deep_copy(t->grad().flat(), 0.f);
    t->reset();
  }
  Kokkos::fence();
  guard_.reset();
  steps_ = 0;
}

const char* Trainer::phase_name(Phase p) {
  switch (p) {
    case Phase::spectral_norm: return "spectral_norm";
    case Phase::forward: return "forward";
    case Phase::loss_terms: return "loss_terms";
    case Phase::all_reduce: return "all_reduce";
    case Phase::norm_and_guard: return "norm_and_guard";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

void Trainer::enqueue_term(std::size_t i) {
  require(i < terms_.size(), "Trainer::enqueue_term: term ", i, "; this step has ", terms_.size());
  terms_[i]->enqueue(stream_.exec(), gemm_);
}

const FusedKernel* Trainer::fused_kernel() const {
  const auto* c51 = dynamic_cast<const C51Term*>(terms_.front().get());
  return c51 && c51->fused() ? &c51->fused()->kernel() : nullptr;
}

void Trainer::enqueue_phase(Phase phase) {
  const ExecSpace& exec = stream_.exec();
  const LossTerm& c51 = *terms_.front();
  switch (phase) {
    case Phase::spectral_norm:
      // After the update it projects, and gated by the guard like the update: a tripped step
      // leaves the weights and the power iteration's vectors as they were.
      if (spectral_) spectral_->apply(exec, online_.flat(), guard_.skip_flag());
      break;
    case Phase::forward:
      if (forward_plan_) forward_plan_->enqueue(exec, gemm_, side_.get());
      break;
    case Phase::loss_terms:
      for (auto& t : terms_) t->enqueue(exec, gemm_);
      break;
    case Phase::all_reduce:
      // Every term's raw gradient and loss, averaged over the ranks before anything reads them:
      // every rank then computes the same norms, the same guard verdict (a NaN on one rank
      // trips them all) and the same update.
      if (comm_) comm_->enqueue_mean(stream_, buffers_.all());
      break;
    case Phase::norm_and_guard: {
      if (norm_in_step_) break;  // the fused kernel's last backward phase ran all of it
      // The guard judges C51's loss and raw gradient norm; every other term's norm only sets its
      // own clip (a non-finite one adds nothing) and is reported in term_metrics(). All the norms
      // come from one launch, whose last thread then runs the guard's check and Adam's prepare
      // (C51's clip scale, t and the bias corrections for the verdict): one graph node, not three.
      // C51's share of max_grad_norm is its clip. With posts_beside the records are posted in
      // the optimizer phase instead (enqueue_posts). Each norm reads only the pieces of the layout
      // its term writes (LossTerm::gradient_spans).
      std::vector<kernels::NormPieces<ExecSpace>> grads;
      std::vector<DeviceScalar<double>> norms;
      for (const auto& t : terms_) {
        grads.push_back(norm_pieces(*t));
        norms.push_back(t->norm());
      }
      const auto prepare = optimizer_.prepare_kernel(guard_.skip_flag(), DeviceScalar<const double>(c51.norm()),
                                                     c51.budget() * config_.max_grad_norm);
      if (posts_beside()) {
        const kernels::Then<kernels::GuardCheck<ExecSpace>, kernels::AdamPrepare<ExecSpace>> tail{
            guard_.verdict_kernel(c51.loss(), c51.norm(), optimizer_.lr()), prepare};
        kernels::grad_norms(exec, grads, norms, norm_scratch_, tail);
      } else {
        const kernels::Then<TrainingGuard::CheckKernel, kernels::AdamPrepare<ExecSpace>> tail{
            guard_.check_kernel(c51.loss(), c51.norm(), optimizer_.lr()), prepare};
        kernels::grad_norms(exec, grads, norms, norm_scratch_, tail);
        enqueue_term_record(exec);
      }
      break;
    }
    case Phase::optimizer: {
      // Alone, C51's clip (its scale set by the norm's tail) rides inside Adam as a scale, no
      // extra pass over the gradient; with auxiliaries, the applied gradient is built in its own
      // buffer: C51's scaled, each auxiliary added clipped to its own share, so
      // ‖applied‖ ≤ max_grad_norm and the terms' gradients stay their raw selves.
      if (posts_beside()) {
        side_->fork();
        enqueue_posts(side_->exec());
      }
      if (!applied_) {
        optimizer_.update(exec, online_, c51.grad(), optimizer_.clip_scale(), guard_.skip_flag(), target_);
      } else {
        std::vector<kernels::BudgetTerm> auxiliaries;
        for (std::size_t i = 1; i < terms_.size(); ++i) {
          kernels::BudgetTerm b{terms_[i]->grad().flat().data(), terms_[i]->norm().data(),
                                static_cast<double>(terms_[i]->budget() * config_.max_grad_norm)};
          const auto spans = terms_[i]->gradient_spans();  // norm_pieces checked them
          for (std::size_t s = 0; s < spans.size() && s < 2; ++s) {
            b.begin[s] = static_cast<std::int64_t>(spans[s].first);
            b.end[s] = static_cast<std::int64_t>(spans[s].second);
          }
          auxiliaries.push_back(b);
        }
        const auto sum = kernels::make_budget_sum<ExecSpace>(
            applied_->flat(), ConstDeviceFloats(c51.grad().flat()), DeviceScalar<const float>(optimizer_.clip_scale()),
            auxiliaries);
        if (options_.budget_in_adam) {
          optimizer_.update_budgeted(exec, online_, sum, guard_.skip_flag(), target_);
        } else {
          kernels::budget_sum(exec, sum);
          optimizer_.update(exec, online_, *applied_, unit_scale_, guard_.skip_flag(), target_);
        }
      }
      if (posts_beside()) side_->join();
      break;
    }
  }
}

bool Trainer::posts_beside() const { return options_.posts_beside && side_ != nullptr; }

void Trainer::enqueue_term_record(const ExecSpace& exec) {
  if (terms_.size() == 1) return;
  std::vector<kernels::TermSource> sources;
  for (const auto& t : terms_)
    sources.push_back({t->loss().data(), t->norm().data(), static_cast<double>(t->budget() * config_.max_grad_norm),
                       t->statistic().second.data()});
  using WriteThenPost = kernels::ThenPost<ExecSpace, kernels::WriteTermsRecord<ExecSpace>>;
  Kokkos::parallel_for(
      "zs::terms_record", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
      WriteThenPost{kernels::make_terms_record<ExecSpace>(term_record_.device(), guard_.step_counter(), sources),
                    term_record_.poster(guard_.step_counter(), options_.guard.post_every)});
}

void Trainer::enqueue_posts(const ExecSpace& exec) {
  guard_.post(exec);
  enqueue_term_record(exec);
}

std::optional<StepMetrics> Trainer::term_metrics() const {
  if (terms_.size() == 1) return std::nullopt;
  const auto rec = term_record_.read();
  if (!rec) return std::nullopt;
  const kernels::TermsRecord& r = rec->value;
  StepMetrics m;
  m.seq = rec->seq;
  m.step = static_cast<std::int64_t>(r.step);
  m.steps_behind = steps_ - 1 - m.step;
  for (std::size_t i = 0; i < terms_.size() && i < static_cast<std::size_t>(r.terms); ++i) {
    TermMetrics t;
    t.name = terms_[i]->name();
    t.loss = r.term[i].loss;
    t.grad_norm = r.term[i].grad_norm;
    t.scale = r.term[i].scale;
    t.statistic_name = terms_[i]->statistic().first;
    t.statistic = r.term[i].statistic;
    m.terms.push_back(t);
  }
  return m;
}

void Trainer::enqueue_step(const std::function<void()>& after_loss) {
  for (Phase p : kPhases) {
    enqueue_phase(p);
    if (p == Phase::loss_terms && after_loss) after_loss();
  }
}

void Trainer::step_direct() {
  enqueue_step();
  ++steps_;
}

void Trainer::run_graph(Graph& graph, const std::function<void()>& body) {
  if (comm_ && !graph.captured()) {
    // As Graph::run, with the first step finished before the capture: NCCL sets up its
    // connections during its first collective, which must not overlap the recording.
    body();
    stream_.synchronize();
    graph.capture(stream_, body);
  } else {
    graph.run(stream_, body);
  }
}

void Trainer::step() {
  if (!options_.use_graph) return step_direct();
  if (!graph_) {
    graph_ = std::make_unique<Graph>();
    graph_->set_programmatic_edges(options_.programmatic_launch);
  }
  run_graph(*graph_, [this] { enqueue_step(); });
  ++steps_;
}

void Trainer::step_with(const std::function<void()>& before, const std::function<void()>& after,
                        const std::function<void()>& after_loss) {
  if (!options_.use_graph) {
    before();
    enqueue_step(after_loss);
    ++steps_;
    after();
    return;
  }
  if (!graph_with_) {
    graph_with_ = std::make_unique<Graph>();
    graph_with_->set_programmatic_edges(options_.programmatic_launch);
  }
  // The recording keeps its own copies: a host graph's replay calls it after this call's
  // arguments are gone (they were read through dangling references before).
  run_graph(*graph_with_, [this, before, after, after_loss] {
    before();
    enqueue_step(after_loss);
    after();
  });
  ++steps_;
}

std::vector<float> Trainer::read_tensor(const ParamBuffer& buf, const std::string& name) const {
  stream_.synchronize();
  return download_tensor(buf, layout_.tensor(name));
}

void Trainer::write_tensor(const ParamBuffer& buf, const std::string& name, const std::vector<float>& data) {
  const TensorDesc& t = layout_.tensor(name);
  require(data.size() == t.size(), "Trainer::write_tensor: '", name, "' given ", data.size(), " values; expected ",
          t.size());
  stream_.synchronize();
  upload_tensor(buf, t, data);
}

}  // namespace zs
