#include "mooncake/store/compat/registered_buffers.h"

#include "gtest/gtest.h"

namespace mooncake::compat {
namespace {

TEST(RegisteredBuffers, ContainsOnlyWhatWasRegistered) {
  RegisteredBuffers r;
  EXPECT_TRUE(r.Add(1000, 100));
  EXPECT_TRUE(r.Add(2000, 10));
  EXPECT_TRUE(r.Contains(1000, 100));
  EXPECT_TRUE(r.Contains(1050, 50));
  EXPECT_FALSE(r.Contains(1050, 51));
  EXPECT_FALSE(r.Contains(999, 1));
  EXPECT_FALSE(r.Contains(1100, 1));
  EXPECT_EQ(*r.RoomFrom(1090), 10u);
  EXPECT_FALSE(r.RoomFrom(1500).has_value());
}

TEST(RegisteredBuffers, RefusesOverlapsAndUnknownRemoves) {
  RegisteredBuffers r;
  EXPECT_TRUE(r.Add(1000, 100));
  EXPECT_FALSE(r.Add(1099, 10));
  EXPECT_FALSE(r.Add(950, 51));
  EXPECT_FALSE(r.Add(1000, 1));
  EXPECT_FALSE(r.Add(5, 0));
  EXPECT_FALSE(r.Add(UINTPTR_MAX - 1, 10));
  EXPECT_TRUE(r.Add(950, 50));
  EXPECT_FALSE(r.Remove(1001));
  EXPECT_TRUE(r.Remove(1000));
  EXPECT_FALSE(r.Contains(1000, 1));
  EXPECT_FALSE(r.Remove(1000));
}

}  // namespace
}  // namespace mooncake::compat
