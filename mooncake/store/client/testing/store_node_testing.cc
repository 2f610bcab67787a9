// store_node: one piece of a store as its own process, for the process
// tests (store_process_test.cc).
//
//   store_node master <port file> <max object bytes>
//   store_node worker <master address> <segment bytes> <id file>
//   store_node load <master address> <writer id> <ops> <keys>
//   store_node lease <master address> <key>
//
// master/worker serve until SIGTERM (worker: graceful unmount) or SIGKILL.
// load runs puts/gets/removes on shared keys and exits 0 only if every read
// was whole and belonged to its key. lease gets <key> and dies holding the
// lease (_exit, nothing released).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/store/client.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake {
namespace {

std::atomic<bool> g_stop{false};
void OnTerm(int) { g_stop.store(true); }

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());  // readers never see half a file
}

void WaitForTerm() {
  signal(SIGTERM, OnTerm);
  while (!g_stop.load()) absl::SleepFor(absl::Milliseconds(10));
}

int RunMaster(const std::string& port_file, uint64_t max_object_bytes) {
  master::MasterOptions o;
  o.max_object_bytes = max_object_bytes;
  o.membership.heartbeat_interval_ms = 100;
  o.membership.heartbeat_timeout_ms = 3'000;  // loaded 2-core CI: no false expiry
  o.default_lease_ms = 1'000;
  o.max_lease_ms = 2'000;
  o.put_timeout_ms = 3'000;
  o.timed_out_put_hold_ms = 500;
  o.high_watermark = 0.9;
  o.low_watermark = 0.6;
  o.tenants.push_back({"known", uint64_t{1} << 40, 0});
  auto m = master::Master<>::Create(o);
  if (!m.ok()) return 2;
  master::MasterService<master::Master<>> service(m->get(), {.tick_interval_ms = 20});
  rpc::ServiceRegistry registry;
  if (!service.Register(&registry).ok()) return 3;
  rpc::RpcServer server(&registry, {});
  if (!server.Start().ok()) return 4;
  service.StartTicker();
  WriteFile(port_file, server.address());
  WaitForTerm();
  return 0;
}

int RunWorker(const std::string& master, uint64_t segment_bytes, const std::string& id_file) {
  auto channel = rpc::TcpChannel::Connect(master);
  if (!channel.ok()) return 2;
  worker::WorkerOptions o;
  o.segment_bytes = segment_bytes;
  auto w = worker::Worker<rpc::TcpChannel>::Start(o, channel->get());
  if (!w.ok()) {
    std::fprintf(stderr, "worker: %s\n", w.status().ToString().c_str());
    return 3;
  }
  WriteFile(id_file, (*w)->worker_id());
  WaitForTerm();
  return (*w)->Shutdown().ok() ? 0 : 5;
}

std::string LoadValue(int key, int writer, int serial) {
  std::string v = "k" + std::to_string(key) + "/w" + std::to_string(writer) + "/s" +
                  std::to_string(serial) + "/";
  return v + std::string(1000 + (serial * 97) % 30000, static_cast<char>('a' + key % 26));
}

bool Whole(const std::string& v, int key) {
  const std::string prefix = "k" + std::to_string(key) + "/";
  const size_t tail = v.rfind('/') + 1;
  return v.starts_with(prefix) &&
         v.find_first_not_of(static_cast<char>('a' + key % 26), tail) == std::string::npos;
}

int RunLoad(const std::string& master, int writer, int ops, int keys) {
  auto channel = rpc::TcpChannel::Connect(master);
  if (!channel.ok()) return 2;
  auto c = client::Client<rpc::TcpChannel>::Create({}, channel->get());
  if (!c.ok()) return 3;
  int bad = 0;
  for (int op = 0; op < ops; ++op) {
    const int key = (op * 7 + writer * 3) % keys;
    const std::string k = "key" + std::to_string(key);
    if (op % 4 == 0) {
      const absl::Status s = (*c)->Put(k, LoadValue(key, writer, op));
      bad += !(s.ok() || absl::IsAlreadyExists(s) || absl::IsResourceExhausted(s));
    } else if (op % 4 == 1) {
      const absl::Status s = (*c)->Remove(k);
      bad += !(s.ok() || absl::IsNotFound(s));
    } else {
      client::GetOptions g;
      g.bypass_cache = op % 3 == 0;
      auto r = (*c)->Get(k, g);
      bad += r.ok() ? !Whole(*r, key) : !absl::IsNotFound(r.status());
      if (!r.ok() && !absl::IsNotFound(r.status())) {
        std::fprintf(stderr, "load %d: %s\n", writer, r.status().ToString().c_str());
      }
    }
  }
  std::fprintf(stderr, "load %d: %d bad of %d\n", writer, bad, ops);
  return bad == 0 ? 0 : 1;
}

int RunLease(const std::string& master, const std::string& key) {
  auto channel = rpc::TcpChannel::Connect(master);
  if (!channel.ok()) return 2;
  auto c = client::Client<rpc::TcpChannel>::Create({}, channel->get());
  if (!c.ok()) return 3;
  if (!(*c)->Get(key).ok()) return 4;
  std::fflush(stderr);
  _exit(0);  // dies holding the lease: no destructor releases it
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) {
  using namespace mooncake;  // NOLINT: a tool's main
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "master" && argc == 4) return RunMaster(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (mode == "worker" && argc == 5) {
    return RunWorker(argv[2], std::strtoull(argv[3], nullptr, 10), argv[4]);
  }
  if (mode == "load" && argc == 6) {
    return RunLoad(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
  }
  if (mode == "lease" && argc == 4) return RunLease(argv[2], argv[3]);
  std::fprintf(stderr, "usage: see store_node_testing.cc\n");
  return 64;
}
