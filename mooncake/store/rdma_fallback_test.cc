// A store GET whose RDMA path fails completes over TCP (--config=rdma only).
//
// Master, worker and client in one process; the worker and the client each
// get an RdmaEngine<FakeVerbs> on one in-process fabric (their factories), and
// the client runs with local and SHM off, so its router ranks RDMA first and
// TCP second. The fabric's FailNthWr breaks the RDMA read; the Router fails
// the slice over to TCP, and ClientStats::transport_failovers counts it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "mooncake/store/client.h"
#include "mooncake/store/client/rdma_route.h"
#include "mooncake/store/client/testing/in_process_store.h"
#include "mooncake/store/worker/worker.h"
#include "mooncake/transport/internal/fake_verbs.h"
#include "mooncake/transport/internal/rdma_engine.h"

namespace mooncake::client {
namespace {

using FakeRdma = transport_internal::RdmaEngine<transport_internal::FakeVerbs>;
using TestClient = client_testing::InProcessStore::TestClient;

RdmaTransportFactory FakeRdmaOn(std::shared_ptr<transport_internal::FakeFabric> fabric,
                                std::string device) {
  return [fabric, device]() -> absl::StatusOr<std::unique_ptr<transport_internal::AnyTransport>> {
    transport_internal::RdmaOptions o;
    o.device_name = device;
    absl::StatusOr<std::unique_ptr<FakeRdma>> t =
        FakeRdma::Create(transport_internal::FakeVerbs(fabric), o);
    if (!t.ok()) return t.status();
    return std::unique_ptr<transport_internal::AnyTransport>(
        new transport_internal::AnyTransportOf<FakeRdma>(std::move(*t)));
  };
}

class RdmaStore {
 public:
  RdmaStore()
      : fabric_(std::make_shared<transport_internal::FakeFabric>(
            std::vector<std::string>{"fake_worker", "fake_client"})),
        store_(WorkerOn(fabric_)) {
    ClientOptions co;
    co.use_local = false;  // as a client on another host would: RDMA, then TCP
    co.use_shm = false;
    co.use_rdma = true;
    co.rdma_factory = FakeRdmaOn(fabric_, "fake_client");
    co.cache_enabled = false;
    client_ = store_.NewClient(co);
  }

  transport_internal::FakeFabric& fabric() { return *fabric_; }
  TestClient& client() { return *client_; }
  bool ready() const { return store_.ready() && client_ != nullptr; }

  // slices_ok of the client router's route named `name`.
  uint64_t SlicesOk(std::string_view name) {
    for (const auto& r : client_->router().route_stats()) {
      if (r.name == name) return r.slices_ok;
    }
    return 0;
  }

 private:
  static worker::WorkerOptions WorkerOn(
      const std::shared_ptr<transport_internal::FakeFabric>& fabric) {
    worker::WorkerOptions wo = client_testing::InProcessStore::SegmentOf(8 << 20);
    wo.serve_rdma = true;
    wo.rdma_factory = FakeRdmaOn(fabric, "fake_worker");
    return wo;
  }

  std::shared_ptr<transport_internal::FakeFabric> fabric_;
  client_testing::InProcessStore store_;  // the real master and one worker
  std::unique_ptr<TestClient> client_;
};

std::string Value(size_t n, char seed) {
  std::string v(n, '\0');
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed + i * 31);
  return v;
}

TEST(RdmaFallback, RdmaIsBuiltInByDefault) {
  EXPECT_TRUE(kRdmaBuilt);
  EXPECT_TRUE(ClientOptions{}.use_rdma);
  EXPECT_TRUE(worker::WorkerOptions{}.serve_rdma);
}

TEST(RdmaFallback, GetWithoutFaultsGoesOverRdma) {
  RdmaStore s;
  ASSERT_TRUE(s.ready());
  const std::string v = Value(256 << 10, 'r');
  ASSERT_TRUE(s.client().Put("k", v).ok());
  const uint64_t rdma_bytes_before = s.fabric().stats().bytes_moved;
  const uint64_t rdma_ok_before = s.SlicesOk("rdma");
  const uint64_t tcp_ok_before = s.SlicesOk("tcp");
  auto got = s.client().Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, v);
  EXPECT_GE(s.fabric().stats().bytes_moved - rdma_bytes_before, v.size());
  EXPECT_GT(s.SlicesOk("rdma"), rdma_ok_before);
  EXPECT_EQ(s.SlicesOk("tcp"), tcp_ok_before);
  EXPECT_EQ(s.client().stats().transport_failovers, 0u);
}

TEST(RdmaFallback, GetWhoseRdmaReadFailsCompletesOverTcp) {
  RdmaStore s;
  ASSERT_TRUE(s.ready());
  const std::string v = Value(256 << 10, 'f');
  ASSERT_TRUE(s.client().Put("k", v).ok());
  const uint64_t tcp_ok_before = s.SlicesOk("tcp");
  // The next RDMA work request completes with a transport retry error, as a
  // dead link would: the read's RDMA slice fails and the QP breaks.
  s.fabric().FailNthWr(1, transport_internal::WcStatus::kRetryExcErr);
  auto got = s.client().Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, v);
  EXPECT_GE(s.client().stats().transport_failovers, 1u);
  EXPECT_GT(s.SlicesOk("tcp"), tcp_ok_before);
  // Later gets stay correct whichever route serves them.
  auto again = s.client().Get("k");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, v);
}

}  // namespace
}  // namespace mooncake::client
