#include "mooncake/store/node/demo.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/node/store_node.h"
#include "mooncake/store/node/testing/node_testing.h"

namespace mooncake::node {
namespace {

TEST(Demo, RunsEveryTransportAndSizeAndTidiesUp) {
  auto n = StoreNode::Start(node_testing::TestNodeOptions(Role::kAll));
  ASSERT_TRUE(n.ok()) << n.status();
  DemoOptions d;
  d.master_address = (*n)->rpc_address();
  d.value_bytes = {64 << 10, 1 << 20};
  d.bytes_per_row = 2 << 20;
  MetricsRegistry registry;
  d.metrics = &registry;
  auto rows = RunDemo(d);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  // The demo clients' counters: each wrote at least its rows' bytes
  // (32 x 64 KiB + 4 x 1 MiB) and read them back.
  const std::string text = registry.RenderPrometheus();
  for (const char* path : {"tcp", "shm"}) {
    for (const char* family : {"written", "read"}) {
      const std::string series =
          absl::StrCat("mooncake_client_", family, "_bytes_total{client=\"demo-", path, "\"} ");
      const size_t at = text.find(series);
      ASSERT_NE(at, std::string::npos) << series << "\n" << text;
      const double v = std::stod(text.substr(at + series.size()));
      EXPECT_GE(v, 32.0 * (64 << 10) + 4.0 * (1 << 20)) << series;
    }
  }
  for (const DemoRow& r : *rows) {
    EXPECT_EQ(r.count, std::clamp<size_t>(d.bytes_per_row / r.value_bytes, 4, 256));
    EXPECT_GT(r.put_gbps, 0);
    EXPECT_GT(r.get_gbps, 0);
    EXPECT_GT(r.get_p50_ns, 0u);
    EXPECT_GE(r.get_p99_ns, r.get_p50_ns);
  }
  EXPECT_EQ((*rows)[0].transport, DemoTransport::kTcp);
  EXPECT_EQ((*rows)[3].transport, DemoTransport::kShm);
  const std::string table = FormatDemo(*rows);
  EXPECT_TRUE(absl::StrContains(table, "tcp      64KiB")) << table;
  EXPECT_TRUE(absl::StrContains(table, "shm       1MiB")) << table;
  EXPECT_EQ((*n)->master()->Stats().objects, 0);  // removed again
  // Every put went through the master: committed and counted.
  EXPECT_EQ((*n)->Snapshot().puts_committed, 2u + 32u + 4u + 32u + 4u);  // warm-ups too
}

TEST(Demo, ErrorsNameWhatFailed) {
  EXPECT_TRUE(absl::IsInvalidArgument(RunDemo({}).status()));
  auto n = StoreNode::Start(node_testing::TestNodeOptions(Role::kAll));
  ASSERT_TRUE(n.ok()) << n.status();
  DemoOptions d;
  d.master_address = (*n)->rpc_address();
  d.value_bytes = {8 << 20};  // over the node's max_object_bytes (4M)
  auto rows = RunDemo(d);
  ASSERT_FALSE(rows.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(rows.status())) << rows.status();
  EXPECT_TRUE(absl::StrContains(rows.status().message(), "over tcp")) << rows.status();
}

}  // namespace
}  // namespace mooncake::node
