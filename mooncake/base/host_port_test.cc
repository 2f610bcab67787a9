#include "mooncake/base/host_port.h"

#include "gtest/gtest.h"

namespace mooncake {
namespace {

TEST(HostPortTest, ToStringJoinsWithBracketsForIpv6) {
  EXPECT_EQ((HostPort{"10.0.0.2", 50051}).ToString(), "10.0.0.2:50051");
  EXPECT_EQ((HostPort{"::1", 0}).ToString(), "[::1]:0");
  EXPECT_EQ((HostPort{"::1", 7}), (HostPort{"::1", 7}));
  EXPECT_NE((HostPort{"::1", 7}), (HostPort{"::1", 8}));
}

TEST(HostPortTest, JoinBracketsOnlyIpv6) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 50051), "127.0.0.1:50051");
  EXPECT_EQ(JoinHostPort("localhost", 0), "localhost:0");
  EXPECT_EQ(JoinHostPort("::1", 9090), "[::1]:9090");
  EXPECT_EQ(JoinHostPort("fe80::1%eth0", 65535), "[fe80::1%eth0]:65535");
}

TEST(HostPortTest, SplitTakesTheLastColonAndDropsBrackets) {
  auto v4 = SplitHostPort("10.0.0.2:41000");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->host, "10.0.0.2");
  EXPECT_EQ(v4->port, "41000");

  auto v6 = SplitHostPort("[::1]:9090");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "9090");

  auto bare = SplitHostPort("::1:9090");  // unbracketed: still the last colon
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->host, "::1");
  EXPECT_EQ(bare->port, "9090");

  auto no_port = SplitHostPort("host:");
  ASSERT_TRUE(no_port.has_value());
  EXPECT_EQ(no_port->port, "");
}

TEST(HostPortTest, SplitRefusesWhatHasNoHost) {
  EXPECT_FALSE(SplitHostPort("").has_value());
  EXPECT_FALSE(SplitHostPort("50051").has_value());
  EXPECT_FALSE(SplitHostPort(":50051").has_value());
  EXPECT_FALSE(SplitHostPort("[]:50051").has_value());
  EXPECT_FALSE(SplitHostPort("[::1]").has_value());      // no port after the bracket
  EXPECT_FALSE(SplitHostPort("[::1]9090").has_value());  // no colon after it
  EXPECT_FALSE(SplitHostPort("[::1:9090").has_value());  // never closed
  EXPECT_FALSE(SplitHostPort("[::1]x:9090").has_value());
}

TEST(HostPortTest, JoinedAddressesSplitBack) {
  for (std::string_view host : {"127.0.0.1", "::1", "2001:db8::7", "example.org"}) {
    const std::string joined = JoinHostPort(host, 4242);
    auto split = SplitHostPort(joined);
    ASSERT_TRUE(split.has_value()) << joined;
    EXPECT_EQ(split->host, host) << joined;
    EXPECT_EQ(split->port, "4242") << joined;
  }
}

}  // namespace
}  // namespace mooncake
