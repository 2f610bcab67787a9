#include "tools/bench/redis_driver.h"

#include <memory>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tools/bench/kv_driver_testing.h"
#include "tools/bench/servers.h"

namespace mooncake::bench {
namespace {

// One redis-server (installed by tools/setup.sh) for every suite of this test.
std::optional<Server>& TheServer() {
  static std::optional<Server> server;
  return server;
}

struct RedisEnv {
  using Driver = RedisDriver;
  static absl::Status SetUp() {
    if (TheServer()) return absl::OkStatus();
    auto s = StartRedis({}, ::testing::TempDir() + "/redis.log");
    if (!s.ok()) return s.status();
    TheServer() = std::move(*s);
    return absl::OkStatus();
  }
  static void TearDown() {}
  static absl::StatusOr<std::unique_ptr<Driver>> Connect() {
    RedisOptions o;
    o.port = TheServer()->port;
    return RedisDriver::Connect(o);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Redis, KvDriverConformance, ::testing::Types<RedisEnv>);

TEST(RedisDriverTest, InfoFieldsAreNumbers) {
  ASSERT_TRUE(RedisEnv::SetUp().ok());
  auto d = RedisEnv::Connect();
  ASSERT_TRUE(d.ok()) << d.status();
  auto used = (*d)->InfoField("memory", "used_memory");
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_GT(std::stoll(*used), 0);
  EXPECT_TRUE(absl::IsNotFound((*d)->InfoField("memory", "no_such_field").status()));
}

TEST(RedisDriverTest, PutOverMaxmemoryIsResourceExhausted) {
  RedisConfig c;
  c.maxmemory_bytes = 2 << 20;
  c.policy = "noeviction";
  auto s = StartRedis(c, ::testing::TempDir() + "/redis_small.log");
  ASSERT_TRUE(s.ok()) << s.status();
  RedisOptions o;
  o.port = s->port;
  auto d = RedisDriver::Connect(o);
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string v(1 << 20, 'v');
  absl::Status last;
  for (int i = 0; i < 8 && last.ok(); ++i) last = (*d)->Put("k" + std::to_string(i), v);
  EXPECT_TRUE(absl::IsResourceExhausted(last)) << last;
}

TEST(RedisDriverTest, NothingListeningIsUnavailable) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  RedisOptions o;
  o.port = *port;
  auto d = RedisDriver::Connect(o);
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
}

}  // namespace
}  // namespace mooncake::bench
