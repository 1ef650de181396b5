// GoogleTest main for the tests that run as several ranks: `mpiexec -n 2 zerosync_mpi_tests`.
// MPI starts before Kokkos and ends after it. Every rank runs every test; rank 0 prints as usual,
// the other ranks print only their failures, each line marked with the rank. A failing test
// prints the seed base the ranks shared (ZS_TEST_SEED replays it on every rank).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"

namespace {

zs::ProcessGroup* g_world = nullptr;

class RankReport : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo&) override {
    zs::test::start_seed_log();
    // The base every rank draws from: rank 0's.
    const auto& log = zs::test::seed_log();
    const auto all = g_world->all_gather(std::vector<double>{static_cast<double>(log.base >> 32),
                                                             static_cast<double>(log.base & 0xFFFFFFFFull)},
                                         "sharing the test's seed base");
    zs::test::seed_log().base = (static_cast<std::uint64_t>(all[0][0]) << 32) | static_cast<std::uint64_t>(all[0][1]);
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (g_world->rank() == 0 || !r.failed()) return;
    std::cout << "[ rank " << g_world->rank() << " ] " << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number()
              << ": " << r.summary() << std::endl;
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::cout << "[ rank " << g_world->rank() << " ] FAILED " << info.test_suite_name() << "." << info.name()
              << " (seed base " << zs::test::seed_log().base << "; replay: ZS_TEST_SEED=" << zs::test::seed_log().base
              << " mpiexec -n " << g_world->size() << " ... --gtest_filter='" << info.test_suite_name() << "."
              << info.name() << "')" << std::endl;
  }
};

}  // namespace

zs::ProcessGroup& zs::test::world() { return *g_world; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  std::unique_ptr<zs::ProcessGroup> group;
  try {
    (void)zs::test::seed_from_environment();
    group = zs::ProcessGroup::launch(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "zerosync_mpi_tests: " << e.what() << std::endl;
    return 2;
  }
  if (group->size() < 2) {
    std::cerr << "zerosync_mpi_tests: run as several ranks, e.g. mpiexec -n 2 " << argv[0] << std::endl;
    return 2;
  }
  g_world = group.get();
  // A failing test that leaves the ranks out of step ends within this, not CI's time limit.
  group->set_timeout(30);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (group->rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankReport);
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::initialize(argc, argv);
  int rc = RUN_ALL_TESTS();
  Kokkos::finalize();
  return rc;
}
