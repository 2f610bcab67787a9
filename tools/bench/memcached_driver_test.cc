#include "tools/bench/memcached_driver.h"

#include <memory>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tools/bench/kv_driver_testing.h"
#include "tools/bench/servers.h"

namespace mooncake::bench {
namespace {

// One memcached (installed by tools/setup.sh) for every suite of this test.
std::optional<Server>& TheServer() {
  static std::optional<Server> server;
  return server;
}

absl::Status StartOnce() {
  if (TheServer()) return absl::OkStatus();
  MemcachedConfig c;
  c.memory_mb = 128;
  c.item_max = "8m";
  auto s = StartMemcached(c, ::testing::TempDir() + "/memcached.log");
  if (!s.ok()) return s.status();
  TheServer() = std::move(*s);
  return absl::OkStatus();
}

template <bool kBinary>
struct MemcachedEnv {
  using Driver = MemcachedDriver;
  static absl::Status SetUp() { return StartOnce(); }
  static void TearDown() {}
  static absl::StatusOr<std::unique_ptr<Driver>> Connect() {
    MemcachedOptions o;
    o.port = TheServer()->port;
    o.binary_protocol = kBinary;
    return MemcachedDriver::Connect(o);
  }
};

using Envs = ::testing::Types<MemcachedEnv<false>, MemcachedEnv<true>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Memcached, KvDriverConformance, Envs);

TEST(MemcachedDriverTest, ValueOverItemLimitIsAnErrorNotACrash) {
  ASSERT_TRUE(StartOnce().ok());
  for (bool binary : {false, true}) {
    auto d = MemcachedEnv<false>::Connect();
    ASSERT_TRUE(d.ok()) << d.status();
    const std::string big(size_t{9} << 20, 'x');  // over -I 8m
    const absl::Status s = (*d)->Put("too-big", big);
    EXPECT_FALSE(s.ok()) << binary;
    EXPECT_FALSE(s.message().empty());
    // The connection still works afterwards.
    EXPECT_TRUE((*d)->Put("small-after-big", "v").ok()) << binary;
  }
}

TEST(MemcachedDriverTest, SystemNameSaysTheProtocol) {
  ASSERT_TRUE(StartOnce().ok());
  EXPECT_EQ((*MemcachedEnv<false>::Connect())->system(), "memcached");
  EXPECT_EQ((*MemcachedEnv<true>::Connect())->system(), "memcached-bin");
}

TEST(MemcachedDriverTest, NothingListeningIsUnavailable) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  MemcachedOptions o;
  o.port = *port;
  o.timeout_ms = 500;
  auto d = MemcachedDriver::Connect(o);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsUnavailable(d.status()) || absl::IsDeadlineExceeded(d.status()))
      << d.status();
}

}  // namespace
}  // namespace mooncake::bench
