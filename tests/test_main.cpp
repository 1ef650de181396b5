// GoogleTest main that brings Kokkos up around the tests. Listing tests (ctest's discovery)
// must work where no device exists, so Kokkos is only initialised when tests will run.
// A listener gives each test its seed base (test_util.hpp) and, when the test fails, prints the
// seeds it drew and the command that replays it with the same ones.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "test_util.hpp"

namespace {

class SeedReport : public ::testing::EmptyTestEventListener {
 public:
  explicit SeedReport(std::string program) : program_(std::move(program)) {}

  void OnTestStart(const ::testing::TestInfo&) override { zs::test::start_seed_log(); }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const zs::test::SeedLog& log = zs::test::seed_log();
    if (!info.result()->Failed() || log.drawn.empty()) return;
    std::ostringstream os;
    os << "[  SEEDS   ] " << info.test_suite_name() << "." << info.name() << " drew " << log.drawn.size()
       << (log.drawn.size() == 1 ? " seed" : " seeds") << " from base " << log.base
       << (log.from_environment ? " (ZS_TEST_SEED)" : "") << ":";
    for (std::size_t i = 0; i < log.drawn.size() && i < 8; ++i) os << " " << log.drawn[i];
    if (log.drawn.size() > 8) os << " ...";
    os << "\n[  REPLAY  ] ZS_TEST_SEED=" << log.base << " " << program_ << " --gtest_filter='"
       << info.test_suite_name() << "." << info.name() << "'\n";
    std::cout << os.str() << std::flush;
  }

 private:
  std::string program_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  try {
    (void)zs::test::seed_from_environment();  // a bad value stops the run before any test
  } catch (const std::invalid_argument& e) {
    std::cerr << "zerosync_tests: " << e.what() << std::endl;
    return 2;
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedReport(argv[0]));
  // Kokkos warns on every start when OMP_PROC_BIND is unset; binding stays the user's choice.
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::initialize(argc, argv);
  int rc = RUN_ALL_TESTS();
  Kokkos::finalize();
  return rc;
}
