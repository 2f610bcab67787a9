#include "mooncake/store/node/demo.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
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
  auto rows = RunDemo(d);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
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
