// GET throughput with and without access control (docs/security.md), same
// run, interleaved: a master (MasterService over TCP) and one worker in this
// process, and a client that reads over the TCP transport only, asking the
// master on every get (bypass_cache: one GetReplicas RPC and one transport
// read per get, the most authentication-sensitive path). "on": the master and
// the worker have a token file; the client proves a tenant's token on both
// connections, so every RPC also passes the tenant guard, every replica the
// master answers carries a range capability (one HMAC) and the worker checks
// the capability of every transport request (one HMAC per new capability)
// ("off" names tenant alice in its requests itself, so the master's other work
// is the same). Prints, per value
// size, the median gets/s of each mode and on/off.
//
//   bazel run -c opt //mooncake/store:auth_benchmark -- --reps=7 --seconds=1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/store/client.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/master/tenant_guard.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/worker/worker.h"

ABSL_FLAG(int, reps, 7, "interleaved off/on pairs per size");
ABSL_FLAG(double, seconds, 1.0, "seconds of gets per measurement");
ABSL_FLAG(std::string, sizes, "4096,65536,1048576", "value sizes in bytes");
ABSL_FLAG(int, keys, 64, "keys read in turn");

namespace mooncake {
namespace {

std::shared_ptr<const auth::Credentials> Creds(std::string_view text) {
  auto c = auth::Credentials::Parse(text, "benchmark");
  MC_ASSERT(c.ok(), "token text");
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

struct Env {
  explicit Env(bool auth) {
    master::MasterOptions o;
    o.tenants = {{.name = "alice", .capacity_bytes = uint64_t{1} << 30}};
    m = std::move(*master::Master<>::Create(o));
    service = std::make_unique<master::MasterService<master::Master<>>>(
        m.get(), master::MasterServiceOptions{});
    MC_ASSERT(service->Register(&registry).ok(), "register");
    rpc::RpcServerOptions so;
    std::shared_ptr<const auth::Credentials> server_creds, client_creds;
    if (auth) {
      server_creds = Creds(
          "cluster 0123456789abcdef0123456789abcdef\n"
          "tenant:alice a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n");
      client_creds = Creds("tenant:alice a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n");
      so.auth = server_creds;
      MC_ASSERT(master::GuardMasterRegistry(&registry, *server_creds).ok(), "guards");
    }
    server = std::make_unique<rpc::RpcServer>(&registry, so);
    MC_ASSERT(server->Start().ok(), "server");
    service->StartTicker();
    rpc::TcpChannelOptions wco;
    wco.auth = server_creds;
    wch = std::move(*rpc::TcpChannel::Connect(server->address(), wco));
    worker::WorkerOptions wo;
    wo.segment_bytes = 256 << 20;
    wo.serve_local = false;
    wo.serve_shm = false;
    wo.auth = server_creds;
    w = std::move(*worker::Worker<rpc::TcpChannel>::Start(wo, wch.get()));
    rpc::TcpChannelOptions cco;
    cco.auth = client_creds;
    cch = std::move(*rpc::TcpChannel::Connect(server->address(), cco));
    client::ClientOptions co;
    co.use_local = false;
    co.use_shm = false;
    co.auth = client_creds;
    // Both modes read as tenant alice, so the master does the same work: "on"
    // differs by the handshakes and the guard (which fills in the tenant).
    if (!auth) co.tenant = "alice";
    c = std::move(*client::Client<rpc::TcpChannel>::Create(co, cch.get()));
  }
  ~Env() {
    c.reset();
    w.reset();
    server->Stop();
    service->StopTicker();
  }
  std::unique_ptr<master::Master<>> m;
  rpc::ServiceRegistry registry;
  std::unique_ptr<master::MasterService<master::Master<>>> service;
  std::unique_ptr<rpc::RpcServer> server;
  std::unique_ptr<rpc::TcpChannel> wch, cch;
  std::unique_ptr<worker::Worker<rpc::TcpChannel>> w;
  std::unique_ptr<client::Client<rpc::TcpChannel>> c;
};

double GetsPerSecond(Env& env, size_t size, int keys, double seconds) {
  std::string buf(size, '\0');
  client::GetOptions g;
  g.bypass_cache = true;
  uint64_t n = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  auto now = start;
  while (now < end) {
    for (int i = 0; i < 16; ++i) {
      const std::string key = "k" + std::to_string(size) + "-" + std::to_string(n % keys);
      auto r = env.c->GetInto(key, buf.data(), size, g);
      MC_ASSERT(r.ok() && *r == size, "get failed");
      ++n;
    }
    now = std::chrono::steady_clock::now();
  }
  return static_cast<double>(n) / std::chrono::duration<double>(now - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
}

int Run() {
  const int reps = absl::GetFlag(FLAGS_reps);
  const int keys = absl::GetFlag(FLAGS_keys);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    size_t v = 0;
    MC_ASSERT(absl::SimpleAtoi(s, &v) && v > 0, "--sizes");
    sizes.push_back(v);
  }
  Env off(false), on(true);
  for (size_t size : sizes) {
    for (Env* e : {&off, &on}) {
      for (int k = 0; k < keys; ++k) {
        const std::string key = "k" + std::to_string(size) + "-" + std::to_string(k);
        MC_ASSERT(e->c->Put(key, std::string(size, static_cast<char>('a' + k % 26))).ok(), "put");
      }
      (void)GetsPerSecond(*e, size, keys, 0.2);  // warm: connections, lanes
    }
  }
  std::printf("%-10s %14s %14s %8s   (gets/s, median of %d interleaved pairs of %.1f s)\n", "size",
              "auth off", "auth on", "on/off", reps, seconds);
  for (size_t size : sizes) {
    std::vector<double> a, b, ratio;
    for (int r = 0; r < reps; ++r) {
      // Alternate which goes first: drift in the machine's load hits both.
      const bool off_first = r % 2 == 0;
      const double x = off_first ? GetsPerSecond(off, size, keys, seconds) : 0;
      const double y = GetsPerSecond(on, size, keys, seconds);
      const double x2 = off_first ? x : GetsPerSecond(off, size, keys, seconds);
      a.push_back(x2);
      b.push_back(y);
      ratio.push_back(y / x2);
    }
    std::printf("%-10zu %14.0f %14.0f %8.3f   (median of per-pair ratios %.3f)\n", size, Median(a),
                Median(b), Median(b) / Median(a), Median(ratio));
  }
  return 0;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::Run();
}
