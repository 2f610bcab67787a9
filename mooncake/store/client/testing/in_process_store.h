// InProcessStore: the real master behind MasterService and one worker, in
// one process over an InProcessChannel; clients made on demand share the
// channel. The master's clock never moves, so nothing expires. For client
// tests that need real placement and real bytes (fake_master.h answers from
// a script instead).
#ifndef MOONCAKE_STORE_CLIENT_TESTING_IN_PROCESS_STORE_H_
#define MOONCAKE_STORE_CLIENT_TESTING_IN_PROCESS_STORE_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/client.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake::client_testing {

class InProcessStore {
 public:
  using TestClient = client::Client<rpc::InProcessChannel>;
  using TestWorker = worker::Worker<rpc::InProcessChannel>;

  // One worker with one segment of `segment_bytes`.
  explicit InProcessStore(uint64_t segment_bytes) : InProcessStore(SegmentOf(segment_bytes)) {}

  // One worker started with `wo` (its heartbeat thread off: the clock is fake).
  explicit InProcessStore(worker::WorkerOptions wo) {
    auto m = master::Master<>::Create(master::MasterOptions{}, &clock_);
    EXPECT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    service_ = std::make_unique<master::MasterService<master::Master<>>>(
        master_.get(), master::MasterServiceOptions{});
    EXPECT_TRUE(service_->Register(&registry_).ok());
    channel_ = std::make_unique<rpc::InProcessChannel>(&registry_);
    wo.heartbeat_thread = false;
    auto w = TestWorker::Start(wo, channel_.get());
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) worker_ = std::move(*w);
  }

  static worker::WorkerOptions SegmentOf(uint64_t bytes) {
    worker::WorkerOptions wo;
    wo.segment_bytes = bytes;
    return wo;
  }

  // nullptr (and a test failure) if the client cannot be made.
  std::unique_ptr<TestClient> NewClient(const client::ClientOptions& o = {}) {
    auto c = TestClient::Create(o, channel_.get());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  bool ready() const { return worker_ != nullptr; }
  TestWorker& worker() { return *worker_; }
  master::Master<>& master() { return *master_; }
  rpc::InProcessChannel* channel() { return channel_.get(); }

 private:
  FakeClock clock_{1'000'000'000};
  std::unique_ptr<master::Master<>> master_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<master::MasterService<master::Master<>>> service_;
  std::unique_ptr<rpc::InProcessChannel> channel_;
  std::unique_ptr<TestWorker> worker_;
};

}  // namespace mooncake::client_testing

#endif  // MOONCAKE_STORE_CLIENT_TESTING_IN_PROCESS_STORE_H_
