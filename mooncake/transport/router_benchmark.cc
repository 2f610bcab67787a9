// Router overhead: READ bandwidth of a batch through Router<Local, TCP> (the
// local route serves) against the same batch on a bare LocalTransport, and
// through Router<TCP> against a bare TcpTransport, in the same run. The
// `direct_GBps` counter is the bare transport measured in the same loop;
// `ratio` = router / direct.
//
//   bazel run -c opt //mooncake/transport:router_benchmark --
//     --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {
namespace {

template <typename T>
double TimeBatch(T& t, const std::vector<TransferRequest>& reqs) {
  const auto a = std::chrono::steady_clock::now();
  auto id = t.Submit(reqs);
  MC_ASSERT(id.ok(), "submit failed");
  auto r = t.Wait(*id, absl::Now() + absl::Seconds(60));
  MC_ASSERT(r.ok() && r->ok(), "transfer failed");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

std::unique_ptr<TcpTransport> Tcp() { return std::move(*TcpTransport::Create({})); }

// kind 0: local route vs LocalTransport; kind 1: TCP route vs TcpTransport.
void BM_RouterRead(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const uint64_t block = static_cast<uint64_t>(state.range(1));
  const int batch = 16;
  std::vector<std::byte> memory(block * batch), dst(block * batch);
  RouterOptions o;
  std::unique_ptr<Router> owner =
      kind == 0 ? std::move(*Router::Create(o, std::make_unique<LocalTransport>()))
                : std::move(*Router::Create(o, Tcp()));
  std::unique_ptr<Router> router =
      kind == 0 ? std::move(*Router::Create(o, std::make_unique<LocalTransport>()))
                : std::move(*Router::Create(o, Tcp()));
  auto seg = *owner->RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
  auto remote = *router->OpenSegment(owner->LocalEndpoint(), seg.id);
  // The bare baseline over the same kind of transport.
  std::unique_ptr<LocalTransport> local_owner, local_req;
  std::unique_ptr<TcpTransport> tcp_owner, tcp_req;
  std::vector<TransferRequest> direct, routed;
  SegmentHandle direct_handle = 0;
  if (kind == 0) {
    local_owner = std::make_unique<LocalTransport>();
    local_req = std::make_unique<LocalTransport>();
    auto s = *local_owner->RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
    direct_handle = local_req->OpenSegment(local_owner->LocalEndpoint(), s.id)->handle;
  } else {
    tcp_owner = Tcp();
    tcp_req = Tcp();
    auto s = *tcp_owner->RegisterMemory(memory.data(), memory.size(), MemoryLocation::HostDram());
    direct_handle = tcp_req->OpenSegment(tcp_owner->LocalEndpoint(), s.id)->handle;
  }
  for (int i = 0; i < batch; ++i) {
    routed.push_back({OpCode::kRead, dst.data() + i * block, remote.handle, i * block, block});
    direct.push_back({OpCode::kRead, dst.data() + i * block, direct_handle, i * block, block});
  }
  double routed_s = 0, direct_s = 0;
  for (auto _ : state) {
    const double r = TimeBatch(*router, routed);
    direct_s += kind == 0 ? TimeBatch(*local_req, direct) : TimeBatch(*tcp_req, direct);
    routed_s += r;
    state.SetIterationTime(r);
  }
  const double bytes = static_cast<double>(block) * batch * static_cast<double>(state.iterations());
  state.counters["GBps"] = bytes / routed_s / 1e9;
  state.counters["direct_GBps"] = bytes / direct_s / 1e9;
  state.counters["ratio"] = direct_s / routed_s;
}
BENCHMARK(BM_RouterRead)
    ->ArgNames({"tcp", "block"})
    ->ArgsProduct({{0, 1}, {64 << 10, 1 << 20, 4 << 20}})
    ->UseManualTime();

}  // namespace
}  // namespace mooncake::transport

BENCHMARK_MAIN();
