// The ensemble heads through zs::Trainer: loss and spread against the double reference, the
// gradient (member heads and trunk; nothing else) against central finite differences, errors;
// and the spread kernel alone on a reference-sized batch against a naive double reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/stream.hpp"
#include "fd_check.hpp"
#include "kernels/ensemble_loss.hpp"
#include "network_reference.hpp"
#include "test_util.hpp"
#include "losses/ensemble.hpp"
#include "losses/registry.hpp"
#include "train/trainer.hpp"

namespace {

zs::Config ens_config(std::uint64_t seed, int k) {
  return zs::Config::from_json({{"state_dim", 5}, {"trunk", {9, 8}}, {"head_hidden", 8}, {"branches", {3, 2}},
                                {"atoms", 6}, {"v_min", -2}, {"v_max", 3}, {"gamma", 0.9}, {"n_step", 2},
                                {"seed", seed}, {"precision", "fp32"}, {"ensemble", {{"k", k}, {"budget", 0.2}}}});
}

using zs::test::as_double;
using zs::test::ref_batch;

using zs::test::upload;

// Log-softmax over atoms, in double, of each [atoms] run of `logits`.
std::vector<float> log_softmax_rows(const std::vector<double>& logits, int atoms) {
  std::vector<float> out(logits.size());
  for (std::size_t r = 0; r < logits.size() / atoms; ++r) {
    const double* l = logits.data() + r * atoms;
    const double mx = *std::max_element(l, l + atoms);
    double s = 0;
    for (int j = 0; j < atoms; ++j) s += std::exp(l[j] - mx);
    for (int j = 0; j < atoms; ++j) out[r * atoms + j] = static_cast<float>(l[j] - mx - std::log(s));
  }
  return out;
}

// The spread kernel's inputs on the device, drawn from `seed`: the main head's log-probabilities
// on 2B rows (s, then s′, as the online net leaves them) and E members near it.
struct SpreadCase {
  int B, E, atoms;
  std::vector<int> branches, cum, actions;
  float v_min = -10.f, v_max = 10.f;
  std::vector<float> main_lp, member_lp;  // [2B, A, atoms], [E, B, A, atoms]
  Kokkos::View<float***, Kokkos::LayoutRight, zs::MemSpace> main_d;
  Kokkos::View<float****, Kokkos::LayoutRight, zs::MemSpace> members_d;
  Kokkos::View<int**, Kokkos::LayoutRight, zs::MemSpace> actions_d;
  Kokkos::View<float*, zs::MemSpace> spread_d;
  zs::DeviceScalar<float> mean_d{std::string("zs::test::spread_mean")};

  int A() const { return cum.back(); }
  int K() const { return static_cast<int>(branches.size()); }
  float delta() const { return (v_max - v_min) / static_cast<float>(atoms - 1); }

  SpreadCase(int B_, int E_, int atoms_, std::vector<int> branches_, std::uint64_t seed)
      : B(B_), E(E_), atoms(atoms_), branches(std::move(branches_)), cum{0} {
    for (int n : branches) cum.push_back(cum.back() + n);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> logit(0.0, 1.5);
    const std::size_t head = std::size_t(B) * A() * atoms;
    std::vector<double> main_logits(2 * head), member_logits(E * head);
    for (auto& x : main_logits) x = logit(rng);
    // Members near the main head, on every third sample very near: there the heads' Q values
    // nearly agree, which is where a float E[q²] − E[q]² would lose the spread.
    std::normal_distribution<double> noise(0.0, 1.0);
    const std::size_t per_sample = std::size_t(A()) * atoms;
    for (int e = 0; e < E; ++e)
      for (std::size_t x = 0; x < head; ++x)
        member_logits[e * head + x] = main_logits[x] + (x / per_sample % 3 == 0 ? 1e-4 : 0.3) * noise(rng);
    main_lp = log_softmax_rows(main_logits, atoms);
    member_lp = log_softmax_rows(member_logits, atoms);
    for (int i = 0; i < B; ++i)
      for (int k = 0; k < K(); ++k) actions.push_back(std::uniform_int_distribution<int>(0, branches[k] - 1)(rng));
    main_d = decltype(main_d)("zs::test::main_logp", 2 * B, A(), atoms);
    members_d = decltype(members_d)("zs::test::member_logp", E, B, A(), atoms);
    actions_d = decltype(actions_d)("zs::test::actions", B, K());
    spread_d = decltype(spread_d)("zs::test::spread", B);
    upload(main_lp, main_d);
    upload(member_lp, members_d);
    upload(actions, actions_d);
  }

  void run(const zs::Stream& stream) const {
    zs::kernels::EnsembleSpread<zs::ExecSpace> s;
    s.main_logp = main_d;
    s.logp = members_d;
    s.actions = actions_d;
    s.spread = spread_d;
    s.table = zs::kernels::BranchTable::of(branches);
    s.v_min = v_min;
    s.delta = delta();
    zs::kernels::ensemble_spread(stream.exec(), s, mean_d);
    stream.synchronize();
  }

  // Naive, in double: per branch the mean of the E + 1 Q values, then their population variance.
  std::vector<double> reference() const {
    std::vector<double> out(B, 0.0);
    const std::size_t head = std::size_t(B) * A() * atoms;
    for (int i = 0; i < B; ++i)
      for (int k = 0; k < K(); ++k) {
        const int g = cum[k] + actions[i * K() + k];
        std::vector<double> q;
        for (int h = 0; h <= E; ++h) {
          const float* lp = h == 0 ? &main_lp[(std::size_t(i) * A() + g) * atoms]
                                   : &member_lp[(h - 1) * head + (std::size_t(i) * A() + g) * atoms];
          double sum = 0;
          for (int j = 0; j < atoms; ++j) sum += std::exp(double(lp[j])) * (double(v_min) + j * double(delta()));
          q.push_back(sum);
        }
        double m = 0, v = 0;
        for (double x : q) m += x / q.size();
        for (double x : q) v += (x - m) * (x - m) / q.size();
        out[i] += std::sqrt(v) / K();
      }
    return out;
  }
};

}  // namespace

TEST(Ensemble, LossSpreadAndEveryGradientMatchTheReferenceAndFiniteDifferences) {
  for (int k : {1, 3}) {
    const int B = 12;
    auto draw = zs::test::draw_for_gradient_check([&](std::uint64_t s) { return ens_config(s, k); }, B);
    ASSERT_TRUE(draw.trainer);
    SCOPED_TRACE(testing::Message() << "k " << k << " seed " << draw.seed << " (first drawn " << draw.first << ")");
    const zs::Config& c = draw.config;
    zs::Trainer& tr = *draw.trainer;
    const auto& hb = draw.batch;
    const auto& p0 = draw.p0;
    const auto& t0 = draw.t0;
    tr.step_direct();
    tr.synchronize();
    const auto* ens = tr.term_as<zs::EnsembleTerm>("ensemble");
    ASSERT_NE(ens, nullptr);
    ASSERT_EQ(ens->members(), k);
    float loss = 0, spread_mean = 0;
    Kokkos::deep_copy(loss, ens->loss());
    Kokkos::deep_copy(spread_mean, ens->spread_mean());
    const auto grad = zs::test::to_host(ens->grad().flat());
    const auto spread = zs::test::to_host(ens->spread());

    const zs::test::RefNet ref(c, tr.layout());
    const auto rb = ref_batch(hb);
    const auto m = ref.loss(p0, t0, rb).projected;
    const double expect = ref.ensemble(p0, rb, m);
    EXPECT_NEAR(loss, expect, 1e-5 * std::abs(expect) + 1e-6);
    const auto ref_spread = ref.ensemble_spread(p0, rb);
    double ref_mean = 0;
    for (int i = 0; i < B; ++i) {
      // A standard deviation of a few fp32 Q values of size ~3: cancellation costs ~1e-3 relative.
      EXPECT_NEAR(spread[i], ref_spread[i], 2e-3 * ref_spread[i] + 5e-5) << "sample " << i;
      ref_mean += ref_spread[i] / B;
    }
    EXPECT_NEAR(spread_mean, ref_mean, 1e-4 * ref_mean + 1e-5);
    EXPECT_GT(ref_mean, 1e-3) << "heads with their own parameters must disagree";

    zs::test::expect_gradient_matches_finite_differences(
        tr.layout(), p0, grad, [&](const std::vector<double>& p) { return ref.ensemble(p, rb, m); },
        zs::test::trunk_and("ensemble."));
  }
}

// The reference config's batch and heads: hundreds of samples (well past one GPU block of
// them), 51 atoms (more than a warp's lanes), more heads than a team's warps cover at once.
TEST(Ensemble, SpreadKernelMatchesANaiveDoubleReferenceOnAReferenceSizedBatch) {
  for (const int E : {2, 5}) {
    const auto seed = zs::test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "E " << E << " seed " << seed);
    const int B = 300;
    SpreadCase c(B, E, 51, {5, 3, 3}, seed);
    zs::Stream stream;
    c.run(stream);
    const auto spread = zs::test::to_host(c.spread_d);
    float mean = 0;
    Kokkos::deep_copy(mean, c.mean_d);
    const auto ref = c.reference();
    double ref_mean = 0, smallest = INFINITY;
    for (int i = 0; i < B; ++i) {
      // Double Q values and a double Welford pass: only the float result's rounding is left.
      EXPECT_NEAR(spread[i], ref[i], 1e-5 * ref[i] + 1e-9) << "sample " << i;
      ref_mean += ref[i] / B;
      smallest = std::min(smallest, ref[i]);
    }
    EXPECT_NEAR(mean, ref_mean, 1e-5 * ref_mean);
    EXPECT_LT(smallest, 1e-2 * ref_mean) << "the draw must hold nearly agreeing heads";

    // The same inputs give the same bits; an invalid action poisons its own sample only.
    c.run(stream);
    EXPECT_TRUE(zs::test::same_bits(zs::test::to_host(c.spread_d), spread));
    float again = 0;
    Kokkos::deep_copy(again, c.mean_d);
    EXPECT_TRUE(zs::test::same_bits(std::vector<float>{again}, std::vector<float>{mean}));
    const int poisoned = B / 2;
    auto bad = c.actions;
    bad[poisoned * c.K() + 1] = c.branches[1];
    upload(bad, c.actions_d);
    c.run(stream);
    const auto after = zs::test::to_host(c.spread_d);
    for (int i = 0; i < B; ++i) {
      if (i == poisoned)
        EXPECT_TRUE(std::isnan(after[i]));
      else
        EXPECT_EQ(after[i], spread[i]) << "sample " << i;
    }
    Kokkos::deep_copy(again, c.mean_d);
    EXPECT_TRUE(std::isnan(again));
  }
}

TEST(Ensemble, LayoutNamesComeAfterTheNetwork) {
  const auto plain = ens_config(1, 1).to_json();
  auto j = plain;
  j["ensemble"] = false;
  const zs::ParamLayout off = zs::layout_for(zs::Config::from_json(j)), on = zs::layout_for(ens_config(1, 2));
  ASSERT_LT(off.tensors().size(), on.tensors().size());
  for (std::size_t i = 0; i < off.tensors().size(); ++i) {
    EXPECT_EQ(off.tensors()[i].name, on.tensors()[i].name);
    EXPECT_EQ(off.tensors()[i].offset, on.tensors()[i].offset);
  }
  EXPECT_EQ(on.tensor("ensemble.1.branch.1.1.weight").shape, (std::vector<int>{2 * 6, 8}));
  EXPECT_EQ(on.layer_index("ensemble.1.value.0"), on.layer_index("ensemble.0.value.0") + on.head_set_layers());
  EXPECT_EQ(on.layer_index("ensemble.0.value.0"), off.layer_index("branch.1.1") + 1);
  EXPECT_NE(zs::test::error_of([&] { off.layer_index("ensemble.0.value.0"); }).find("no layer named"), std::string::npos);
}

TEST(Ensemble, ConfigErrorsAreClear) {
  auto j = ens_config(1, 1).to_json();
  j["ensemble"] = {{"k", 0}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble.k = 0 is invalid"), std::string::npos);
  j["ensemble"] = {{"k", 65}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble.k = 65 is invalid"), std::string::npos);
  j["ensemble"] = true;
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble = true is invalid"), std::string::npos);
  j["ensemble"] = {{"k", 2}, {"heads", 2}};
  EXPECT_NE(zs::test::error_of([&] { zs::Config::from_json(j); }).find("ensemble.heads is an unknown key"),
            std::string::npos);
  j["ensemble"] = nlohmann::json::object();
  EXPECT_EQ(zs::Config::from_json(j).ensemble.k, 2);  // documented default
}
