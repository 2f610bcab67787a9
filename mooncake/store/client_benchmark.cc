// Client get latency with and without the metadata cache, against a real
// master (MasterService over TCP) and one worker in this process. Baseline in
// the same run: the same get with bypass_cache (one GetReplicas RPC per get).
// Counters: master_rpcs_per_get (0 for cache hits) and, in the cached run,
// speedup_vs_master = uncached median / cached median of this run.
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "mooncake/store/client.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake {
namespace {

struct Env {
  Env() {
    master::MasterOptions o;
    o.default_lease_ms = 5'000;
    m = std::move(*master::Master<>::Create(o));
    service = std::make_unique<master::MasterService<master::Master<>>>(
        m.get(), master::MasterServiceOptions{});
    MC_ASSERT(service->Register(&registry).ok(), "register");
    server = std::make_unique<rpc::RpcServer>(&registry, rpc::RpcServerOptions{});
    MC_ASSERT(server->Start().ok(), "server");
    service->StartTicker();
    wch = std::move(*rpc::TcpChannel::Connect(server->address()));
    worker::WorkerOptions wo;
    wo.segment_bytes = 64 << 20;
    w = std::move(*worker::Worker<rpc::TcpChannel>::Start(wo, wch.get()));
    cch = std::move(*rpc::TcpChannel::Connect(server->address()));
  }
  std::unique_ptr<master::Master<>> m;
  rpc::ServiceRegistry registry;
  std::unique_ptr<master::MasterService<master::Master<>>> service;
  std::unique_ptr<rpc::RpcServer> server;
  std::unique_ptr<rpc::TcpChannel> wch, cch;
  std::unique_ptr<worker::Worker<rpc::TcpChannel>> w;
};

Env& TheEnv() {
  static Env* env = new Env();
  return *env;
}

void Get(benchmark::State& state, bool cached, bool shm) {
  Env& env = TheEnv();
  client::ClientOptions o;
  o.use_local = false;  // another process's view: SHM or TCP
  o.use_shm = shm;
  auto c = std::move(*client::Client<rpc::TcpChannel>::Create(o, env.cch.get()));
  const size_t size = static_cast<size_t>(state.range(0));
  const std::string key =
      "bench/" + std::to_string(size) + (shm ? "s" : "t") + (cached ? "c" : "u");
  if (absl::Status s = c->Put(key, std::string(size, 'x')); !s.ok() && !absl::IsAlreadyExists(s)) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  std::string buf(size, '\0');
  client::GetOptions g;
  g.bypass_cache = !cached;
  MC_ASSERT(c->GetInto(key, buf.data(), size, g).ok(), "warm");
  const uint64_t rpcs = c->stats().master_rpcs;
  for (auto _ : state) {
    auto n = c->GetInto(key, buf.data(), size, g);
    if (!n.ok()) state.SkipWithError("get failed");
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["master_rpcs_per_get"] = benchmark::Counter(
      static_cast<double>(c->stats().master_rpcs - rpcs) / static_cast<double>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
}

void BM_GetCachedShm(benchmark::State& s) { Get(s, true, true); }
void BM_GetUncachedShm(benchmark::State& s) { Get(s, false, true); }
void BM_GetCachedTcp(benchmark::State& s) { Get(s, true, false); }
void BM_GetUncachedTcp(benchmark::State& s) { Get(s, false, false); }
BENCHMARK(BM_GetCachedShm)->Arg(4096)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GetUncachedShm)->Arg(4096)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GetCachedTcp)->Arg(4096)->Arg(1 << 20)->UseRealTime();
BENCHMARK(BM_GetUncachedTcp)->Arg(4096)->Arg(1 << 20)->UseRealTime();

}  // namespace
}  // namespace mooncake
