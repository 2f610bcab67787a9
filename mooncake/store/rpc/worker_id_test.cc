#include "mooncake/store/rpc/worker_id.h"

#include <string>

#include "gtest/gtest.h"

namespace mooncake::rpc {
namespace {

TEST(WorkerId, FormatsAndParses) {
  const std::string id = FormatWorkerId("router://hostA/42|shm://@x|tcp://127.0.0.1:5", 991);
  EXPECT_EQ(id, "router://hostA/42|shm://@x|tcp://127.0.0.1:5#991");
  auto a = ParseWorkerId(id);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->router_endpoint, "router://hostA/42|shm://@x|tcp://127.0.0.1:5");
  EXPECT_EQ(a->directory_segment_id, 991u);
  EXPECT_EQ(a->host, "hostA");
}

TEST(WorkerId, RejectsForeignIds) {
  for (const char* bad : {"", "worker-1", "router://h/1|tcp://x", "router://h/1#", "router://h/1#0",
                          "router://h/1#x9", "router:///1#5", "tcp://h/1#5"}) {
    EXPECT_EQ(ParseWorkerId(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace mooncake::rpc
