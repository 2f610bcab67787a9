// network_compression_bench: puts and gets of bf16 KV through the store over a
// shaped link, with ClientOptions::network_compression off, auto and always,
// in one run (docs/client.md, "Compression on the network path").
//
// Per rate: a LinkLab (tools/qos_arbiter_bench/link_lab.h: two network
// namespaces joined by a veth pair shaped with htb at the rate, both
// directions); the master (in process, InProcessChannel: its RPCs do not
// cross the link) and a worker whose TCP transport listens in the server
// namespace; three clients (TCP only) made in the client namespace, one per
// mode. Threads take the namespace of the thread that creates them, so the
// worker's and each client's sockets and threads stay in their namespace.
// Rate 0: no lab, 127.0.0.1 in this namespace (unlimited loopback).
//
// Each rep puts --values values of --value_kib KiB of synthetic bf16 KV
// (compress/synthetic_kv.h), one Put each, then reads each back with GetInto
// (checked against the original), then removes them; modes take turns within
// a rep. Prints per rate and mode the median over reps of raw GB/s (value
// bytes / wall time) for puts and gets, and the ratio against "off" of the
// same run. Needs root.
//
//   bazel run -c opt //tools/bench:network_compression_bench -- --rates_mbit=0,1000,10000
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/compress/synthetic_kv.h"
#include "mooncake/store/client.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/worker/worker.h"
#include "tools/qos_arbiter_bench/link_lab.h"

namespace mooncake {
namespace {

using StoreClient = client::Client<rpc::InProcessChannel>;
using StoreWorker = worker::Worker<rpc::InProcessChannel>;
namespace proto = ::mooncake::store::proto;

struct Flags {
  std::vector<int> rates_mbit = {0, 1000, 10000};
  size_t value_kib = 1024;
  size_t values = 32;
  int reps = 5;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view name) -> std::optional<std::string_view> {
      if (!a.starts_with(name)) return std::nullopt;
      return a.substr(name.size());
    };
    if (auto v = value("--rates_mbit=")) {
      f->rates_mbit.clear();
      for (absl::string_view r : absl::StrSplit(AbslView(*v), ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(r, &n) || n < 0) return false;
        f->rates_mbit.push_back(n);
      }
    } else if (auto v = value("--value_kib=")) {
      if (!absl::SimpleAtoi(AbslView(*v), &f->value_kib) || f->value_kib < 4) return false;
    } else if (auto v = value("--values=")) {
      if (!absl::SimpleAtoi(AbslView(*v), &f->values) || f->values == 0) return false;
    } else if (auto v = value("--reps=")) {
      if (!absl::SimpleAtoi(AbslView(*v), &f->reps) || f->reps <= 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Moves the calling thread into a network namespace (by fd) or dies.
void EnterNetns(int fd) {
  if (::setns(fd, CLONE_NEWNET) != 0) {
    std::perror("setns");
    std::exit(1);
  }
}
int OpenNamedNetns(const std::string& name) {
  const int fd = ::open(absl::StrCat("/var/run/netns/", name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror("open netns");
    std::exit(1);
  }
  return fd;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

struct Mode {
  const char* name;
  client::NetworkCompression mode;
};
constexpr Mode kModes[] = {{"off", client::NetworkCompression::kOff},
                           {"auto", client::NetworkCompression::kAuto},
                           {"always", client::NetworkCompression::kAlways}};

struct Result {
  std::vector<double> put_gbps, get_gbps, stored_ratio;
  uint64_t compressed_puts = 0;
  uint64_t measured_link = 0;
};

int RunRate(const Flags& f, int rate_mbit, const std::vector<std::string>& values,
            const proto::TensorMeta& tensor) {
  const int home = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  std::unique_ptr<qos_bench::LinkLab> lab;
  std::string bind = "127.0.0.1";
  if (rate_mbit > 0) {
    auto l = qos_bench::LinkLab::Create({.rate_mbit = rate_mbit});
    if (!l.ok()) {
      std::fprintf(stderr, "link lab: %s\n", std::string(l.status().message()).c_str());
      return 1;
    }
    lab = std::move(*l);
    bind = lab->server_ip();
  }
  FakeClock clock(1'000'000'000);  // no lease or TTL runs out mid-run
  auto master = master::Master<>::Create(master::MasterOptions{}, &clock);
  MC_ASSERT(master.ok(), "master");
  master::MasterService<master::Master<>> service(master->get(), {});
  rpc::ServiceRegistry registry;
  MC_ASSERT(service.Register(&registry).ok(), "service");
  rpc::InProcessChannel channel(&registry);

  std::unique_ptr<StoreWorker> worker;
  {
    int fd = -1;
    if (lab) EnterNetns(fd = OpenNamedNetns(lab->server_ns()));
    worker::WorkerOptions wo;
    wo.segment_bytes = std::max<uint64_t>(256 << 20, 2 * f.values * f.value_kib * 1024);
    wo.heartbeat_thread = false;
    wo.tcp_bind_host = bind;
    wo.host_id = "server";
    wo.serve_shm = false;
    auto w = StoreWorker::Start(wo, &channel);
    if (!w.ok()) {
      std::fprintf(stderr, "worker: %s\n", std::string(w.status().message()).c_str());
      return 1;
    }
    worker = std::move(*w);
    if (fd >= 0) ::close(fd);
  }
  std::vector<std::unique_ptr<StoreClient>> clients;
  {
    int fd = -1;
    if (lab) EnterNetns(fd = OpenNamedNetns(lab->client_ns()));
    for (const Mode& m : kModes) {
      client::ClientOptions o;
      o.host_id = "client";
      o.use_local = false;
      o.use_shm = false;
      o.network_compression = m.mode;
      auto c = StoreClient::Create(o, &channel);
      MC_ASSERT(c.ok(), "client");
      clients.push_back(std::move(*c));
    }
    if (fd >= 0) ::close(fd);
  }
  // This thread stays in the client namespace while it drives the clients.
  const size_t value_bytes = values.front().size();
  const double total = static_cast<double>(value_bytes * values.size());
  std::vector<Result> results(std::size(kModes));
  std::string buf(value_bytes, '\0');
  // One unmeasured pass per client: connections, and auto's first estimate.
  for (int rep = -1; rep < f.reps; ++rep) {
    for (size_t m = 0; m < std::size(kModes); ++m) {
      StoreClient& c = *clients[m];
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < values.size(); ++i) {
        const absl::Status s =
            c.Put(absl::StrCat(kModes[m].name, i), values[i], {.tensor = &tensor});
        MC_ASSERT(s.ok(), "put failed");
      }
      const auto t1 = std::chrono::steady_clock::now();
      uint64_t stored = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        const std::string key = absl::StrCat(kModes[m].name, i);
        auto n = c.GetInto(key, buf.data(), buf.size());
        MC_ASSERT(n.ok() && *n == value_bytes && buf == values[i], "get returned other bytes");
      }
      const auto t2 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < values.size(); ++i) {
        const std::string key = absl::StrCat(kModes[m].name, i);
        stored += *c.GetSize(key);
        MC_ASSERT(c.Remove(key).ok(), "remove");
      }
      if (rep < 0) continue;
      results[m].put_gbps.push_back(total / std::chrono::duration<double>(t1 - t0).count() / 1e9);
      results[m].get_gbps.push_back(total / std::chrono::duration<double>(t2 - t1).count() / 1e9);
      results[m].stored_ratio.push_back(total / static_cast<double>(stored));
    }
  }
  const std::string link = rate_mbit > 0
                               ? absl::StrCat(rate_mbit, " Mbit/s (htb, veth between two netns)")
                               : "unlimited loopback (127.0.0.1)";
  std::printf("\nlink: %s\n", link.c_str());
  std::printf("%-7s %10s %10s %9s %9s %7s %8s %12s\n", "mode", "put GB/s", "get GB/s", "put x",
              "get x", "ratio", "packed", "link est");
  const double put_off = Median(results[0].put_gbps), get_off = Median(results[0].get_gbps);
  for (size_t m = 0; m < std::size(kModes); ++m) {
    const client::ClientStats st = clients[m]->stats();
    const double put = Median(results[m].put_gbps), get = Median(results[m].get_gbps);
    std::printf("%-7s %10.3f %10.3f %9.2f %9.2f %7.3f %8llu %9.2f GB/s\n", kModes[m].name, put, get,
                put / put_off, get / get_off, Median(results[m].stored_ratio),
                static_cast<unsigned long long>(st.compressed_puts),
                static_cast<double>(st.measured_link_bytes_per_s) / 1e9);
  }
  clients.clear();
  worker.reset();
  EnterNetns(home);
  ::close(home);
  return 0;
}

int Main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: network_compression_bench [--rates_mbit=0,1000,10000] "
                 "[--value_kib=1024] [--values=32] [--reps=5]\n");
    return 2;
  }
  double load[3] = {};
  (void)::getloadavg(load, 3);
  std::printf(
      "network_compression_bench: %zu x %zu KiB bf16 KV (synthetic) per mode and rep, %d reps "
      "(medians); cpu: %s x %ld; load %.2f %.2f %.2f\n"
      "GB/s: raw value bytes / wall time, one Put or GetInto at a time; x: against off in the "
      "same run; ratio: raw / stored bytes; packed: puts stored compressed; link est: the "
      "client's measured transfer throughput\n",
      f.values, f.value_kib, f.reps, CpuModel().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN), load[0],
      load[1], load[2]);
  std::vector<std::string> values;
  for (size_t i = 0; i < f.values; ++i) {
    const std::vector<std::byte> v =
        compress::SyntheticKvBytes(f.value_kib * 1024, compress::DType::kBFloat16, i + 1);
    values.emplace_back(reinterpret_cast<const char*>(v.data()), v.size());
  }
  proto::TensorMeta tensor;
  tensor.set_model("bench");
  tensor.set_dtype(proto::DTYPE_BF16);
  tensor.add_shape(f.value_kib * 1024 / 2);
  for (const int rate : f.rates_mbit) {
    if (int rc = RunRate(f, rate, values, tensor); rc != 0) return rc;
  }
  return 0;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) { return mooncake::Main(argc, argv); }
