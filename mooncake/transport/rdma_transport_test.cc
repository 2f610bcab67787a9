#include "mooncake/transport/rdma_transport.h"

#include <infiniband/verbs.h>

#include <cstdio>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/transport_testing.h"

// Runs the conformance kit on real hardware when an RDMA device is present;
// on a host without one it checks the "no RDMA device" Status and filters the
// hardware suite out (main() says so on stderr).

namespace mooncake::transport {
namespace {

bool HostHasRdmaDevice() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  return n > 0;
}

struct RealRdmaFactory {
  using Transport = RdmaTransport;
  static constexpr bool kCrossProcess = true;
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static std::unique_ptr<RdmaTransport> Make() {
    auto t = MakeRdmaTransport();
    MC_ASSERT(t.ok(), "an RDMA device is present but the transport did not start");
    return std::move(*t);
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(RealRdma, TransportConformanceTest, RealRdmaFactory);

TEST(RdmaTransportTest, StartsOrSaysThereIsNoDevice) {
  auto t = MakeRdmaTransport();
  if (HostHasRdmaDevice()) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->Name(), "rdma");
    EXPECT_EQ((*t)->LocalEndpoint().rfind("rdma://127.0.0.1:", 0), 0u);
  } else {
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(t.status().message().find("no RDMA device"), absl::string_view::npos) << t.status();
  }
}

TEST(RdmaTransportTest, RealVerbsReportErrnoAsStatus) {
  using transport_internal::VerbsError;
  EXPECT_EQ(VerbsError(ENOMEM, "ibv_reg_mr").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(VerbsError(ENOMEM, "ibv_reg_mr").message().find("RLIMIT_MEMLOCK"),
            absl::string_view::npos);
  EXPECT_EQ(VerbsError(EINVAL, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerbsError(EPERM, "x").code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace mooncake::transport

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (mooncake::transport::HostHasRdmaDevice()) {
    ibv_fork_init();  // the kit fork()s owner processes
  } else {
    std::fprintf(stderr,
                 "no RDMA device on this host: the hardware conformance suite (RealRdma/*) is "
                 "filtered out; the no-device Status is still checked\n");
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += filter.find('-') == std::string::npos ? "-RealRdma/*" : ":RealRdma/*";
    ::testing::GTEST_FLAG(filter) = filter;
  }
  return RUN_ALL_TESTS();
}
