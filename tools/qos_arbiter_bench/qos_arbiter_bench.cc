// qos_arbiter_bench: does the cross-process ShmArbiter (mooncake/qos/
// shm_arbiter.h) keep a latency-critical reader's tail latency when a bulk
// process saturates a shared link, and what does bulk keep?
//
//   sudo bazel run -c opt //tools/qos_arbiter_bench -- --reps=3
//
// It builds a link (two network namespaces, a veth pair shaped with tbf at
// --rate_mbit with htb, or tbf), a TCP server in one namespace and two client PROCESSES in the
// other: bulk (reads in --chunk_bytes requests, --bulk_inflight_bytes
// outstanding) and critical (64 KiB reads, one at a time, --critical_rate per
// second). Phases, each --seconds after --warmup_s, repeated --reps times:
//   unloaded          critical alone                 (the baseline)
//   bulk alone        bulk alone, no arbiter          (the link's bulk rate)
//   bulk alone+arb    bulk alone, arbiter
//   loaded            both, no arbiter
//   loaded+arb        both, each request acquires from the arbiter first
// and prints medians over reps, the ratios and whether the targets are met:
// critical P99 loaded+arb <= 1.5x unloaded, and bulk loaded+arb >= 0.8x
// bulk alone. Roles --role=server|bulk|critical are the same binary, started
// inside the namespaces by the runner.
//
// --engine=router (default): the server is a TcpTransport owner and each
// client a transport::Router over TCP whose arbiter option takes the grants
// per slice (router_traffic.h): the transfer engine's own integration.
// --engine=socket: the clients speak a minimal protocol over plain sockets
// and acquire from the arbiter themselves (traffic.h).
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/qos/shm_arbiter.h"
#include "tools/qos_arbiter_bench/link_lab.h"
#include "tools/qos_arbiter_bench/router_traffic.h"
#include "tools/qos_arbiter_bench/traffic.h"

namespace mooncake::qos_bench {
namespace {

struct Flags {
  std::string role = "runner";
  std::string engine = "router";  // or "socket"
  int reps = 3;
  double seconds = 5;
  double warmup_s = 0.5;
  int rate_mbit = 1000;
  double critical_rate = 200;
  uint64_t critical_bytes = 64 << 10;
  uint64_t chunk_bytes = 8 << 10;
  uint64_t bulk_inflight_bytes = 4 << 20;
  double arbiter_fraction = 0.9;  // of the tbf rate: tbf also counts headers
  uint64_t arbiter_burst_bytes = 128 << 10;
  uint64_t arbiter_bulk_inflight_bytes = 24 << 10;  // 0: unbounded
  std::string tbf_latency = "20ms";
  std::string tbf_burst = "16kb";  // the shaper's burst (htb or tbf)
  std::string shaper = "htb";
  // Client roles.
  std::string server_ip;
  int port = 18642;
  int nice = -10;  // niceness of the server and clients
  std::string arbiter_link;
  uint64_t arbiter_capacity = 0;
};

bool ParseFlag(std::string_view arg, Flags& f) {
  const size_t eq = arg.find('=');
  if (arg.substr(0, 2) != "--" || eq == std::string_view::npos) return false;
  const std::string key(arg.substr(2, eq - 2));
  const std::string val(arg.substr(eq + 1));
  const std::map<std::string, std::string*> strings = {{"role", &f.role},
                                                       {"engine", &f.engine},
                                                       {"tbf_latency", &f.tbf_latency},
                                                       {"tbf_burst", &f.tbf_burst},
                                                       {"shaper", &f.shaper},
                                                       {"server_ip", &f.server_ip},
                                                       {"arbiter_link", &f.arbiter_link}};
  const std::map<std::string, double*> doubles = {{"seconds", &f.seconds},
                                                  {"warmup_s", &f.warmup_s},
                                                  {"critical_rate", &f.critical_rate},
                                                  {"arbiter_fraction", &f.arbiter_fraction}};
  const std::map<std::string, int*> ints = {
      {"reps", &f.reps}, {"nice", &f.nice}, {"rate_mbit", &f.rate_mbit}, {"port", &f.port}};
  const std::map<std::string, uint64_t*> u64s = {
      {"critical_bytes", &f.critical_bytes},
      {"chunk_bytes", &f.chunk_bytes},
      {"bulk_inflight_bytes", &f.bulk_inflight_bytes},
      {"arbiter_burst_bytes", &f.arbiter_burst_bytes},
      {"arbiter_bulk_inflight_bytes", &f.arbiter_bulk_inflight_bytes},
      {"arbiter_capacity", &f.arbiter_capacity}};
  if (auto it = strings.find(key); it != strings.end()) {
    *it->second = val;
    return true;
  }
  if (auto it = doubles.find(key); it != doubles.end()) return absl::SimpleAtod(val, it->second);
  if (auto it = ints.find(key); it != ints.end()) return absl::SimpleAtoi(val, it->second);
  if (auto it = u64s.find(key); it != u64s.end()) return absl::SimpleAtoi(val, it->second);
  return false;
}

ClientOptions ClientFlags(const Flags& f) {
  ClientOptions o;
  o.server_ip = f.server_ip;
  o.port = static_cast<uint16_t>(f.port);
  o.warmup_s = f.warmup_s;
  o.seconds = f.seconds;
  o.arbiter_link = f.arbiter_link;
  o.arbiter_capacity = f.arbiter_capacity;
  o.arbiter_burst_bytes = f.arbiter_burst_bytes;
  o.arbiter_bulk_inflight_bytes = f.arbiter_bulk_inflight_bytes;
  return o;
}

std::string Machine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  utsname u{};
  ::uname(&u);
  return absl::StrCat(model, ", ", ::sysconf(_SC_NPROCESSORS_ONLN), " CPUs, Linux ", u.release);
}

// key=value lines of a client's output.
std::map<std::string, double> ParseOutput(const std::string& out) {
  std::map<std::string, double> kv;
  for (absl::string_view piece : absl::StrSplit(out, '\n')) {
    const std::string line(StdView(piece));
    const size_t eq = line.find('=');
    double v = 0;
    if (eq != std::string::npos && absl::SimpleAtod(line.substr(eq + 1), &v)) {
      kv[line.substr(0, eq)] = v;
    }
  }
  return kv;
}

struct Phase {
  const char* name;
  bool bulk;
  bool critical;
  bool arbiter;
};

constexpr Phase kPhases[] = {
    {"unloaded", false, true, false},      {"bulk alone", true, false, false},
    {"bulk alone+arb", true, false, true}, {"loaded", true, true, false},
    {"loaded+arb", true, true, true},
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

absl::Status RunPhase(const Flags& f, const LinkLab& lab, const std::string& self, const Phase& p,
                      const std::string& link, uint64_t capacity,
                      std::map<std::string, std::vector<double>>& results) {
  std::vector<std::string> common = {
      self,
      absl::StrCat("--engine=", f.engine),
      absl::StrCat("--server_ip=", lab.server_ip()),
      absl::StrCat("--port=", f.port),
      absl::StrCat("--seconds=", f.seconds),
      absl::StrCat("--warmup_s=", f.warmup_s),
      absl::StrCat("--arbiter_burst_bytes=", f.arbiter_burst_bytes),
      absl::StrCat("--arbiter_bulk_inflight_bytes=", f.arbiter_bulk_inflight_bytes),
  };
  if (p.arbiter) {
    common.push_back(absl::StrCat("--arbiter_link=", link));
    common.push_back(absl::StrCat("--arbiter_capacity=", capacity));
  }
  std::vector<std::pair<std::string, Child>> kids;
  auto start = [&](const std::string& role, std::vector<std::string> extra) -> absl::Status {
    std::vector<std::string> argv = common;
    argv.push_back("--role=" + role);
    argv.insert(argv.end(), extra.begin(), extra.end());
    absl::StatusOr<Child> c = Child::Start(LinkLab::In(lab.client_ns(), argv, f.nice));
    if (!c.ok()) return c.status();
    kids.emplace_back(role, std::move(*c));
    return absl::OkStatus();
  };
  if (p.bulk) {
    absl::Status s = start("bulk", {absl::StrCat("--chunk_bytes=", f.chunk_bytes),
                                    absl::StrCat("--bulk_inflight_bytes=", f.bulk_inflight_bytes)});
    if (!s.ok()) return s;
  }
  if (p.critical) {
    absl::Status s = start("critical", {absl::StrCat("--critical_rate=", f.critical_rate),
                                        absl::StrCat("--critical_bytes=", f.critical_bytes)});
    if (!s.ok()) return s;
  }
  for (auto& [role, child] : kids) {
    auto [rc, out] = child.Finish();
    if (rc != 0) {
      return absl::InternalError(absl::StrCat(p.name, ": ", role, " exited with ", rc, ": ", out));
    }
    for (const auto& [k, v] : ParseOutput(out)) results[absl::StrCat(p.name, "/", k)].push_back(v);
  }
  return absl::OkStatus();
}

int RunRunner(const Flags& f) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "cannot read /proc/self/exe\n");
    return 1;
  }
  self[n] = '\0';
  LinkLabOptions lo;
  lo.rate_mbit = f.rate_mbit;
  lo.latency = f.tbf_latency;
  lo.burst = f.tbf_burst;
  lo.shaper = f.shaper;
  absl::StatusOr<std::unique_ptr<LinkLab>> lab = LinkLab::Create(lo);
  if (!lab.ok()) {
    std::fprintf(stderr, "qos_arbiter_bench: %s\n", std::string(lab.status().message()).c_str());
    return lab.status().code() == absl::StatusCode::kPermissionDenied ? 2 : 1;
  }
  absl::StatusOr<Child> server = Child::Start(LinkLab::In(
      (*lab)->server_ns(),
      {self, "--role=server", absl::StrCat("--engine=", f.engine),
       absl::StrCat("--server_ip=", (*lab)->server_ip()), absl::StrCat("--port=", f.port)},
      f.nice));
  if (!server.ok()) {
    std::fprintf(stderr, "start server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string link = absl::StrCat("qos_bench.", ::getpid());
  const uint64_t capacity = static_cast<uint64_t>(f.rate_mbit * 1e6 / 8 * f.arbiter_fraction);
  std::map<std::string, std::vector<double>> results;
  for (int rep = 0; rep < f.reps; ++rep) {
    for (const Phase& p : kPhases) {
      (void)qos::ShmArbiter::Remove(link);
      absl::Status s = RunPhase(f, **lab, self, p, link, capacity, results);
      if (!s.ok()) {
        std::fprintf(stderr, "qos_arbiter_bench: %s\n", s.ToString().c_str());
        (void)qos::ShmArbiter::Remove(link);
        return 1;
      }
    }
  }
  (void)qos::ShmArbiter::Remove(link);
  server->Terminate();

  auto med = [&](const std::string& phase, const std::string& key) {
    return Median(results[phase + "/" + key]);
  };
  std::printf("engine: %s\n", f.engine == "router" ? "transport::Router over TcpTransport, "
                                                     "grants taken by the router per slice"
                                                   : "plain sockets, grants taken by the client");
  std::printf(
      "qos_arbiter_bench: link %s %d Mbit/s (burst %s, tbf latency %s), arbiter capacity "
      "%.1f MB/s (%.2f of the link), burst %llu B, bulk in flight <= %llu B\n",
      f.shaper.c_str(), f.rate_mbit, f.tbf_burst.c_str(), f.tbf_latency.c_str(), capacity / 1e6,
      f.arbiter_fraction, static_cast<unsigned long long>(f.arbiter_burst_bytes),
      static_cast<unsigned long long>(f.arbiter_bulk_inflight_bytes));
  std::printf("machine: %s; server and clients at nice %d\n", Machine().c_str(), f.nice);
  std::printf(
      "critical: %llu B reads at %.0f/s; bulk: %llu B requests, %llu B outstanding; "
      "medians over %d reps of %.1f s\n",
      static_cast<unsigned long long>(f.critical_bytes), f.critical_rate,
      static_cast<unsigned long long>(f.chunk_bytes),
      static_cast<unsigned long long>(f.bulk_inflight_bytes), f.reps, f.seconds);
  std::printf("%-16s %14s %14s %12s\n", "phase", "crit P50 us", "crit P99 us", "bulk MB/s");
  for (const Phase& p : kPhases) {
    const std::string c50 = p.critical ? absl::StrCat(med(p.name, "critical_p50_us")) : "-";
    const std::string c99 = p.critical ? absl::StrCat(med(p.name, "critical_p99_us")) : "-";
    const std::string bulk =
        p.bulk ? absl::StrCat(med(p.name, "bulk_bytes_per_s") / 1e6).substr(0, 7) : "-";
    std::printf("%-16s %14s %14s %12s\n", p.name, c50.c_str(), c99.c_str(), bulk.c_str());
  }
  const double unloaded99 = med("unloaded", "critical_p99_us");
  const double p99_noarb = med("loaded", "critical_p99_us") / unloaded99;
  const double p99_arb = med("loaded+arb", "critical_p99_us") / unloaded99;
  const double bulk_alone = med("bulk alone", "bulk_bytes_per_s");
  const double bulk_arb = med("loaded+arb", "bulk_bytes_per_s") / bulk_alone;
  const double bulk_arb_alone = med("bulk alone+arb", "bulk_bytes_per_s") / bulk_alone;
  std::printf(
      "critical P99 loaded / unloaded:      %.2fx (no arbiter), %.2fx (arbiter; target "
      "<= 1.5): %s\n",
      p99_noarb, p99_arb, p99_arb <= 1.5 ? "MET" : "NOT MET");
  std::printf(
      "bulk with arbiter / bulk alone:      %.2f (light critical; target >= 0.80): %s; "
      "%.2f without critical\n",
      bulk_arb, bulk_arb >= 0.8 ? "MET" : "NOT MET", bulk_arb_alone);
  return 0;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    if (!ParseFlag(argv[i], f)) {
      std::fprintf(stderr, "qos_arbiter_bench: unknown or malformed flag '%s'\n", argv[i]);
      return 2;
    }
  }
  if (f.engine != "socket" && f.engine != "router") {
    std::fprintf(stderr, "qos_arbiter_bench: --engine must be socket or router\n");
    return 2;
  }
  const bool router = f.engine == "router";
  absl::Status s;
  if (f.role == "runner") return RunRunner(f);
  if (f.role == "server") {
    s = router ? RunRouterOwner(f.server_ip, static_cast<uint16_t>(f.port))
               : Serve(static_cast<uint16_t>(f.port));
  } else if (f.role == "bulk") {
    const BulkOptions b{f.chunk_bytes, f.bulk_inflight_bytes};
    s = router ? RunRouterBulk(ClientFlags(f), b) : RunBulk(ClientFlags(f), b);
  } else if (f.role == "critical") {
    const CriticalOptions c{f.critical_bytes, f.critical_rate};
    s = router ? RunRouterCritical(ClientFlags(f), c) : RunCritical(ClientFlags(f), c);
  } else {
    s = absl::InvalidArgumentError("--role must be runner, server, bulk or critical");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "qos_arbiter_bench --role=%s: %s\n", f.role.c_str(), s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace mooncake::qos_bench

int main(int argc, char** argv) { return mooncake::qos_bench::Main(argc, argv); }
