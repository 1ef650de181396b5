// The process group over MPI: its collectives move the bytes they should, an error on one rank
// reaches every rank, and a rank that does not take part is named within the time-out instead
// of leaving the others waiting; the watchdog ends a rank blocked outside a bounded wait.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.hpp"

namespace {

using zs::test::world;

std::vector<std::uint8_t> pattern(int rank, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(rank * 31 + i * 7);
  return v;
}

// Restores the group's time-out when a test that shortens it ends.
struct TimeoutScope {
  double saved = world().timeout_s();
  explicit TimeoutScope(double s) { world().set_timeout(s); }
  ~TimeoutScope() { world().set_timeout(saved); }
};

}  // namespace

TEST(MpiGroup, CollectivesMoveEveryRanksBytes) {
  const int R = world().size(), me = world().rank();
  // Sizes by rank: empty, small, and one of several megabytes.
  const auto size_of = [](int r) { return r == 0 ? std::size_t{0} : r == 1 ? std::size_t{3 << 20} : std::size_t{17}; };
  const auto gathered = world().gather(pattern(me, size_of(me)), "test gather");
  if (me == 0) {
    ASSERT_EQ(static_cast<int>(gathered.size()), R);
    for (int r = 0; r < R; ++r) EXPECT_EQ(gathered[r], pattern(r, size_of(r))) << "rank " << r;
  } else {
    EXPECT_TRUE(gathered.empty());
  }
  const auto all = world().all_gather(pattern(me, size_of(me)), "test all_gather");
  ASSERT_EQ(static_cast<int>(all.size()), R);
  for (int r = 0; r < R; ++r) EXPECT_EQ(all[r], pattern(r, size_of(r))) << "rank " << r;
  EXPECT_EQ(world().broadcast(me == 0 ? pattern(9, 1000) : pattern(me, 3), "test broadcast"), pattern(9, 1000));
  std::vector<std::vector<std::uint8_t>> parts;
  if (me == 0)
    for (int r = 0; r < R; ++r) parts.push_back(pattern(100 + r, 10 * r));
  EXPECT_EQ(world().scatter(parts, "test scatter"), pattern(100 + me, 10 * me));
  // The sum: the same bits on every rank.
  std::vector<float> x(1001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) + static_cast<float>(me);
  world().all_sum(x.data(), x.size(), "test all_sum");
  for (std::size_t i = 0; i < x.size(); i += 250) {
    double expected = 0;
    for (int r = 0; r < R; ++r) expected += 0.1f * static_cast<float>(i) + static_cast<float>(r);
    EXPECT_NEAR(x[i], expected, 1e-4 * (1 + expected));
  }
  const auto sums = zs::test::all_copies(x);
  for (int r = 1; r < R; ++r) EXPECT_EQ(sums[r], sums[0]);
}

TEST(MpiGroup, AnErrorOnOneRankIsRaisedOnEveryRank) {
  const int last = world().size() - 1;
  std::string message;
  try {
    world().agree("test", [&] {
      if (world().rank() == last) zs::fail("the file is bad here");
    });
  } catch (const zs::SharedError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "rank " + std::to_string(last) + ": the file is bad here");
  // Raised everywhere alike: the message as it is.
  message.clear();
  try {
    world().agree("test", [&] { zs::fail("bad everywhere"); });
  } catch (const zs::SharedError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "bad everywhere");
  EXPECT_NO_THROW(world().agree("test", [] {}));
}

TEST(MpiGroup, ARankThatDoesNotTakePartIsNamedWithinTheTimeout) {
  const TimeoutScope timeout(1.0);
  const int last = world().size() - 1;
  if (world().rank() == last) {
    // Away from MPI for longer than the others wait: it cannot answer their roll call.
    std::this_thread::sleep_for(std::chrono::seconds(4));
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    world().all_gather(std::vector<double>{1.0}, "the test exchange");
  } catch (const zs::PeerFailure& e) {
    message = e.what();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(message.find("the test exchange did not complete within 1 s"), std::string::npos) << message;
  EXPECT_NE(message.find("rank " + std::to_string(last) + " did not answer a roll call"), std::string::npos) << message;
  EXPECT_LT(waited, 3.5) << "the time-out (1 s) and the roll call (1 s) bound the wait";
}

TEST(MpiGroup, RanksWaitingForEachOtherAreSlowNotLost) {
  const TimeoutScope timeout(1.0);
  // Rank 0 waits for everyone's part while the others wait for rank 0's broadcast: all alive.
  std::string message;
  try {
    if (world().rank() == 0) world().gather(std::vector<std::uint8_t>{1}, "the test exchange");
    else world().broadcast({}, "the test exchange");
  } catch (const zs::PeerFailure& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("every rank answered a roll call, so one is slow rather than lost"), std::string::npos)
      << message;
}

TEST(MpiWatchdog, EndsARankBlockedOutsideABoundedWait) {
  // Run by itself: ctest expects the watchdog's message (the process ends with status 4).
  world().set_timeout(1.0);
  {
    // Unwatched, a rank may take its time.
    world().alive();
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  }
  std::cout << "rank " << world().rank() << ": 2.5 s unwatched without progress, still running" << std::endl;
  const zs::ProcessGroup::Watch watch(world());
  std::this_thread::sleep_for(std::chrono::seconds(5));
  FAIL() << "the watchdog did not end this rank after 1 s without progress";
}
