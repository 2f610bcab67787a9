#include "mooncake/store/compat/store_config.h"

#include <stdlib.h>

#include <fstream>

#include "gtest/gtest.h"

namespace mooncake::compat {
namespace {

TEST(ParseSizeText, AcceptsMooncakesSpellings) {
  EXPECT_EQ(*ParseSizeText("k", "16777216"), 16777216u);
  EXPECT_EQ(*ParseSizeText("k", "16MB"), 16u << 20);
  EXPECT_EQ(*ParseSizeText("k", "16 MB"), 16u << 20);
  EXPECT_EQ(*ParseSizeText("k", "1GB"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseSizeText("k", "1 gib"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseSizeText("k", "1.5GB"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseSizeText("k", "64K"), 65536u);
  EXPECT_EQ(*ParseSizeText("k", "0"), 0u);
}

TEST(ParseSizeText, RefusesPercentagesAndJunk) {
  for (const char* bad : {"50%", "", "MB", "12XB", "1.5", "-1", "1e9", "abc"}) {
    EXPECT_EQ(ParseSizeText("global_segment_size", bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_NE(ParseSizeText("global_segment_size", "50%").status().message().find("percent"),
            std::string::npos);
}

TEST(ResolveStoreConfig, ExplicitOverEnvironmentOverFileOverDefaults) {
  const std::string path = ::testing::TempDir() + "/mooncake.json";
  {
    std::ofstream f(path);
    f << R"({"local_hostname": "filehost", "global_segment_size": "32MB",
            "local_buffer_size": 1048576, "master_server_address": "10.0.0.1:50051",
            "device_name": "mlx5_0", "protocol": "tcp"})";
  }
  ::setenv("MOONCAKE_CONFIG_PATH", path.c_str(), 1);
  ::setenv("MOONCAKE_MASTER", "envhost:123", 1);
  ::unsetenv("MOONCAKE_PROTOCOL");
  auto c = ResolveStoreConfig({{"local_hostname", "explicit"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->local_hostname, "explicit");
  EXPECT_EQ(c->master_server_addr, "envhost:123");
  EXPECT_EQ(c->global_segment_size, 32u << 20);
  EXPECT_EQ(c->local_buffer_size, 1u << 20);
  EXPECT_EQ(c->rdma_devices, "mlx5_0");
  EXPECT_EQ(c->metadata_server, "P2PHANDSHAKE");
  ::unsetenv("MOONCAKE_CONFIG_PATH");
  ::unsetenv("MOONCAKE_MASTER");
  auto d = ResolveStoreConfig({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->global_segment_size, kDefaultGlobalSegmentBytes);
  EXPECT_EQ(d->master_server_addr, "127.0.0.1:50051");
}

TEST(ResolveStoreConfig, UnknownKeysAndBadFilesAreErrors) {
  EXPECT_EQ(ResolveStoreConfig({{"global_segment_sise", "1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string path = ::testing::TempDir() + "/bad.json";
  {
    std::ofstream f(path);
    f << "{not json";
  }
  ::setenv("MOONCAKE_CONFIG_PATH", path.c_str(), 1);
  EXPECT_EQ(ResolveStoreConfig({}).status().code(), absl::StatusCode::kInvalidArgument);
  ::setenv("MOONCAKE_CONFIG_PATH", "/nonexistent/mooncake.json", 1);
  EXPECT_EQ(ResolveStoreConfig({}).status().code(), absl::StatusCode::kNotFound);
  ::unsetenv("MOONCAKE_CONFIG_PATH");
}

}  // namespace
}  // namespace mooncake::compat
