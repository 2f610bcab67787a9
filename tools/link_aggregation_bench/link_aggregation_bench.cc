// link_aggregation_bench: does TcpTransport's link aggregation (several
// paths to one peer, docs/transport.md "Aggregation") turn two shaped links
// into ~2x one, and what does losing a link mid-batch cost?
//
//   sudo bazel run -c opt //tools/link_aggregation_bench -- --reps=5
//
// It builds two network namespaces joined by --links veth pairs (LinkLab,
// tools/qos_arbiter_bench/link_lab.h), each end shaped with htb at
// --rate_mbit, runs the owner (a TcpTransport listening on every link's
// address, advertising them all) in one namespace and the client in the
// other. The client READs batches of --batch_mib one-MiB requests, each rep
// timing one batch over one link (a single-path transport bound to link 0's
// address) and one over all links (a transport with one path per link), and
// prints medians, the ratio and the client's CPU use. Then the retry
// overhead: clean batches vs batches during which link 1 is taken down
// (`ip link set down`) a quarter of the way through; every batch's bytes
// are verified. Roles --role=owner|client are the same binary, started in
// the namespaces by the runner. Not root: prints SKIP and exits 0.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/transport/tcp_transport.h"
#include "tools/qos_arbiter_bench/link_lab.h"

namespace mooncake::link_bench {
namespace {

using qos_bench::Child;
using qos_bench::LinkLab;
using transport::TcpTransport;

struct Flags {
  std::string role = "runner";
  int reps = 5;
  int links = 2;
  int rate_mbit = 1000;
  int batch_mib = 64;
  int io_timeout_ms = 1000;  // how long a dead link takes to be noticed
  int port = 18743;
  // Client role.
  std::string owner_hosts;   // the owner's address per link, comma-separated
  std::string client_hosts;  // ours, per link
  std::string down_dev;      // the interface taken down in the fault phase
  uint64_t segment = 0;
};

bool ParseFlag(std::string_view arg, Flags& f) {
  const size_t eq = arg.find('=');
  if (arg.substr(0, 2) != "--" || eq == std::string_view::npos) return false;
  const std::string key(arg.substr(2, eq - 2));
  const std::string val(arg.substr(eq + 1));
  const std::map<std::string, std::string*> strings = {{"role", &f.role},
                                                       {"owner_hosts", &f.owner_hosts},
                                                       {"client_hosts", &f.client_hosts},
                                                       {"down_dev", &f.down_dev}};
  const std::map<std::string, int*> ints = {
      {"reps", &f.reps},           {"links", &f.links}, {"rate_mbit", &f.rate_mbit},
      {"batch_mib", &f.batch_mib}, {"port", &f.port},   {"io_timeout_ms", &f.io_timeout_ms}};
  if (auto it = strings.find(key); it != strings.end()) {
    *it->second = val;
    return true;
  }
  if (auto it = ints.find(key); it != ints.end()) return absl::SimpleAtoi(val, it->second);
  if (key == "segment") return absl::SimpleAtoi(val, &f.segment);
  return false;
}

// The owner's segment content, which the client recomputes to verify.
char PatternByte(size_t i) { return static_cast<char>(i * 131 + (i >> 12)); }

int RunOwner(const Flags& f) {
  TcpTransport::Options o;
  o.bind_host = "0.0.0.0";
  o.port = static_cast<uint16_t>(f.port);
  o.advertise_hosts = absl::StrSplit(f.owner_hosts, ',');
  auto t = TcpTransport::Create(o);
  if (!t.ok()) {
    std::fprintf(stderr, "owner: %s\n", t.status().ToString().c_str());
    return 1;
  }
  std::vector<char> mem(static_cast<size_t>(f.batch_mib) << 20);
  for (size_t i = 0; i < mem.size(); ++i) mem[i] = PatternByte(i);
  auto seg = (*t)->RegisterMemory(mem.data(), mem.size(), transport::MemoryLocation::HostDram());
  if (!seg.ok()) return 1;
  std::printf("segment %llu\n", static_cast<unsigned long long>(seg->id));
  std::fflush(stdout);
  for (;;) ::pause();  // killed by the runner
}

struct Client {
  std::unique_ptr<TcpTransport> t;
  std::string endpoint;
  transport::SegmentHandle handle = 0;
};

absl::StatusOr<Client> OpenClient(const Flags& f, std::vector<std::string> local,
                                  std::vector<std::string> owner) {
  TcpTransport::Options o;
  o.slice_bytes = 1 << 20;
  o.io_timeout = absl::Milliseconds(f.io_timeout_ms);
  for (const std::string& h : local) o.local_paths.push_back({h, 1});
  auto t = TcpTransport::Create(o);
  if (!t.ok()) return t.status();
  std::vector<std::string> addrs;
  for (const std::string& h : owner) addrs.push_back(absl::StrCat(h, ":", f.port));
  Client c{std::move(*t), absl::StrCat("tcp://", absl::StrJoin(addrs, ",")), 0};
  // The owner may still be starting.
  absl::StatusOr<transport::RemoteSegment> seg;
  for (int i = 0; i < 100; ++i) {
    seg = c.t->OpenSegment(c.endpoint, f.segment);
    if (seg.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (!seg.ok()) return seg.status();
  c.handle = seg->handle;
  return c;
}

// One batch of `mib` one-MiB READs; seconds, or a negative value when it
// failed or the bytes are wrong. `during` runs after Submit.
double TimedBatch(Client& c, std::vector<char>& buf, const std::vector<char>& expect,
                  const std::function<void()>& during = nullptr) {
  std::vector<transport::TransferRequest> reqs;
  for (size_t off = 0; off < buf.size(); off += 1 << 20) {
    reqs.push_back({transport::OpCode::kRead, buf.data() + off, c.handle, off, 1 << 20});
  }
  std::memset(buf.data(), 0, buf.size());
  const absl::Time start = absl::Now();
  auto batch = c.t->Submit(reqs);
  if (!batch.ok()) return -1;
  if (during) during();
  auto r = c.t->Wait(*batch, absl::Now() + absl::Seconds(60));
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!r.ok() || !r->ok()) {
    std::fprintf(stderr, "batch failed: %s\n",
                 (r.ok() ? r->FirstError() : r.status()).ToString().c_str());
    return -1;
  }
  if (std::memcmp(buf.data(), expect.data(), buf.size()) != 0) {
    std::fprintf(stderr, "batch bytes differ from the owner's\n");
    return -1;
  }
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int RunClient(const Flags& f) {
  const std::vector<std::string> local = absl::StrSplit(f.client_hosts, ',');
  const std::vector<std::string> owner = absl::StrSplit(f.owner_hosts, ',');
  auto one = OpenClient(f, {local[0]}, {owner[0]});
  auto all = OpenClient(f, local, owner);
  if (!one.ok() || !all.ok()) {
    std::fprintf(stderr, "client: %s\n",
                 (one.ok() ? all.status() : one.status()).ToString().c_str());
    return 1;
  }
  const size_t bytes = static_cast<size_t>(f.batch_mib) << 20;
  std::vector<char> buf(bytes), expect(bytes);
  for (size_t i = 0; i < bytes; ++i) expect[i] = PatternByte(i);
  // Warm-up: connections, slow start, and the paths' capacity estimates.
  for (int i = 0; i < 2; ++i) {
    if (TimedBatch(*one, buf, expect) < 0 || TimedBatch(*all, buf, expect) < 0) return 1;
  }
  std::vector<double> t_one, t_all, cpu_all;
  for (int rep = 0; rep < f.reps; ++rep) {
    const double a = TimedBatch(*one, buf, expect);
    const double cpu0 = CpuSeconds();
    const double b = TimedBatch(*all, buf, expect);
    if (a < 0 || b < 0) return 1;
    cpu_all.push_back((CpuSeconds() - cpu0) / b);
    t_one.push_back(a);
    t_all.push_back(b);
  }
  const double gb = bytes / 1e9;
  const double one_gbs = gb / Median(t_one), all_gbs = gb / Median(t_all);
  std::printf("%-28s %10s %10s\n", "", "GB/s", "batch ms");
  std::printf("%-28s %10.3f %10.1f\n", "one link", one_gbs, Median(t_one) * 1e3);
  std::printf("%-28s %10.3f %10.1f\n", absl::StrCat(f.links, " links (aggregated)").c_str(),
              all_gbs, Median(t_all) * 1e3);
  std::printf("aggregate / one link:        %.2fx (target >= 1.8): %s\n", all_gbs / one_gbs,
              all_gbs / one_gbs >= 1.8 ? "MET" : "NOT MET");
  std::printf("client CPU during aggregated batches: %.0f%% of one core\n", Median(cpu_all) * 100);
  for (const auto& s : all->t->PathStats(all->endpoint)) {
    std::printf("  path %-34s slices %6llu  capacity %.3f GB/s\n", s.name.c_str(),
                static_cast<unsigned long long>(s.slices), s.capacity_bytes_per_s / 1e9);
  }

  // Retry overhead: link 1 goes down a quarter of the way into a batch.
  std::vector<double> clean, faulted;
  const double expect_s = Median(t_all);
  uint64_t retries = 0;
  for (int rep = 0; rep < f.reps; ++rep) {
    const double c = TimedBatch(*all, buf, expect);
    const uint64_t retries0 = all->t->PathStats(all->endpoint)[1].retries;
    const double d = TimedBatch(*all, buf, expect, [&] {
      absl::SleepFor(absl::Seconds(expect_s / 4));
      (void)qos_bench::Run({"ip", "link", "set", "dev", f.down_dev, "down"});
    });
    retries += all->t->PathStats(all->endpoint)[1].retries - retries0;
    (void)qos_bench::Run({"ip", "link", "set", "dev", f.down_dev, "up"});
    if (c < 0 || d < 0) return 1;
    clean.push_back(c);
    faulted.push_back(d);
    // Back to both links before the next rep (the path's probe reconnects).
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!all->t->PathStats(all->endpoint)[1].up && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (int i = 0; i < 2; ++i) (void)TimedBatch(*all, buf, expect);
  }
  std::printf("clean batch:                 %.1f ms\n", Median(clean) * 1e3);
  std::printf("batch losing link 1 at 1/4:  %.1f ms (all bytes verified; %llu slices retried)\n",
              Median(faulted) * 1e3, static_cast<unsigned long long>(retries / f.reps));
  std::printf(
      "retry overhead:              %.1f ms, of which %d ms is the I/O timeout that "
      "detects the dead link\n",
      (Median(faulted) - Median(clean)) * 1e3, f.io_timeout_ms);
  return 0;
}

std::string Machine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return absl::StrCat(model, ", ", std::thread::hardware_concurrency(), " vCPU");
}

LinkLab* g_lab = nullptr;

void OnSignal(int) {
  if (g_lab != nullptr) {
    // Best effort on the way out: the namespaces must not outlive us.
    (void)std::system(absl::StrCat("ip netns del ", g_lab->server_ns(),
                                   " 2>/dev/null; ip netns del ", g_lab->client_ns(),
                                   " 2>/dev/null")
                          .c_str());
  }
  std::_Exit(130);
}

int RunRunner(const Flags& f, const std::string& self) {
  if (::geteuid() != 0) {
    std::printf("SKIP: link_aggregation_bench needs root (network namespaces, veth, tc)\n");
    return 0;
  }
  qos_bench::LinkLabOptions lo;
  lo.rate_mbit = f.rate_mbit;
  lo.links = f.links;
  auto lab = LinkLab::Create(lo);
  if (!lab.ok()) {
    std::fprintf(stderr, "link_aggregation_bench: %s\n", lab.status().ToString().c_str());
    return 1;
  }
  g_lab = lab->get();
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
  const std::string owner_hosts = absl::StrJoin((*lab)->server_ips(), ",");
  const std::vector<std::string> common = {self, absl::StrCat("--port=", f.port),
                                           absl::StrCat("--batch_mib=", f.batch_mib),
                                           "--owner_hosts=" + owner_hosts};
  std::vector<std::string> owner_argv = common;
  owner_argv.push_back("--role=owner");
  auto owner = Child::Start(LinkLab::In((*lab)->server_ns(), owner_argv, -5));
  if (!owner.ok()) return 1;
  std::vector<std::string> client_argv = common;
  for (const std::string& a :
       {std::string("--role=client"), absl::StrCat("--reps=", f.reps),
        absl::StrCat("--links=", f.links), absl::StrCat("--io_timeout_ms=", f.io_timeout_ms),
        "--client_hosts=" + absl::StrJoin((*lab)->client_ips(), ","),
        "--down_dev=" + (*lab)->client_devs()[1],
        std::string("--segment=1")}) {  // the owner registers one segment: id 1
    client_argv.push_back(a);
  }
  auto client = Child::Start(LinkLab::In((*lab)->client_ns(), client_argv, -5));
  if (!client.ok()) return 1;
  auto [rc, out] = client->Finish();
  std::printf(
      "link_aggregation_bench: %d x %d Mbit/s veth links (htb), %d MiB READ batches of "
      "1 MiB requests, medians of %d reps\n",
      f.links, f.rate_mbit, f.batch_mib, f.reps);
  std::printf("%s", out.c_str());
  std::printf("machine: %s\n", Machine().c_str());
  owner->Terminate();
  g_lab = nullptr;
  return rc;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    if (!ParseFlag(argv[i], f)) {
      std::fprintf(stderr, "link_aggregation_bench: unknown or malformed flag '%s'\n", argv[i]);
      return 2;
    }
  }
  if (f.links < 2 || f.links > 8 || f.reps < 1 || f.batch_mib < 1) {
    std::fprintf(stderr,
                 "link_aggregation_bench: --links in [2, 8], --reps and --batch_mib >= 1\n");
    return 2;
  }
  if (f.role == "owner") return RunOwner(f);
  if (f.role == "client") return RunClient(f);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  return RunRunner(f, std::string(self, static_cast<size_t>(n)));
}

}  // namespace
}  // namespace mooncake::link_bench

int main(int argc, char** argv) { return mooncake::link_bench::Main(argc, argv); }
