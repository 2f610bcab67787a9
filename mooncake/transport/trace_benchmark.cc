// trace_benchmark: what tracing costs the transfer path. The same GET-like
// workload (each client thread Submits one READ of `size` bytes through a
// Router over TCP and Waits for it, again and again, for `seconds`) runs with
// tracing off and on, interleaved (off/on, then on/off, ...), `reps` pairs
// per size. Prints the median GB/s and GET/s of each mode and the median of
// the per-pair ratios on/off (the target: >= 0.98, i.e. <= 2% overhead), and
// the process CPU time per GET, which contention from other work skews less.
//
//   bazel run -c opt //mooncake/transport:trace_benchmark --
//     [--reps=7] [--seconds=0.5] [--clients=1] [--sizes=65536,1048576]
//     [--dump=/tmp/mooncake_trace.json]
//
// --dump then writes a traced run of 0.1 s per size as Chrome JSON.
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/trace.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {
namespace {

struct Flags {
  int reps = 7;
  double seconds = 0.5;
  int clients = 1;
  std::vector<uint64_t> sizes = {64 << 10, 1 << 20};
  std::string dump;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::unique_ptr<Router> TcpRouter() {
  auto tcp = TcpTransport::Create({});
  MC_ASSERT(tcp.ok(), "TcpTransport::Create failed");
  auto router = Router::Create({}, std::move(*tcp));
  MC_ASSERT(router.ok(), "Router::Create failed");
  return std::move(*router);
}

// One owner router serving a segment, one requester router per client.
class Fixture {
 public:
  Fixture(int clients, uint64_t size_max) : memory_(size_max * kValues), owner_(TcpRouter()) {
    for (size_t i = 0; i < memory_.size(); ++i) memory_[i] = static_cast<std::byte>(i * 131);
    auto seg = owner_->RegisterMemory(memory_.data(), memory_.size(), MemoryLocation::HostDram());
    MC_ASSERT(seg.ok(), "RegisterMemory failed");
    for (int c = 0; c < clients; ++c) {
      Client cl;
      cl.router = TcpRouter();
      auto remote = cl.router->OpenSegment(owner_->LocalEndpoint(), seg->id);
      MC_ASSERT(remote.ok(), "OpenSegment failed");
      cl.handle = remote->handle;
      cl.dst.resize(size_max);
      clients_.push_back(std::move(cl));
    }
  }

  // GETs of `size` bytes on every client for `seconds`: total bytes moved.
  uint64_t Run(uint64_t size, double seconds) {
    std::atomic<uint64_t> bytes{0};
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    std::vector<std::thread> threads;
    for (Client& cl : clients_) {
      threads.emplace_back([&cl, &bytes, size, end] {
        uint64_t moved = 0;
        for (uint64_t i = 0; absl::Now() < end; ++i) {
          const TransferRequest req{OpCode::kRead, cl.dst.data(), cl.handle, (i % kValues) * size,
                                    size};
          auto id = cl.router->Submit({&req, 1});
          MC_ASSERT(id.ok(), "Submit failed");
          auto r = cl.router->Wait(*id, absl::Now() + absl::Seconds(30));
          MC_ASSERT(r.ok() && r->ok(), "GET failed");
          moved += size;
        }
        bytes.fetch_add(moved, std::memory_order_relaxed);  // relaxed: joined below
      });
    }
    for (auto& t : threads) t.join();
    return bytes.load(std::memory_order_relaxed);
  }

 private:
  static constexpr uint64_t kValues = 16;  // distinct values read in turn
  struct Client {
    std::unique_ptr<Router> router;
    SegmentHandle handle = 0;
    std::vector<std::byte> dst;
  };
  std::vector<std::byte> memory_;
  std::unique_ptr<Router> owner_;
  std::vector<Client> clients_;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&](std::string_view name) -> const char* {
      return a.starts_with(name) ? argv[i] + name.size() : nullptr;
    };
    if (const char* v = value("--reps=")) {
      f.reps = std::atoi(v);
    } else if (const char* v = value("--seconds=")) {
      f.seconds = std::atof(v);
    } else if (const char* v = value("--clients=")) {
      f.clients = std::atoi(v);
    } else if (const char* v = value("--dump=")) {
      f.dump = v;
    } else if (const char* v = value("--sizes=")) {
      f.sizes.clear();
      for (char* p = const_cast<char*>(v); *p != '\0'; p += *p == ',' ? 1 : 0) {
        char* next = nullptr;
        const uint64_t size = std::strtoull(p, &next, 10);
        if (next == p || size == 0) {
          std::fprintf(stderr, "bad --sizes=%s\n", v);
          std::exit(2);
        }
        f.sizes.push_back(size);
        p = next;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (f.reps < 1 || f.seconds <= 0 || f.clients < 1 || f.sizes.empty()) {
    std::fprintf(stderr, "--reps, --seconds, --clients and --sizes must be positive\n");
    std::exit(2);
  }
  return f;
}

void PrintMachine() {
  utsname u{};
  ::uname(&u);
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;
  std::printf("machine: %s %s, %ld cpus, load %.2f %.2f %.2f\n", u.sysname, u.release,
              ::sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
}

// User + system CPU time of the whole process (both ends of every GET).
double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// ns per span on this thread, recorded with tracing `on` (off: the flag
// check alone), over as many spans as one ring holds.
double SpanCostNs(bool on) {
  trace::Enable(on);
  const int64_t start = trace::NowNs();
  for (uint32_t i = 0; i < trace::kRingEvents; ++i) {
    trace::Scope span("bench.span", "bench", i, i, 1);
  }
  const int64_t end = trace::NowNs();
  trace::Enable(false);
  return static_cast<double>(end - start) / trace::kRingEvents;
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  PrintMachine();
  std::printf(
      "workload: %d client(s), each a Router over TCP (loopback) doing Submit(1 READ) + Wait; "
      "%d off/on pairs of %.2f s per size\n",
      flags.clients, flags.reps, flags.seconds);
  const uint64_t size_max = *std::max_element(flags.sizes.begin(), flags.sizes.end());
  SpanCostNs(true);  // the ring's first use allocates it
  std::printf("span cost (trace::Scope, this thread): off %.1f ns, on %.1f ns\n", SpanCostNs(false),
              SpanCostNs(true));
  Fixture fixture(flags.clients, size_max);
  for (const uint64_t size : flags.sizes) {
    fixture.Run(size, flags.seconds / 2);  // warm-up: connections, page faults
    std::vector<double> off_gbps, on_gbps, ratios, cpu_off, cpu_on, cpu_ratios;
    for (int rep = 0; rep < flags.reps; ++rep) {
      double gbps[2] = {0, 0};    // [off, on]
      double cpu_us[2] = {0, 0};  // CPU microseconds per GET
      // Alternate which mode goes first, so drift does not favour one.
      for (const bool on : {rep % 2 == 1, rep % 2 == 0}) {
        const double cpu0 = ProcessCpuSeconds();
        trace::Enable(on);
        const uint64_t bytes = fixture.Run(size, flags.seconds);
        trace::Enable(false);
        gbps[on ? 1 : 0] = static_cast<double>(bytes) / flags.seconds / 1e9;
        cpu_us[on ? 1 : 0] =
            (ProcessCpuSeconds() - cpu0) * 1e6 / (static_cast<double>(bytes) / size);
      }
      off_gbps.push_back(gbps[0]);
      on_gbps.push_back(gbps[1]);
      ratios.push_back(gbps[1] / gbps[0]);
      cpu_off.push_back(cpu_us[0]);
      cpu_on.push_back(cpu_us[1]);
      cpu_ratios.push_back(cpu_us[1] / cpu_us[0]);
    }
    const double off = Median(off_gbps), on = Median(on_gbps);
    const double min_ratio = *std::min_element(ratios.begin(), ratios.end());
    const double max_ratio = *std::max_element(ratios.begin(), ratios.end());
    std::printf(
        "size %8llu B: off %.3f GB/s (%.0f GET/s)  on %.3f GB/s (%.0f GET/s)  "
        "ratio on/off: median of pairs %.3f (range %.3f-%.3f), of medians %.3f\n",
        static_cast<unsigned long long>(size), off, off * 1e9 / static_cast<double>(size), on,
        on * 1e9 / static_cast<double>(size), Median(ratios), min_ratio, max_ratio, on / off);
    std::printf(
        "                CPU per GET (whole process): off %.2f us  on %.2f us  "
        "ratio on/off: median of pairs %.3f\n",
        Median(cpu_off), Median(cpu_on), Median(cpu_ratios));
    std::fflush(stdout);
  }
  if (!flags.dump.empty()) {
    // A fresh traced run of 0.1 s per size, alone in the dump.
    const int64_t start_ns = trace::NowNs();
    trace::Enable(true);
    uint64_t gets = 0;
    for (const uint64_t size : flags.sizes) gets += fixture.Run(size, 0.1) / size;
    trace::Enable(false);
    const trace::Snapshot snap = trace::Collect(absl::Nanoseconds(trace::NowNs() - start_ns));
    std::ofstream out(flags.dump);
    trace::WriteChromeJson(snap, out);
    out.close();
    std::printf(
        "trace: %zu spans (%.1f per GET, fewer if a ring wrapped) from %zu threads "
        "written to %s\n",
        snap.spans.size(), static_cast<double>(snap.spans.size()) / gets, snap.threads.size(),
        flags.dump.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace mooncake::transport

int main(int argc, char** argv) { return mooncake::transport::Main(argc, argv); }
