// A loss term that exists only in this file: an L2 penalty ½λ‖θ‖² over every parameter, with a
// layer of its own and a call counter it checkpoints. Registering it is the only thing done to
// add it, and the trainer, its metrics record, its checkpoint and the parameter layout all take
// it in: the proof that a new loss is one file plus one registration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/grad_norm.hpp"
#include "losses/registry.hpp"
#include "nn/fused_kernel.hpp"
#include "same_batches.hpp"
#include "test_util.hpp"
#include "train/trainer.hpp"

namespace {

constexpr float kLambda = 0.5f;
constexpr float kBudget = 0.2f;

struct PenaltyGrad {
  Kokkos::View<const float*, zs::MemSpace> params;
  Kokkos::View<float*, zs::MemSpace> grad;
  float lambda;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { grad(i) = lambda * params(i); }
};

// loss = ½λ‖θ‖² from ‖θ‖ (the project's own norm kernel, no Kokkos reduction), and the call count.
struct PenaltyLossAndCount {
  Kokkos::View<const double, zs::MemSpace> norm;
  Kokkos::View<float, zs::MemSpace> loss;
  Kokkos::View<std::int64_t, zs::MemSpace> calls;
  float lambda;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    loss() = static_cast<float>(0.5 * lambda * norm() * norm());
    calls() += 1;
  }
};

class ToyPenalty final : public zs::LossTerm {
 public:
  ToyPenalty(const zs::StepContext& ctx, float budget)
      : LossTerm("toy", budget, ctx),
        ctx_(ctx),
        calls_("zs::toy::calls"),
        param_norm_("zs::toy::param_norm"),
        scratch_(zs::kernels::make_grad_norms_scratch(zs::ExecSpace())) {}

  void enqueue(const zs::ExecSpace& exec, const zs::Gemm&) override {
    const auto n = static_cast<std::int64_t>(ctx_.online.size());
    const zs::ConstDeviceFloats params(ctx_.online.flat());
    Kokkos::parallel_for("zs::test::toy_grad", Kokkos::RangePolicy<zs::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, n),
                         PenaltyGrad{params, grad().flat(), kLambda});
    zs::kernels::global_grad_norm(exec, params, param_norm_, scratch_);
    Kokkos::parallel_for("zs::test::toy_loss", Kokkos::RangePolicy<zs::ExecSpace>(exec, 0, 1),
                         PenaltyLossAndCount{param_norm_, loss(), calls_, kLambda});
  }
  void save_state(zs::safetensors::File& f) const override {
    std::int64_t c = 0;
    Kokkos::deep_copy(c, calls_);
    f.tensors["toy.calls"] = zs::safetensors::Tensor::from<std::int64_t>({1}, {c});
  }
  void check_state(const zs::safetensors::File& f) const override { f.i64("toy.calls", {1}); }
  void load_state(const zs::safetensors::File& f) override { Kokkos::deep_copy(calls_, f.i64("toy.calls", {1})[0]); }
  void reset() override { Kokkos::deep_copy(calls_, std::int64_t{0}); }

  std::int64_t calls() const {
    std::int64_t c = 0;
    Kokkos::deep_copy(c, calls_);
    return c;
  }

 private:
  const zs::StepContext& ctx_;
  Kokkos::View<std::int64_t, zs::MemSpace> calls_;
  zs::DeviceScalar<double> param_norm_;
  zs::kernels::GradNormsScratch<zs::ExecSpace> scratch_;
};

zs::LossTermSpec toy_spec() {
  return {"toy", [](const zs::Config&) { return true; }, [](const zs::Config&) { return kBudget; },
          [](const zs::Config& c) { return std::vector<zs::LayerShape>{{"toy.scale", c.trunk.back(), 3}}; },
          [](const zs::StepContext& ctx, float budget) { return std::make_unique<ToyPenalty>(ctx, budget); }};
}

zs::Config small(std::uint64_t seed) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {12, 10}}, {"head_hidden", 6}, {"branches", {3, 2}},
                                {"atoms", 7}, {"v_min", -4}, {"v_max", 4}, {"lr", 1e-3}, {"max_grad_norm", 0.05},
                                {"seed", seed}, {"precision", "fp32"}});
}

std::vector<float> host(const zs::DeviceFloats& d) { return zs::test::to_host(d); }

}  // namespace

TEST(ToyTerm, OneRegistrationAddsATermEverywhere) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = small(seed);
  const int B = 5;
  zs::TrainerOptions opt;
  opt.batch_size = B;
  zs::Trainer plain(c, opt);
  const auto hb = zs::random_batch(c, B, seed + 1);
  zs::upload(plain.stream().exec(), c, hb, plain.batch());
  plain.step_direct();
  plain.synchronize();
  const auto g_c51 = host(plain.grad().flat());

  zs::LossTermRegistration reg(toy_spec());
  zs::Trainer tr(c, opt);
  // The layout: the network's tensors where they were, then the toy's own layer.
  ASSERT_EQ(tr.layout().tensors().size(), plain.layout().tensors().size() + 2);
  for (std::size_t i = 0; i < plain.layout().tensors().size(); ++i)
    EXPECT_EQ(tr.layout().tensors()[i].offset, plain.layout().tensors()[i].offset);
  EXPECT_EQ(tr.layout().tensor("toy.scale.weight").shape, (std::vector<int>{3, 10}));
  // The terms and their shares.
  ASSERT_EQ(tr.terms().size(), 2u);
  EXPECT_EQ(tr.terms()[0]->name(), "c51");
  EXPECT_NEAR(tr.terms()[0]->budget(), 1.0 - kBudget, 1e-7);
  ASSERT_NE(tr.term_as<ToyPenalty>("toy"), nullptr);

  const auto p0 = host(tr.online().flat());
  zs::upload(tr.stream().exec(), c, hb, tr.batch());
  tr.step_direct();
  tr.synchronize();
  EXPECT_EQ(tr.term_as<ToyPenalty>("toy")->calls(), 1);

  // The toy's loss and gradient against a double reference.
  double ref_loss = 0, ref_sq = 0;
  for (float p : p0) ref_loss += 0.5 * kLambda * double(p) * p, ref_sq += double(kLambda * p) * (kLambda * p);
  const double toy_norm = std::sqrt(ref_sq);
  const auto m = tr.term_metrics();
  ASSERT_TRUE(m.has_value());
  const zs::TermMetrics* toy = m->term("toy");
  ASSERT_NE(toy, nullptr);
  EXPECT_NEAR(toy->loss, ref_loss, 1e-5 * ref_loss);
  EXPECT_NEAR(toy->grad_norm, toy_norm, 1e-6 * toy_norm);
  const double limit = double(kBudget * c.max_grad_norm), s_toy = std::min(1.0, limit / (toy_norm + 1e-6));
  EXPECT_NEAR(toy->scale, s_toy, 1e-7);
  EXPECT_TRUE(toy->statistic_name.empty());
  EXPECT_TRUE(std::isnan(toy->statistic));

  // What Adam applied: C51's gradient (the network part is the plain trainer's) at its share, plus
  // the toy's clipped to its own.
  const auto applied = host(tr.applied_grad().flat());
  double c51_sq = 0;
  for (float g : g_c51) c51_sq += double(g) * g;
  const double s_c51 = std::min(1.0, double((1.0f - kBudget) * c.max_grad_norm) / (std::sqrt(c51_sq) + 1e-6));
  ASSERT_LT(s_c51, 1.0);
  ASSERT_LT(s_toy, 1.0);
  for (std::size_t i = 0; i < applied.size(); ++i) {
    const double c51 = i < g_c51.size() ? g_c51[i] : 0.0;
    const double want = s_c51 * c51 + s_toy * kLambda * p0[i];
    ASSERT_NEAR(applied[i], want, 1e-6 * (std::abs(want) + 1e-3)) << "element " << i;
  }

  // Its own state goes into the checkpoint and comes back.
  const std::string path = zs::test::temp_path("toy_term.safetensors");
  tr.save(path);
  zs::Trainer resumed(c, opt);
  EXPECT_EQ(resumed.term_as<ToyPenalty>("toy")->calls(), 0);
  resumed.load(path);
  EXPECT_EQ(resumed.term_as<ToyPenalty>("toy")->calls(), 1);
  std::remove(path.c_str());
}

TEST(ToyTerm, GraphReplayEqualsDirectLaunchAndTheRegistrationEnds) {
  const auto seed = zs::test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto c = small(seed);
  zs::TrainerOptions opt;
  opt.batch_size = 4;
  {
    zs::LossTermRegistration reg(toy_spec());
    EXPECT_THROW(zs::LossTermRegistration again(toy_spec()), zs::Error);
    zs::Trainer graph(c, opt), direct(c, opt);
    zs::test::step_on_same_batches(graph, direct, 4, seed + 10, [](zs::Trainer& g, zs::Trainer& d) {
      g.step();
      d.step_direct();
    });
    EXPECT_TRUE(graph.graph_recorded());
    EXPECT_TRUE(zs::test::same_bits(host(graph.online().flat()), host(direct.online().flat())));
    EXPECT_EQ(graph.term_as<ToyPenalty>("toy")->calls(), 4);
  }
  zs::Trainer after(c, opt);
  EXPECT_EQ(after.terms().size(), 1u);
  EXPECT_EQ(after.term("toy"), nullptr);
}

namespace {
// A term that asks to ride the fused kernel with a rider it cannot take: each defect a case.
enum class RiderDefect { no_loss, no_gradients, wrong_rows, features_and_heads };

class BadRider final : public zs::LossTerm {
 public:
  BadRider(const zs::StepContext& ctx, float budget, RiderDefect defect)
      : LossTerm("bad_rider", budget, ctx),
        defect_(defect),
        g_(ctx.config, ctx.batch.size),
        short_g_(ctx.config, ctx.batch.size + 1),
        head_(ctx.config, ctx.batch.size) {}
  void enqueue(const zs::ExecSpace&, const zs::Gemm&) override {}
  std::optional<zs::FusedRider> ride_fused(const zs::FusedOptions&, const zs::Gemm&) override {
    zs::FusedRider r;
    r.loss = [](const zs::ExecSpace&) {};
    r.g = &g_;
    r.grad = &grad();
    switch (defect_) {
      case RiderDefect::no_loss: r.loss = nullptr; break;
      case RiderDefect::no_gradients: r.grad = nullptr; break;
      case RiderDefect::wrong_rows: r.g = &short_g_; break;
      case RiderDefect::features_and_heads:
        r.features_given = true;
        r.head_sets.push_back({zs::HeadSet{}, head_, g_.d_value_out.data(), g_.d_branch_out.data()});
        break;
    }
    return r;
  }
  void save_state(zs::safetensors::File&) const override {}
  void check_state(const zs::safetensors::File&) const override {}
  void load_state(const zs::safetensors::File&) override {}
  void reset() override {}

 private:
  RiderDefect defect_;
  zs::Gradients g_, short_g_;
  zs::HeadActs head_;
};
}  // namespace

// The fused kernel refuses a rider it cannot carry with a message that says what is missing or
// wrong, at the trainer's construction, never later in a step.
TEST(ToyTerm, ARiderTheFusedKernelCannotCarryIsRefusedByName) {
  const auto seed = zs::test::fresh_seed();
  auto c = small(seed);
  c.precision = zs::Precision::tf32;  // what the fused step takes on CUDA
  zs::TrainerOptions opt;
  opt.batch_size = 6;
  opt.fused_step = true;
  opt.fused.mode = zs::PhasedMode::launches;
  const std::pair<RiderDefect, const char*> cases[] = {{RiderDefect::no_loss, "without its loss"},
                                                        {RiderDefect::no_gradients, "gradient buffer"},
                                                        {RiderDefect::wrong_rows, "7 gradient rows"},
                                                        {RiderDefect::features_and_heads, "1 head sets and its features' gradient given"}};
  for (const auto& [defect, says] : cases) {
    SCOPED_TRACE(says);
    zs::LossTermRegistration reg({"bad_rider", [](const zs::Config&) { return true; },
                                  [](const zs::Config&) { return 0.1f; },
                                  [](const zs::Config&) { return std::vector<zs::LayerShape>{}; },
                                  [defect = defect](const zs::StepContext& ctx, float budget) {
                                    return std::make_unique<BadRider>(ctx, budget, defect);
                                  }});
    try {
      zs::Trainer t(c, opt);
      ADD_FAILURE() << "the trainer took the rider (fused " << t.fused() << ": " << t.fused_off_reason() << ")";
    } catch (const zs::Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}
