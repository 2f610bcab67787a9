// GetReplicas and PrefixQuery throughput of one master: the core alone
// (in-process calls, no RPC), then over the RPC layer on loopback TCP with
// one pipelined connection and with several connections. Every RPC figure
// comes with the bare RPC echo rate of the same connection shape measured in
// the same benchmark run (a handler that returns a constant), as `vs_echo`.
//
//   bazel run -c opt //mooncake/store/master:master_benchmark --
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Counters: ops_per_s (calls/s), vs_echo (ratio to the echo rate). Core
// benchmarks run over every Master instantiation (BENCHMARK_TEMPLATE).
// GetReplicas grants a lease; the benchmarks release leases in batches of
// 256 (one ReleaseLeases per 256 gets, included in the time) as a client
// would. The target of issue 8: >= 100K PrefixQuery or GetReplicas RPCs/s
// against one master on this 2-core machine (client and server share it).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/base/clock.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"

namespace mooncake::master {
namespace {

constexpr int kObjects = 10000;
constexpr int kChainBlocks = 16;
constexpr int kChains = 256;
constexpr uint64_t kObjectBytes = 4096;

using KvMaster = Master<alloc::KvAllocator<>, index::S3FifoPolicy<std::string, ObjectKeyHash>>;

template <typename M>
typename M::AllocatorFactory FactoryFor() {
  if constexpr (std::is_same_v<M, KvMaster>) {
    return [](uint64_t capacity) {
      return alloc::KvAllocator<>::Create(
          alloc::TlsfAllocator({.capacity_bytes = capacity / 64 * 64, .granularity_bytes = 64}),
          alloc::SizeClassOptions{.class_bytes = {kObjectBytes}});
    };
  } else {
    return nullptr;
  }
}

Hash128 ChainBlock(int chain, int block) {
  return Hash128{static_cast<uint64_t>(chain) * 1000 + static_cast<uint64_t>(block) + 1, 77};
}

// A master with two workers, kObjects user keys and kChains chains of blocks.
template <typename M>
std::unique_ptr<M> Populated() {
  auto m = *M::Create(MasterOptions{}, &MonotonicClock::Get(), nullptr, FactoryFor<M>());
  for (const char* w : {"w1", "w2"}) {
    proto::MountSegmentRequest mount;
    mount.mutable_segment()->set_worker_id(w);
    mount.mutable_segment()->set_name("dram");
    mount.mutable_segment()->set_size_bytes(uint64_t{1} << 30);
    MC_ASSERT(m->MountSegment(mount).ok(), "mount");
  }
  auto put = [&](const std::string& key) {
    proto::PutStartRequest s;
    s.set_key(key);
    s.set_size_bytes(kObjectBytes);
    auto started = m->PutStart(s);
    MC_ASSERT(started.ok(), "put start");
    proto::PutEndRequest e;
    e.set_key(key);
    e.set_put_id(started->put_id());
    MC_ASSERT(m->PutEnd(e).ok(), "put end");
  };
  for (int i = 0; i < kObjects; ++i) put("object-" + std::to_string(i));
  for (int c = 0; c < kChains; ++c) {
    for (int b = 0; b < kChainBlocks; ++b) put(rpc::BlockObjectKey(ChainBlock(c, b)));
  }
  return m;
}

std::vector<proto::GetReplicasRequest> GetRequests() {
  std::vector<proto::GetReplicasRequest> reqs(1024);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].set_key("object-" + std::to_string((i * 7919) % kObjects));
  }
  return reqs;
}

std::vector<proto::PrefixQueryRequest> PrefixRequests(bool with_replicas) {
  std::vector<proto::PrefixQueryRequest> reqs(kChains);
  for (int c = 0; c < kChains; ++c) {
    for (int b = 0; b < kChainBlocks + 4; ++b) rpc::ToProto(ChainBlock(c, b), reqs[c].add_chain());
    reqs[c].set_with_replicas(with_replicas);
  }
  return reqs;
}

// ---- The core alone ---------------------------------------------------------

template <typename M>
void BM_CoreGetReplicas(benchmark::State& state) {
  auto m = Populated<M>();
  const auto reqs = GetRequests();
  proto::ReleaseLeasesRequest rel;
  size_t i = 0;
  for (auto _ : state) {
    auto r = m->GetReplicas(reqs[i++ % reqs.size()]);
    benchmark::DoNotOptimize(r);
    rel.add_lease_ids(r->lease().lease_id());
    if (rel.lease_ids_size() == 256) {
      benchmark::DoNotOptimize(m->ReleaseLeases(rel));
      rel.clear_lease_ids();
    }
  }
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

template <typename M>
void BM_CorePrefixQuery(benchmark::State& state) {
  const bool with_replicas = state.range(0) != 0;
  auto m = Populated<M>();
  const auto reqs = PrefixRequests(with_replicas);
  proto::ReleaseLeasesRequest rel;
  size_t i = 0;
  for (auto _ : state) {
    auto r = m->PrefixQuery(reqs[i++ % reqs.size()]);
    MC_ASSERT(r.ok() && r->matched() == kChainBlocks, "every chain is cached");
    if (with_replicas) {
      rel.add_lease_ids(r->lease().lease_id());
      if (rel.lease_ids_size() == 256) {
        benchmark::DoNotOptimize(m->ReleaseLeases(rel));
        rel.clear_lease_ids();
      }
    }
  }
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["blocks_per_query"] = kChainBlocks;
}

BENCHMARK_TEMPLATE(BM_CoreGetReplicas, Master<>);
BENCHMARK_TEMPLATE(BM_CoreGetReplicas, KvMaster);
BENCHMARK_TEMPLATE(BM_CorePrefixQuery, Master<>)->Arg(0)->Arg(1);
BENCHMARK_TEMPLATE(BM_CorePrefixQuery, KvMaster)->Arg(0)->Arg(1);

// ---- Over the RPC layer -------------------------------------------------------

// The same-run baseline: a bare RPC on the same server whose handler returns
// a constant (request and response of GetReplicas' size class).
struct BareEchoMethod {
  static constexpr uint16_t kId = 1000;
  static constexpr std::string_view kName = "BareEcho";
  using Request = proto::ExistsRequest;
  using Response = proto::ExistsResponse;
};

struct RpcFixture {
  std::unique_ptr<Master<>> master = Populated<Master<>>();
  MasterService<Master<>> service{master.get(), {}};
  rpc::ServiceRegistry registry;
  std::unique_ptr<rpc::RpcServer> server;

  RpcFixture() {
    MC_ASSERT(service.Register(&registry).ok(), "register");
    MC_ASSERT(registry
                  .Register<BareEchoMethod>(
                      [](const proto::ExistsRequest&) -> absl::StatusOr<proto::ExistsResponse> {
                        proto::ExistsResponse r;
                        r.set_exists(true);
                        return r;
                      },
                      {.mode = rpc::ExecutionMode::kInline})
                  .ok(),
              "register echo");
    server = std::make_unique<rpc::RpcServer>(&registry, rpc::RpcServerOptions{.io_threads = 1});
    MC_ASSERT(server->Start().ok(), "server start");
  }
};

struct Window {
  size_t in_flight = 0;
  size_t limit = 0;
  size_t failed = 0;
  bool HasRoom() const { return in_flight < limit; }
  bool Idle() const { return in_flight == 0; }
};

// Issues `total` calls of M over `ch`, at most `window` in flight; returns the
// wall time in seconds. Lease ids of the responses are appended to `leases`.
template <typename M>
double Pipelined(rpc::TcpChannel& ch, const std::vector<typename M::Request>& reqs, size_t total,
                 size_t window, std::vector<uint64_t>* leases) {
  absl::Mutex mu;
  Window w{.limit = window};
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < total; ++i) {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&w, &Window::HasRoom));
      ++w.in_flight;
    }
    rpc::CallAsync<M>(ch, reqs[i % reqs.size()], {}, [&](absl::StatusOr<typename M::Response> r) {
      absl::MutexLock lock(&mu);
      --w.in_flight;
      if (!r.ok()) {
        ++w.failed;
      } else if constexpr (std::is_same_v<typename M::Response, proto::GetReplicasResponse> ||
                           std::is_same_v<typename M::Response, proto::PrefixQueryResponse>) {
        if (r->lease().lease_id() != 0) leases->push_back(r->lease().lease_id());
      }
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&w, &Window::Idle));
  MC_ASSERT(w.failed == 0, "an RPC failed");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `total` calls spread over `conns` connections (one client thread
// each, `window` in flight per connection); returns calls per second.
template <typename M>
double RateOver(RpcFixture& f, std::vector<std::unique_ptr<rpc::TcpChannel>>& chans,
                const std::vector<typename M::Request>& reqs, size_t total, size_t window) {
  std::vector<std::vector<uint64_t>> leases(chans.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t c = 0; c < chans.size(); ++c) {
    threads.emplace_back(
        [&, c] { Pipelined<M>(*chans[c], reqs, total / chans.size(), window, &leases[c]); });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& ids : leases) {  // untimed: keep the lease table small
    for (size_t i = 0; i < ids.size(); i += 8192) {
      proto::ReleaseLeasesRequest rel;
      for (size_t j = i; j < std::min(ids.size(), i + 8192); ++j) rel.add_lease_ids(ids[j]);
      MC_ASSERT(f.master->ReleaseLeases(rel).ok(), "release");
    }
  }
  return static_cast<double>(total / chans.size() * chans.size()) / secs;
}

enum class Op { kGetReplicas, kPrefixQuery };

// Args: op, connections, window per connection.
void BM_Rpc(benchmark::State& state) {
  const auto op = static_cast<Op>(state.range(0));
  const size_t conns = static_cast<size_t>(state.range(1));
  const size_t window = static_cast<size_t>(state.range(2));
  constexpr size_t kCallsPerIteration = 20000;
  RpcFixture f;
  std::vector<std::unique_ptr<rpc::TcpChannel>> chans;
  for (size_t c = 0; c < conns; ++c)
    chans.push_back(*rpc::TcpChannel::Connect(f.server->address()));
  const auto gets = GetRequests();
  const auto prefixes = PrefixRequests(false);
  std::vector<proto::ExistsRequest> echoes(1);
  echoes[0].set_key("object-1");
  // Same-run baseline first (and a warm-up of both).
  RateOver<BareEchoMethod>(f, chans, echoes, 2000, window);
  const double echo_rate = RateOver<BareEchoMethod>(f, chans, echoes, kCallsPerIteration, window);
  double ops = 0;
  double secs = 0;
  for (auto _ : state) {
    const double rate =
        op == Op::kGetReplicas
            ? RateOver<rpc::GetReplicasMethod>(f, chans, gets, kCallsPerIteration, window)
            : RateOver<rpc::PrefixQueryMethod>(f, chans, prefixes, kCallsPerIteration, window);
    ops += kCallsPerIteration;
    secs += kCallsPerIteration / rate;
    state.SetIterationTime(kCallsPerIteration / rate);
  }
  state.counters["ops_per_s"] = ops / secs;
  state.counters["echo_per_s"] = echo_rate;
  state.counters["vs_echo"] = (ops / secs) / echo_rate;
  state.SetLabel(op == Op::kGetReplicas ? "GetReplicas" : "PrefixQuery(16 blocks)");
}

BENCHMARK(BM_Rpc)
    ->ArgNames({"op", "conns", "window"})
    ->Args({0, 1, 1})
    ->Args({0, 1, 64})
    ->Args({0, 4, 16})
    ->Args({1, 1, 1})
    ->Args({1, 1, 64})
    ->Args({1, 4, 16})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mooncake::master
