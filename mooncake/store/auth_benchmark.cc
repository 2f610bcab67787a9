// GET throughput with and without access control (docs/security.md), same
// run: a master (MasterService over TCP) and one worker in this process, and a
// client that reads over the TCP transport only, asking the master on every
// get (bypass_cache: one GetReplicas RPC and one transport read per get, the
// most authentication-sensitive path). "on": the master and the worker have a
// token file; the client proves a tenant's token on both connections, so every
// RPC also passes the tenant guard, every replica the master answers carries a
// range capability (one HMAC per distinct grant) and the worker checks the
// capability of every transport request (one HMAC per new capability) ("off"
// names tenant alice in its requests itself, so the master's other work is the
// same).
//
// Measured in pairs: an "off" and an "on" environment side by side, each pair's
// seconds in alternating slices, the environments built afresh for every pair
// (--pairs_per_env) in alternating order, both reading into one buffer.
// Prints per value size the medians of gets/s and of this process's CPU
// time per get (user + system), the medians of the per-pair ratios and
// their 95% intervals. --control makes both sides "off" (what the method
// reads when nothing differs); --capabilities=false leaves range
// capabilities out of "on", and --worker_checks=false only their checking.
//
// A get crosses between threads four times (client to the master's I/O
// thread and back, client to the worker's and back). On one core (taskset)
// throughput is CPU time per get, where authentication's work shows; over
// several cores of a VM it is also the cost of waking a thread on another
// core, which varies between environments by more than 2%.
//
//   bazel run -c opt //mooncake/store:auth_benchmark -- --reps=101 --sizes=4096,1048576
//   taskset -c 1 bazel-bin/mooncake/store/auth_benchmark --reps=101 --slices=8
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

ABSL_FLAG(int, reps, 21, "off/on pairs per size");
ABSL_FLAG(double, seconds, 0.5, "seconds of gets per measurement");
ABSL_FLAG(std::string, sizes, "4096,65536,1048576", "value sizes in bytes");
ABSL_FLAG(int, keys, 64, "keys read in turn");
ABSL_FLAG(int, buffer_offset, 0,
          "bytes past a page boundary where the gets' destination starts (one buffer for both "
          "environments)");
ABSL_FLAG(bool, capabilities, true,
          "false: \"on\" authenticates every connection and guards the tenant, but the master "
          "issues no range capabilities and the worker checks none (what they cost)");
ABSL_FLAG(bool, worker_checks, true,
          "false (with --capabilities): the master issues capabilities and the client sends "
          "them, but the worker (which then knows only the tenant's secret) checks none: what "
          "issuing and carrying them costs, apart from checking");
ABSL_FLAG(int, pairs_per_env, 1,
          "pairs measured in one pair of environments before new ones (1: every pair is "
          "independent; an environment's own speed, its threads' placement, varies more than "
          "its measurements do)");
ABSL_FLAG(int, slices, 4, "a pair's seconds are measured in this many alternating slices");
ABSL_FLAG(bool, control, false,
          "both sides without a token file: what on/off reads when nothing differs (the "
          "bias of two environments in one process, and the noise)");
ABSL_FLAG(std::string, only, "",
          "off or on: gets in that mode alone for --seconds x --reps per size (for a profiler)");

namespace mooncake {
namespace {

std::shared_ptr<const auth::Credentials> Creds(std::string_view text) {
  auto c = auth::Credentials::Parse(text, "benchmark");
  MC_ASSERT(c.ok(), "token text");
  return std::make_shared<const auth::Credentials>(*std::move(c));
}

struct Env {
  Env(bool auth, uint64_t segment_bytes) {
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
      if (absl::GetFlag(FLAGS_capabilities)) {
        MC_ASSERT(master::GuardMasterRegistry(&registry, *server_creds).ok(), "guards");
      } else {
        MC_ASSERT(registry.SetRequestGuard(master::GuardMasterRequest).ok(), "guard");
      }
    }
    server = std::make_unique<rpc::RpcServer>(&registry, so);
    MC_ASSERT(server->Start().ok(), "server");
    service->StartTicker();
    rpc::TcpChannelOptions wco;
    wco.auth = server_creds;
    wch = std::move(*rpc::TcpChannel::Connect(server->address(), wco));
    worker::WorkerOptions wo;
    wo.segment_bytes = segment_bytes;
    wo.serve_local = false;
    wo.serve_shm = false;
    // Without capabilities the worker knows the tenant's secret but not the cluster's:
    // it authenticates tenants and does not check their ranges.
    wo.auth = auth && (!absl::GetFlag(FLAGS_capabilities) || !absl::GetFlag(FLAGS_worker_checks))
                  ? client_creds
                  : server_creds;
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
    m->StopTierWaits();  // the long polls answer now, not after their 1 s
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

// Gets for some seconds: how many, the wall time, and this process's CPU time
// (user and system: master, worker and client all run here, and a busy
// machine's other processes do not change it).
struct Sample {
  uint64_t gets = 0;
  double wall_s = 0;
  double user_s = 0;
  double sys_s = 0;
  void Add(const Sample& o) {
    gets += o.gets;
    wall_s += o.wall_s;
    user_s += o.user_s;
    sys_s += o.sys_s;
  }
  double gets_per_s() const { return static_cast<double>(gets) / wall_s; }
  double cpu_us_per_get() const { return (user_s + sys_s) * 1e6 / static_cast<double>(gets); }
  double user_us_per_get() const { return user_s * 1e6 / static_cast<double>(gets); }
};

// This process's user and system CPU seconds.
std::pair<double, double> ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto sec = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return {sec(u.ru_utime), sec(u.ru_stime)};
}

// The gets' destination: one buffer both environments read into, at
// --buffer_offset past a page boundary. Reading into a buffer of each
// environment's own would compare two addresses as well: the kernel's copy
// into it and the client's digest over it cost up to several percent more
// when it starts off a cache line, and where malloc puts it differs between
// the environments.
class Destination {
 public:
  explicit Destination(size_t size)
      : offset_(static_cast<size_t>(absl::GetFlag(FLAGS_buffer_offset))),
        mem_(static_cast<char*>(
            std::aligned_alloc(kPage, (offset_ + size + kPage - 1) / kPage * kPage))) {
    MC_ASSERT(offset_ < kPage, "--buffer_offset in [0, 4096)");
    MC_ASSERT(mem_ != nullptr, "aligned_alloc");
  }
  ~Destination() { std::free(mem_); }
  Destination(const Destination&) = delete;
  Destination& operator=(const Destination&) = delete;
  char* data() const { return mem_ + offset_; }

 private:
  static constexpr size_t kPage = 4096;
  const size_t offset_;
  char* const mem_;
};

Sample Measure(Env& env, const Destination& buf, size_t size, int keys, double seconds) {
  client::GetOptions g;
  g.bypass_cache = true;
  uint64_t n = 0;
  const auto [user0, sys0] = ProcessCpuSeconds();
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
  const auto [user1, sys1] = ProcessCpuSeconds();
  return {n, std::chrono::duration<double>(now - start).count(), user1 - user0, sys1 - sys0};
}

// Room for every value twice (a put that replaces one), at least 16 MiB.
uint64_t SegmentBytes(size_t size, int keys) {
  return std::max<uint64_t>(uint64_t{16} << 20, 2 * size * static_cast<uint64_t>(keys));
}

void Fill(Env& e, const Destination& buf, size_t size, int keys) {
  for (int k = 0; k < keys; ++k) {
    const std::string key = "k" + std::to_string(size) + "-" + std::to_string(k);
    MC_ASSERT(e.c->Put(key, std::string(size, static_cast<char>('a' + k % 26))).ok(), "put");
  }
  (void)Measure(e, buf, size, keys, 0.1);  // warm: connections, lanes
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// A distribution-free 95% confidence interval of the median: the order
// statistics k and n + 1 - k, k = n/2 - 0.98 sqrt(n) (the binomial's normal
// approximation; from about 10 samples).
std::pair<double, double> MedianInterval(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const auto k = static_cast<size_t>(std::max(0.0, std::floor(n / 2 - 0.98 * std::sqrt(n))));
  return {v[k], v[v.size() - 1 - k]};
}

int Run() {
  const int reps = absl::GetFlag(FLAGS_reps);
  const int keys = absl::GetFlag(FLAGS_keys);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const bool control = absl::GetFlag(FLAGS_control);
  const int slices = absl::GetFlag(FLAGS_slices);
  const int pairs_per_env = absl::GetFlag(FLAGS_pairs_per_env);
  MC_ASSERT(pairs_per_env >= 1, "--pairs_per_env >= 1");
  MC_ASSERT(slices >= 1, "--slices >= 1");
  const std::string only = absl::GetFlag(FLAGS_only);
  MC_ASSERT(only.empty() || only == "off" || only == "on", "--only is off or on");
  std::vector<size_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    size_t v = 0;
    MC_ASSERT(absl::SimpleAtoi(s, &v) && v > 0, "--sizes");
    sizes.push_back(v);
  }
  if (!only.empty()) {
    Env e(only == "on", SegmentBytes(*std::max_element(sizes.begin(), sizes.end()), keys));
    for (size_t size : sizes) {
      const Destination buf(size);
      Fill(e, buf, size, keys);
      std::vector<double> v;
      for (int r = 0; r < reps; ++r) {
        v.push_back(Measure(e, buf, size, keys, seconds).gets_per_s());
      }
      std::printf("%-10zu %14.0f gets/s (auth %s alone, median of %d)\n", size, Median(v),
                  only.c_str(), reps);
    }
    return 0;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  MC_ASSERT(::sched_getaffinity(0, sizeof(allowed), &allowed) == 0, "sched_getaffinity");
  std::printf("CPUs this process may run on: %d%s\n", CPU_COUNT(&allowed),
              CPU_COUNT(&allowed) == 1
                  ? " (every hop of a get stays on one core: throughput is CPU per get)"
                  : "");
  const char* b_name = control ? "off (2nd)" : "auth on";
  const std::string renewal =
      pairs_per_env == 1 ? "for every pair" : absl::StrCat("every ", pairs_per_env, " pairs");
  std::printf(
      "%-10s %12s %12s %8s %10s %10s %8s   %s\n  (medians of %d pairs of %.2f s; environments "
      "built afresh %s, built and measured in alternating order)\n",
      "size", "off gets/s", b_name, "ratio", "off cpu us", "cpu us", "ratio",
      "95% intervals of the two ratios", reps, seconds, renewal.c_str());
  for (size_t size : sizes) {
    const uint64_t segment = SegmentBytes(size, keys);
    const Destination buf(size);
    std::vector<double> a, b, ratio, a_cpu, b_cpu, cpu_ratio, a_user, b_user;
    // x: "off"; y: "on" (or, with --control, a second "off").
    std::unique_ptr<Env> x, y;
    for (int r = 0; r < reps; ++r) {
      // Fresh environments every --pairs_per_env pairs. Which is built and
      // filled first and which is measured first alternate, so that neither
      // the order in memory, the order of first use nor drift in the
      // machine's load favours one.
      if (r % pairs_per_env == 0) {
        x.reset();
        y.reset();
        const int generation = r / pairs_per_env;
        const bool x_first = generation % 2 == 0;
        if (x_first) {
          x = std::make_unique<Env>(false, segment);
          y = std::make_unique<Env>(!control, segment);
        } else {
          y = std::make_unique<Env>(!control, segment);
          x = std::make_unique<Env>(false, segment);
        }
        Fill(x_first ? *x : *y, buf, size, keys);
        Fill(x_first ? *y : *x, buf, size, keys);
      }
      const bool off_first = r % 2 == 0;
      // In slices, alternating (x y y x x y ...): slow drift within the pair hits both.
      Sample rx, ry;
      for (int k = 0; k < slices; ++k) {
        if ((k % 2 == 0) == off_first) {
          rx.Add(Measure(*x, buf, size, keys, seconds / slices));
          ry.Add(Measure(*y, buf, size, keys, seconds / slices));
        } else {
          ry.Add(Measure(*y, buf, size, keys, seconds / slices));
          rx.Add(Measure(*x, buf, size, keys, seconds / slices));
        }
      }
      a.push_back(rx.gets_per_s());
      b.push_back(ry.gets_per_s());
      ratio.push_back(ry.gets_per_s() / rx.gets_per_s());
      a_cpu.push_back(rx.cpu_us_per_get());
      b_cpu.push_back(ry.cpu_us_per_get());
      cpu_ratio.push_back(ry.cpu_us_per_get() / rx.cpu_us_per_get());
      a_user.push_back(rx.user_us_per_get());
      b_user.push_back(ry.user_us_per_get());
    }
    const auto [lo, hi] = MedianInterval(ratio);
    const auto [cpu_lo, cpu_hi] = MedianInterval(cpu_ratio);
    std::printf("%-10zu %12.0f %12.0f %8.3f %10.1f %10.1f %8.3f   [%.3f, %.3f] [%.3f, %.3f]\n",
                size, Median(a), Median(b), Median(ratio), Median(a_cpu), Median(b_cpu),
                Median(cpu_ratio), lo, hi, cpu_lo, cpu_hi);
    std::printf("%-10s %12s %12s %8s %10.1f %10.1f   (of the CPU us: user time)\n", "", "", "", "",
                Median(a_user), Median(b_user));
  }
  std::printf(
      "ratio: median of the per-pair ratios (throughput: on/off, 1 - cost; CPU: on/off, 1 + "
      "cost)\n");
  return 0;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::Run();
}
