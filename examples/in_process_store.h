// InProcessStore<MasterT>: a whole store (master, one worker, one client) in
// one process, wired through rpc::InProcessChannel. The examples use it; an
// engine can embed a store the same way.
//
//   ASSIGN_OR_RETURN(auto store, InProcessStore<>::Start({}));
//   RETURN_IF_ERROR(store->client().Put("k", "v"));
//
// The pieces are the same as in a deployment; only the channel differs. For a
// remote master, serve `registry` with rpc::RpcServer and give workers and
// clients rpc::TcpChannel::Connect(address) instead (see
// tools/mooncake_store.cc).
//
// MasterT is any master::Master<Allocator, EvictionPolicy>; an allocator
// without SegmentAllocatorTraits (e.g. KvAllocator) needs
// Options::allocator_factory.
//
// Thread-safety: client() and master() may be used from any thread.
#ifndef EXAMPLES_IN_PROCESS_STORE_H_
#define EXAMPLES_IN_PROCESS_STORE_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake::examples {

template <typename MasterT = master::Master<>>
class InProcessStore {
 public:
  using Client = client::Client<rpc::InProcessChannel>;

  struct Options {
    master::MasterOptions master;
    typename MasterT::AllocatorFactory allocator_factory = nullptr;
    worker::WorkerOptions worker;  // segment_count, segment_bytes, ...
    client::ClientOptions client;
  };

  static absl::StatusOr<std::unique_ptr<InProcessStore>> Start(Options o) {
    std::unique_ptr<InProcessStore> s(new InProcessStore());
    ASSIGN_OR_RETURN(s->master_, MasterT::Create(o.master, &MonotonicClock::Get(), nullptr,
                                                 std::move(o.allocator_factory)));
    s->service_ = std::make_unique<master::MasterService<MasterT>>(
        s->master_.get(), master::MasterServiceOptions{.tick_interval_ms = 20});
    RETURN_IF_ERROR(s->service_->Register(&s->registry_));
    s->channel_ = std::make_unique<rpc::InProcessChannel>(&s->registry_);
    s->service_->StartTicker();  // expiry of leases and puts, watermark eviction
    ASSIGN_OR_RETURN(s->worker_, worker::Worker<rpc::InProcessChannel>::Start(std::move(o.worker),
                                                                              s->channel_.get()));
    ASSIGN_OR_RETURN(s->client_, Client::Create(std::move(o.client), s->channel_.get()));
    return s;
  }

  InProcessStore(const InProcessStore&) = delete;
  InProcessStore& operator=(const InProcessStore&) = delete;

  Client& client() { return *client_; }
  MasterT& master() { return *master_; }

 private:
  InProcessStore() = default;

  // Declaration order is teardown order reversed: the client and the worker
  // (which unmounts its segments) go while the master still serves.
  std::unique_ptr<MasterT> master_;
  std::unique_ptr<master::MasterService<MasterT>> service_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::InProcessChannel> channel_;
  std::unique_ptr<worker::Worker<rpc::InProcessChannel>> worker_;
  std::unique_ptr<Client> client_;
};

}  // namespace mooncake::examples

#endif  // EXAMPLES_IN_PROCESS_STORE_H_
