// The seeds of randomized tests: fresh every run, derived from one base per test, and replayed
// from ZS_TEST_SEED (tests/cli/seed_replay.sh checks the printed replay command end to end).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

// Sets or clears ZS_TEST_SEED for one scope, restoring what was there.
class SeedVariable {
 public:
  explicit SeedVariable(const char* value) {
    if (const char* old = std::getenv("ZS_TEST_SEED")) old_ = old;
    if (value) setenv("ZS_TEST_SEED", value, 1);
    else unsetenv("ZS_TEST_SEED");
  }
  ~SeedVariable() {
    if (old_) setenv("ZS_TEST_SEED", old_->c_str(), 1);
    else unsetenv("ZS_TEST_SEED");
    zs::test::start_seed_log();
  }

 private:
  std::optional<std::string> old_;
};

TEST(Seeds, ZsTestSeedGivesTheBaseAndEveryDrawFollowsFromIt) {
  SeedVariable v("12345");
  zs::test::start_seed_log();
  const auto a = zs::test::fresh_seed(), b = zs::test::fresh_seed(), c = zs::test::fresh_seed();
  EXPECT_EQ(a, 12345u);
  EXPECT_NE(b, c);
  EXPECT_TRUE(zs::test::seed_log().from_environment);
  zs::test::start_seed_log();
  EXPECT_EQ(zs::test::fresh_seed(), a);
  EXPECT_EQ(zs::test::fresh_seed(), b);
  EXPECT_EQ(zs::test::fresh_seed(), c);
  EXPECT_EQ(zs::test::seed_log().drawn, (std::vector<std::uint64_t>{a, b, c}));
}

TEST(Seeds, WithoutTheVariableEachTestStartsFromANewBase) {
  SeedVariable v(nullptr);
  std::set<std::uint64_t> bases;
  for (int i = 0; i < 8; ++i) {
    zs::test::start_seed_log();
    EXPECT_FALSE(zs::test::seed_log().from_environment);
    bases.insert(zs::test::fresh_seed());
  }
  EXPECT_EQ(bases.size(), 8u);
}

TEST(Seeds, ABadValueIsRefusedNotIgnored) {
  for (const char* bad : {"", "abc", "-1", "12x", "18446744073709551616"}) {
    SeedVariable v(bad);
    EXPECT_THROW(zs::test::seed_from_environment(), std::invalid_argument) << "'" << bad << "'";
  }
  SeedVariable v("18446744073709551615");
  EXPECT_EQ(zs::test::seed_from_environment(), std::optional<std::uint64_t>(18446744073709551615ull));
}

// Fails on purpose, and only when asked: tests/cli/seed_replay.sh runs it to see the seed report
// and the replay command that a real failure prints.
TEST(Seeds, DemoFailureWhenAsked) {
  if (!std::getenv("ZS_TEST_DEMO_FAILURE")) GTEST_SKIP() << "runs only under tests/cli/seed_replay.sh";
  const auto a = zs::test::fresh_seed(), b = zs::test::fresh_seed();
  std::cout << "demo drew " << a << " " << b << std::endl;
  ADD_FAILURE() << "failing on purpose (ZS_TEST_DEMO_FAILURE is set)";
}

}  // namespace
