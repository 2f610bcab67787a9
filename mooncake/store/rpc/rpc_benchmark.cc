// RPC round trips per second on loopback, against a raw TCP ping-pong of the
// same payload measured in the same run (the floor any RPC layer pays: two
// syscalls and two wake-ups per round trip).
//
//   bazel run -c opt //mooncake/store/rpc:rpc_benchmark --
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Counters: rt_per_s (round trips per second), vs_raw (ratio to the raw
// ping-pong baseline with the same number of connections, measured first).
// The store's target is >= 100K GetReplicas RPCs/s against one master on a
// 2-core machine; BM_GetReplicasPipelined is that call shape on the bare RPC
// layer (client and server share the machine's two cores here).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/histogram.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/tcp_listen.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/echo_testing.h"
#include "mooncake/store/rpc/internal/socket.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"

namespace mooncake::rpc {
namespace {

constexpr size_t kPayloadBytes = 64;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- Raw TCP ping-pong baseline --------------------------------------------

bool IoExact(int fd, char* buf, size_t n, bool send_side) {
  size_t off = 0;
  while (off < n) {
    const ssize_t r = send_side ? ::send(fd, buf + off, n - off, MSG_NOSIGNAL)
                                : ::recv(fd, buf + off, n - off, 0);
    if (r <= 0) return false;
    off += static_cast<size_t>(r);
  }
  return true;
}

// Blocking echo server: one thread per connection.
class RawEchoServer {
 public:
  RawEchoServer() {
    auto listener = ListenTcp({"127.0.0.1", 0}, {.backlog = 64});
    MC_ASSERT(listener.ok(), "listen failed");
    listen_ = std::move(listener->fd);
    port_ = listener->port;
    acceptor_ = std::thread([this] {
      for (;;) {
        pollfd p{listen_.get(), POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) {
          if (stop_.load()) return;
          continue;
        }
        const int c = ::accept(listen_.get(), nullptr, nullptr);
        if (c < 0) continue;
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ::fcntl(c, F_SETFL, 0);  // blocking
        workers_.emplace_back([c] {
          char buf[kPayloadBytes];
          while (IoExact(c, buf, sizeof(buf), false) && IoExact(c, buf, sizeof(buf), true)) {
          }
          ::close(c);
        });
      }
    });
  }
  ~RawEchoServer() {
    stop_.store(true);
    acceptor_.join();
    for (auto& w : workers_) w.detach();  // exit when their client closes
  }
  uint16_t port() const { return port_; }

 private:
  UniqueFd listen_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

int RawConnect(uint16_t port) {
  auto fd = rpc_internal::ConnectTcp("127.0.0.1:" + std::to_string(port), 1'000'000'000);
  MC_ASSERT(fd.ok(), "connect failed");
  const int raw = fd->Release();
  ::fcntl(raw, F_SETFL, 0);
  return raw;
}

// Round trips per second of `conns` parallel raw ping-pong pairs, measured
// for `seconds`. Cached per connection count: every RPC benchmark compares
// with the figure of this run.
double RawPingPongRate(int conns, double seconds = 0.5) {
  static Mutex mu;
  static std::map<int, double> cache;
  MutexLock lock(&mu);
  if (auto it = cache.find(conns); it != cache.end()) return it->second;
  RawEchoServer server;
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> threads;
  const double until = Now() + seconds;
  for (int i = 0; i < conns; ++i) {
    threads.emplace_back([&] {
      const int fd = RawConnect(server.port());
      char buf[kPayloadBytes] = {0};
      uint64_t n = 0;
      while (Now() < until) {
        // A failed round trip ends the run: counting it would inflate the baseline.
        if (!IoExact(fd, buf, sizeof(buf), true) || !IoExact(fd, buf, sizeof(buf), false)) {
          std::fprintf(stderr, "raw ping-pong connection failed; baseline cut short\n");
          break;
        }
        ++n;
      }
      ::close(fd);
      total.fetch_add(n);
    });
  }
  for (auto& t : threads) t.join();
  const double rate = static_cast<double>(total.load()) / seconds;
  std::printf("raw TCP ping-pong baseline, %d connection(s), %zu B: %.0f round trips/s\n", conns,
              kPayloadBytes, rate);
  cache[conns] = rate;
  return rate;
}

void BM_RawTcpPingPong(benchmark::State& state) {
  const int conns = static_cast<int>(state.range(0));
  double rate = 0;
  for (auto _ : state) rate = RawPingPongRate(conns, 0.3);
  state.counters["rt_per_s"] = rate;
  state.counters["vs_raw"] = 1.0;
}
BENCHMARK(BM_RawTcpPingPong)->Arg(1)->Arg(4)->Iterations(1)->UseRealTime();

// ---- RPC load -----------------------------------------------------------------

template <typename M>
typename M::Request MakeRequest() {
  if constexpr (std::is_same_v<typename M::Request, echo::EchoRequest>) {
    return MakeEcho(std::string(kPayloadBytes, 'p'));
  } else {
    store::proto::GetReplicasRequest req;
    req.set_key("llama-3-8b/tp0/block/000000000000000000000000000000000042");
    req.set_tenant("team-a");
    req.set_client_host_id("host-1");
    return req;
  }
}

// What a master answers for a hot key: object info, two replicas, a lease.
absl::StatusOr<store::proto::GetReplicasResponse> GetReplicasHandler(
    const store::proto::GetReplicasRequest& req) {
  store::proto::GetReplicasResponse resp;
  resp.mutable_object()->set_size_bytes(2 << 20);
  resp.mutable_object()->set_checksum(0x1234567890ABCDEFULL);
  resp.mutable_object()->set_version(7);
  resp.mutable_object()->set_tenant(req.tenant());
  for (uint64_t i = 0; i < 2; ++i) {
    store::proto::Replica* r = resp.add_replicas();
    r->set_segment_id(i + 1);
    r->set_worker_id("worker-" + std::to_string(i));
    r->set_offset((i + 1) << 24);
    r->set_length(2 << 20);
    r->set_state(store::proto::REPLICA_COMPLETE);
  }
  resp.mutable_lease()->set_lease_id(42);
  resp.mutable_lease()->set_expires_in_ms(5000);
  return resp;
}

// One server for the whole run: one I/O thread, two handler threads.
RpcServer& SharedServer() {
  static RpcServer* server = [] {
    auto* registry = new ServiceRegistry();
    MC_ASSERT(RegisterEcho(registry).ok(), "register echo");
    MC_ASSERT(
        registry->Register<GetReplicasMethod>(GetReplicasHandler, {.mode = ExecutionMode::kInline})
            .ok(),
        "register GetReplicas");
    auto* s = new RpcServer(registry, {.io_threads = 1, .worker_threads = 2});
    MC_ASSERT(s->Start().ok(), "server start");
    return s;
  }();
  return *server;
}

struct LoadResult {
  double rate = 0;
  uint64_t errors = 0;
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  double cpu_us_per_rt = 0;  // client and server together (one process)
};

double ProcessCpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// `conns` client threads, each with its own connection, each keeping `depth`
// calls in flight (depth 1: blocking calls) for `seconds`.
template <typename M>
LoadResult RunLoad(int conns, int depth, bool batch, double seconds) {
  RpcServer& server = SharedServer();
  LatencyHistogram latency;
  std::atomic<uint64_t> total{0};
  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  const double cpu0 = ProcessCpuSeconds();
  const double until = Now() + seconds;
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&] {
      auto channel = TcpChannel::Connect(server.address());
      MC_ASSERT(channel.ok(), "connect");
      const typename M::Request req = MakeRequest<M>();
      uint64_t n = 0;
      if (depth == 1) {
        while (Now() < until) {
          const int64_t t0 = MonotonicClock::Get().NowNs();
          if (!Call<M>(**channel, req).ok()) errors.fetch_add(1);
          latency.Record(static_cast<uint64_t>(MonotonicClock::Get().NowNs() - t0));
          ++n;
        }
      } else {
        Mutex mu;
        int inflight = 0;
        // Without batching one call at a time; with it, groups of `group`
        // calls written by one send (TcpChannel::Batch). Never wait for room
        // inside a batch: its calls are not sent before it ends.
        const int group = batch ? std::min(depth, 16) : 1;
        auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return inflight <= depth - group; };
        auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return inflight == 0; };
        auto issue = [&] {
          const int64_t t0 = MonotonicClock::Get().NowNs();
          CallAsync<M>(**channel, req, {}, [&, t0](absl::StatusOr<typename M::Response> r) {
            if (!r.ok()) errors.fetch_add(1);
            latency.Record(static_cast<uint64_t>(MonotonicClock::Get().NowNs() - t0));
            MutexLock lock(&mu);
            --inflight;
          });
        };
        while (Now() < until) {
          for (int k = 0; k < 64; k += group) {
            {
              MutexLock lock(&mu);
              mu.Await(Condition(&room));
              inflight += group;
            }
            if (batch) {
              TcpChannel::Batch b(**channel);
              for (int g = 0; g < group; ++g) issue();
            } else {
              issue();
            }
            n += static_cast<uint64_t>(group);
          }
        }
        MutexLock lock(&mu);
        mu.Await(Condition(&idle));
      }
      total.fetch_add(n);
    });
  }
  for (auto& t : threads) t.join();
  const double cpu = ProcessCpuSeconds() - cpu0;
  return {static_cast<double>(total.load()) / seconds, errors.load(), latency.P50(), latency.P99(),
          cpu * 1e6 / static_cast<double>(std::max<uint64_t>(total.load(), 1))};
}

template <typename M>
void BM_Rpc(benchmark::State& state) {
  const int conns = static_cast<int>(state.range(0));
  const int depth = static_cast<int>(state.range(1));
  const bool batch = state.range(2) != 0;
  const double raw = RawPingPongRate(conns);
  LoadResult r;
  for (auto _ : state) r = RunLoad<M>(conns, depth, batch, 0.5);
  state.counters["rt_per_s"] = r.rate;
  state.counters["vs_raw"] = r.rate / raw;
  state.counters["p50_us"] = static_cast<double>(r.p50_ns) / 1e3;
  state.counters["p99_us"] = static_cast<double>(r.p99_ns) / 1e3;
  state.counters["errors"] = static_cast<double>(r.errors);
  state.counters["cpu_us_per_rt"] = r.cpu_us_per_rt;
  state.SetLabel(std::string(M::kName) + " conns=" + std::to_string(conns) +
                 " depth=" + std::to_string(depth) + (batch ? " batched" : ""));
}

// Args: {connections, calls in flight per connection, batched writes}.
#define MOONCAKE_RPC_LOADS(b) \
  b->Args({1, 1, 0})          \
      ->Args({1, 16, 0})      \
      ->Args({1, 128, 0})     \
      ->Args({1, 128, 1})     \
      ->Args({4, 1, 0})       \
      ->Args({4, 32, 0})      \
      ->Args({4, 32, 1})      \
      ->Iterations(1)         \
      ->UseRealTime()
MOONCAKE_RPC_LOADS(BENCHMARK_TEMPLATE(BM_Rpc, EchoMethod));
MOONCAKE_RPC_LOADS(BENCHMARK_TEMPLATE(BM_Rpc, EchoInlineMethod));
MOONCAKE_RPC_LOADS(BENCHMARK_TEMPLATE(BM_Rpc, GetReplicasMethod));

}  // namespace
}  // namespace mooncake::rpc
