// GoogleTest main that brings Kokkos up around the tests. Listing tests (ctest's discovery)
// must work where no device exists, so Kokkos is only initialised when tests will run.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  Kokkos::initialize(argc, argv);
  int rc = RUN_ALL_TESTS();
  Kokkos::finalize();
  return rc;
}
