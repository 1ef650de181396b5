#include <gtest/gtest.h>

#include <string>

#include "backends/stream.hpp"
#include "core/error.hpp"
#include "backends/mailbox.hpp"
#include "test_util.hpp"

TEST(Mailbox, EmptyUntilTheFirstPost) {
  zs::Mailbox box(3);
  EXPECT_FALSE(box.read().has_value());
}

TEST(Mailbox, DeliversEachPostWithARisingSequence) {
  zs::Stream stream;
  zs::Mailbox box(5);
  Kokkos::View<double*, zs::MemSpace> values("values", 5);
  auto host = Kokkos::create_mirror_view(values);
  const auto seed = zs::test::fresh_seed();
  const auto r = zs::test::random_normal(5 * 4, seed);
  for (int post = 0; post < 4; ++post) {
    for (int i = 0; i < 5; ++i) host(i) = r[post * 5 + i];
    Kokkos::deep_copy(values, host);
    box.post(stream.exec(), values);
    stream.synchronize();
    const auto rec = box.read();
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->seq, post + 1);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(rec->values[i], host(i));
  }
}

TEST(Mailbox, WrongSizeIsAClearError) {
  zs::Stream stream;
  zs::Mailbox box(4);
  Kokkos::View<double*, zs::MemSpace> values("values", 3);
  try {
    box.post(stream.exec(), values);
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 values given; expected 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(zs::Mailbox(0), zs::Error);
}
