#include "tools/bench/store_driver.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/worker/worker.h"
#include "tools/bench/kv_driver_testing.h"

namespace mooncake::bench {
namespace {

// A master (over TCP) and one worker in this process: what the driver talks
// to when mooncake_bench starts tools/mooncake_store.
struct Node {
  absl::Status Start() {
    master::MasterOptions o;
    auto created = master::Master<>::Create(o);
    if (!created.ok()) return created.status();
    m = std::move(*created);
    service = std::make_unique<master::MasterService<master::Master<>>>(
        m.get(), master::MasterServiceOptions{});
    RETURN_IF_ERROR(service->Register(&registry));
    server = std::make_unique<rpc::RpcServer>(&registry, rpc::RpcServerOptions{});
    RETURN_IF_ERROR(server->Start());
    service->StartTicker();
    ASSIGN_OR_RETURN(wch, rpc::TcpChannel::Connect(server->address()));
    worker::WorkerOptions wo;
    wo.segment_bytes = 64 << 20;
    ASSIGN_OR_RETURN(w, worker::Worker<rpc::TcpChannel>::Start(wo, wch.get()));
    return absl::OkStatus();
  }
  std::unique_ptr<master::Master<>> m;
  rpc::ServiceRegistry registry;
  std::unique_ptr<master::MasterService<master::Master<>>> service;
  std::unique_ptr<rpc::RpcServer> server;
  std::unique_ptr<rpc::TcpChannel> wch;
  std::unique_ptr<worker::Worker<rpc::TcpChannel>> w;
};

Node*& TheNode() {
  static Node* node = nullptr;
  return node;
}

template <bool kShm>
struct StoreEnv {
  using Driver = StoreDriver;
  static absl::Status SetUp() {
    if (TheNode() != nullptr) return absl::OkStatus();
    auto node = std::make_unique<Node>();
    RETURN_IF_ERROR(node->Start());
    TheNode() = node.release();  // lives for the test binary (shared by both suites)
    return absl::OkStatus();
  }
  static void TearDown() {}
  static absl::StatusOr<std::unique_ptr<Driver>> Connect() {
    StoreOptions o;
    o.master_address = TheNode()->server->address();
    o.use_shm = kShm;
    o.max_value_bytes = size_t{4} << 20;
    return StoreDriver::Connect(o);
  }
};

using Envs = ::testing::Types<StoreEnv<false>, StoreEnv<true>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Store, KvDriverConformance, Envs);

TEST(StoreDriverTest, SystemNameSaysTheTransport) {
  ASSERT_TRUE(StoreEnv<false>::SetUp().ok());
  EXPECT_EQ((*StoreEnv<false>::Connect())->system(), "store-tcp");
  EXPECT_EQ((*StoreEnv<true>::Connect())->system(), "store-shm");
}

TEST(StoreDriverTest, ValueOverTheSlotIsAnErrorNotAnOverflow) {
  ASSERT_TRUE(StoreEnv<false>::SetUp().ok());
  StoreOptions o;
  o.master_address = TheNode()->server->address();
  o.max_value_bytes = 1000;
  auto d = StoreDriver::Connect(o);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE((*d)->Put("slot/big", std::string(5000, 'b')).ok());
  auto got = (*d)->Get("slot/big");
  EXPECT_TRUE(absl::IsOutOfRange(got.status())) << got.status();
}

TEST(StoreDriverTest, BadAddressIsAnError) {
  StoreOptions o;
  o.master_address = "not-an-address";
  EXPECT_FALSE(StoreDriver::Connect(o).ok());
  o.master_address = "127.0.0.1:1";
  o.max_value_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(StoreDriver::Connect(o).status()));
}

TEST(StoreDriverTest, CheckOptionsNeedsNoMaster) {
  StoreOptions o;  // no master_address: nothing is connected
  EXPECT_TRUE(StoreDriver::CheckOptions(o).ok());
  o.tcp_lanes_per_peer = 0;
  const absl::Status lanes = StoreDriver::CheckOptions(o);
  EXPECT_TRUE(absl::IsInvalidArgument(lanes)) << lanes;
  EXPECT_NE(lanes.message().find("lanes_per_peer"), std::string_view::npos) << lanes;
  o.tcp_lanes_per_peer = 2;
  o.tcp_slice_bytes = 1024;
  EXPECT_TRUE(absl::IsInvalidArgument(StoreDriver::CheckOptions(o)));
  o.tcp_slice_bytes = 64 << 10;
  o.max_value_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(StoreDriver::CheckOptions(o)));
}

}  // namespace
}  // namespace mooncake::bench
