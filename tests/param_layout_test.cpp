#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "nn/param_buffer.hpp"
#include "core/param_layout.hpp"
#include "test_util.hpp"

using zs::Config;
using zs::ParamLayout;

TEST(ParamLayout, ReferenceConfigHasTenLayersAndTheRightParameterCount) {
  const ParamLayout l{Config{}};
  ASSERT_EQ(l.layers().size(), 10u);
  ASSERT_EQ(l.tensors().size(), 20u);
  // Counted by hand from the reference network (docs/architecture.md): dense(in, out) has in*out + out parameters.
  auto dense = [](std::size_t in, std::size_t out) { return in * out + out; };
  const std::size_t expected = dense(48, 256) + dense(256, 256) + dense(256, 128) + dense(128, 51) +
                               dense(256, 128) + dense(128, 5 * 51) + 2 * (dense(256, 128) + dense(128, 3 * 51));
  EXPECT_EQ(l.parameter_count(), expected);
  EXPECT_EQ(l.parameter_count(), 288868u);
  EXPECT_EQ(l.tensor("branch.0.1.weight").shape, (std::vector<int>{255, 128}));
  EXPECT_EQ(l.tensor("value.1.bias").shape, (std::vector<int>{51}));
  EXPECT_EQ(l.layer("trunk.0").in, 48);
}

TEST(ParamLayout, TensorsAreAlignedDisjointAndInsideTheBuffer) {
  for (const Config& c : {Config{}, Config::from_json({{"state_dim", 3}, {"trunk", {7, 5, 3}},
                                                      {"head_hidden", 9}, {"branches", {2}},
                                                      {"atoms", 13}})}) {
    const ParamLayout l{c};
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (const auto& t : l.tensors()) {
      EXPECT_EQ(t.offset % ParamLayout::kAlign, 0u) << t.name;
      spans.emplace_back(t.offset, t.offset + t.size());
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
    EXPECT_LE(spans.back().second, l.size());
    EXPECT_EQ(l.layers().size(), c.trunk.size() + 2 + 2 * c.branches.size());
  }
}

TEST(ParamLayout, UnknownNameIsAClearError) {
  const ParamLayout l{Config{}};
  try {
    l.tensor("trunk.9.weight");
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("trunk.9.weight"), std::string::npos);
  }
}

namespace {
// A free function, not the test body: nvcc rejects device lambdas in gtest's private TestBody.
void fill_layer(const zs::ParamBuffer::Matrix& w, const zs::ParamBuffer::Vector& b, float tag) {
  Kokkos::parallel_for("fill", Kokkos::RangePolicy<zs::ExecSpace>(0, w.extent(0)), KOKKOS_LAMBDA(int r) {
    for (std::size_t c = 0; c < w.extent(1); ++c) w(r, c) = tag * 1000 + r * 10 + c;
    b(r) = -tag - r;
  });
}
}  // namespace

TEST(ParamBuffer, LayerViewsAliasTheFlatBuffer) {
  const ParamLayout l{Config::from_json({{"state_dim", 5}, {"trunk", {6}}, {"head_hidden", 4},
                                         {"branches", {3, 2}}, {"atoms", 3}})};
  zs::ParamBuffer p(l, "test");
  // Write each layer through its own views, read back through the flat buffer.
  for (std::size_t k = 0; k < l.layers().size(); ++k) {
    fill_layer(p.weight(static_cast<int>(k)), p.bias(static_cast<int>(k)), static_cast<float>(k + 1));
  }
  Kokkos::fence();
  const auto flat = zs::test::to_host(p.flat());
  for (std::size_t k = 0; k < l.layers().size(); ++k) {
    const auto& d = l.layers()[k];
    const float tag = static_cast<float>(k + 1);
    for (int r = 0; r < d.out; ++r) {
      for (int c = 0; c < d.in; ++c)
        ASSERT_EQ(flat[d.weight_offset + r * d.in + c], tag * 1000 + r * 10 + c) << d.name;
      ASSERT_EQ(flat[d.bias_offset + r], -tag - r) << d.name;
    }
  }
}
