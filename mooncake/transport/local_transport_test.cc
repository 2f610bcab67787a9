#include "mooncake/transport/local_transport.h"

#include <memory>

#include "gtest/gtest.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

struct LocalFactory {
  using Transport = LocalTransport;
  static constexpr bool kCrossProcess = false;
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<LocalTransport> Make() { return std::make_unique<LocalTransport>(); }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(Local, TransportConformanceTest, LocalFactory);

TEST(LocalTransportTest, RejectsGpuMemoryAndBadEndpoints) {
  LocalTransport t;
  char buf[16];
  EXPECT_EQ(t.RegisterMemory(buf, sizeof(buf), MemoryLocation::Gpu(0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.OpenSegment("local://zz", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.OpenSegment("local://999999", 1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(LocalTransportTest, DestroyedOwnerIsUnavailable) {
  LocalTransport requester;
  std::string endpoint;
  {
    LocalTransport owner;
    endpoint = owner.LocalEndpoint();
  }
  EXPECT_EQ(requester.OpenSegment(endpoint, 1).status().code(), absl::StatusCode::kUnavailable);
}

TEST(LocalTransportTest, BatchLimitIsResourceExhausted) {
  LocalTransport::Options o;
  o.max_batches = 2;
  LocalTransport t(o);
  char buf[64] = {};
  auto seg = t.RegisterMemory(buf, sizeof(buf), MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok());
  auto remote = t.OpenSegment(t.LocalEndpoint(), seg->id);
  ASSERT_TRUE(remote.ok());
  char dst[8];
  const TransferRequest r{OpCode::kRead, dst, remote->handle, 0, 8};
  auto a = t.Submit({&r, 1});
  auto b = t.Submit({&r, 1});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(t.Submit({&r, 1}).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(t.Wait(*a, absl::Now()).ok());
  EXPECT_TRUE(t.Submit({&r, 1}).ok());
}

}  // namespace
}  // namespace mooncake::transport
