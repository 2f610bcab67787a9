// What HA costs the metadata master: the same workload, in one run, against
// a plain master (HA off) and a one-node HaMaster on a real etcd (HA on).
//
//   bazel run -c opt //mooncake/store/ha:ha_benchmark -- --seconds=3 --reps=3
//
// HA off: Master<> + MasterService on an RpcServer (127.0.0.1, any port),
// with its Tick timer. HA on: HaMaster<Master<>> (ha_master.h) on its own
// RpcServer, against an etcd child process (testing/etcd_process.h), once it
// leads. Each mounts one big segment (the master only does bookkeeping, so
// its bytes exist only as numbers) and is driven by --clients threads, each
// with its own TcpChannel:
//
//   closed     PutStart + PutEnd of a --object_bytes object under a unique
//              key, one pair at a time per client: pairs/s over all clients
//   pipelined  --depth pairs in flight per client (rpc::CallAsync; PutEnd is
//              issued from PutStart's callback, the next pair from PutEnd's):
//              pairs completed before the stop, per second
//   gets       GetReplicas of keys the closed runs put, one at a time per
//              client: gets/s (leases released after each run, untimed)
//
// With HA, PutEnd is answered once its oplog entry is stored in etcd; PutStart
// and GetReplicas are answered at once (ha_master.h). Every figure is the
// median of --reps runs of --seconds; the runs alternate off, on, off, on...
// so both see the same machine. Nothing is removed: the key space grows by
// what is put, and the segment is large enough that nothing is evicted (a
// failed call ends the benchmark with its status).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/ha/ha_master.h"
#include "mooncake/store/ha/testing/etcd_process.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"

ABSL_FLAG(double, seconds, 3, "length of one run");
ABSL_FLAG(int, reps, 3, "runs per figure (median)");
ABSL_FLAG(int, clients, 8, "client threads, each with its own TcpChannel");
ABSL_FLAG(int, depth, 32, "put pairs in flight per client in the pipelined runs");
ABSL_FLAG(uint64_t, object_bytes, 4096, "size of every object put");
ABSL_FLAG(uint64_t, segment_gib, 64, "size of the one mounted segment (bookkeeping only)");
ABSL_FLAG(std::string, json, "", "write the medians to this file as JSON");
ABSL_FLAG(int, batches_in_flight, 1,
          "HA on: oplog batches being stored at once (OplogWriterOptions)");

namespace mooncake::ha {
namespace {

namespace sp = ::mooncake::store::proto;
using M = master::Master<>;
using SteadyClock = std::chrono::steady_clock;

// Keys each client keeps from its closed runs for the gets (bounds memory).
constexpr size_t kGetKeysPerClientMax = 16384;
constexpr size_t kReleaseBatchMax = 8192;

[[noreturn]] void Die(const absl::Status& s, std::string_view what) {
  std::fprintf(stderr, "ha_benchmark: %s: %s\n", std::string(what).c_str(), s.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

double Median(std::vector<double> v) {
  MC_ASSERT(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// ---- The two masters ----------------------------------------------------------

master::MasterOptions MasterOpts() {
  master::MasterOptions mo;
  mo.put_timeout_ms = 30'000;
  return mo;
}

// HA off: the plain master as master_service.h serves it.
struct PlainMaster {
  std::unique_ptr<M> master;
  std::unique_ptr<master::MasterService<M>> service;
  rpc::ServiceRegistry registry;
  std::unique_ptr<rpc::RpcServer> server;

  absl::Status Start() {
    ASSIGN_OR_RETURN(master, M::Create(MasterOpts()));
    service =
        std::make_unique<master::MasterService<M>>(master.get(), master::MasterServiceOptions{});
    RETURN_IF_ERROR(service->Register(&registry));
    server = std::make_unique<rpc::RpcServer>(&registry, rpc::RpcServerOptions{.port = 0});
    RETURN_IF_ERROR(server->Start());
    service->StartTicker();
    return absl::OkStatus();
  }
  void Stop() {
    if (service != nullptr) service->StopTicker();
    if (server != nullptr) server->Stop();
  }
};

// HA on: one HaMaster on a real etcd, as ha_master_test.cc starts one.
struct HaNode {
  std::unique_ptr<EtcdProcess> etcd;
  MetricsRegistry metrics;
  std::unique_ptr<HaMaster<M>> ha;
  std::unique_ptr<rpc::ServiceRegistry> registry;
  std::unique_ptr<rpc::RpcServer> server;

  absl::Status Start() {
    ASSIGN_OR_RETURN(etcd, EtcdProcess::Start());
    HaMasterOptions o;
    o.etcd = etcd->endpoint();
    o.cluster = "bench";
    o.writer.batches_in_flight = absl::GetFlag(FLAGS_batches_in_flight);
    ha = std::make_unique<HaMaster<M>>(
        o,
        [this]() -> absl::StatusOr<std::unique_ptr<M>> {
          return M::Create(MasterOpts(), &MonotonicClock::Get(), &metrics);
        },
        &metrics);
    registry = std::make_unique<rpc::ServiceRegistry>(&metrics);
    RETURN_IF_ERROR(ha->Register(registry.get()));
    server = std::make_unique<rpc::RpcServer>(registry.get(), rpc::RpcServerOptions{.port = 0});
    RETURN_IF_ERROR(server->Start());
    RETURN_IF_ERROR(ha->Start(server->address()));
    const absl::Time until = absl::Now() + absl::Seconds(15);
    while (!ha->IsLeader()) {
      if (absl::Now() > until) return absl::DeadlineExceededError("not the leader within 15 s");
      absl::SleepFor(absl::Milliseconds(10));
    }
    return absl::OkStatus();
  }
  void Stop() {
    if (ha != nullptr) ha->Stop();
    if (server != nullptr) server->Stop();
  }
};

// The worker that owns the one big segment: mounts it and heartbeats at the
// interval the master asks for, so the master never expires it mid-run.
class Worker {
 public:
  ~Worker() { Stop(); }

  absl::Status Start(const std::string& address) {
    ASSIGN_OR_RETURN(channel_, rpc::TcpChannel::Connect(address));
    sp::MountSegmentRequest mr;
    mr.mutable_segment()->set_worker_id("bench-worker");
    mr.mutable_segment()->set_name("seg");
    mr.mutable_segment()->set_size_bytes(absl::GetFlag(FLAGS_segment_gib) << 30);
    mr.mutable_segment()->mutable_endpoint()->set_host_id("bench-host");
    ASSIGN_OR_RETURN(sp::MountSegmentResponse m, rpc::Call<rpc::MountSegmentMethod>(*channel_, mr));
    const int64_t interval_ms =
        std::max<int64_t>(10, static_cast<int64_t>(m.heartbeat_interval_ms()));
    thread_ = std::thread([this, interval_ms] {
      sp::HeartbeatRequest hb;
      hb.set_worker_id("bench-worker");
      for (uint64_t seq = 1; !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(interval_ms));
           ++seq) {
        hb.set_sequence(seq);
        absl::StatusOr<sp::HeartbeatResponse> r = rpc::Call<rpc::HeartbeatMethod>(*channel_, hb);
        if (!r.ok()) Die(r.status(), "heartbeat");
        if (r->remount_required()) Die(absl::InternalError("remount required"), "heartbeat");
      }
    });
    return absl::OkStatus();
  }

  void Stop() {
    if (!thread_.joinable()) return;
    stop_.Notify();
    thread_.join();
  }

 private:
  std::unique_ptr<rpc::TcpChannel> channel_;
  Notification stop_;
  std::thread thread_;
};

// ---- The clients --------------------------------------------------------------

// One target's clients and the keys its closed runs put.
struct Clients {
  std::string name;
  std::vector<std::unique_ptr<rpc::TcpChannel>> channels;
  std::vector<std::vector<std::string>> get_keys;  // per client
  uint64_t runs = 0;                               // makes every key unique

  static Clients Connect(std::string name, const std::string& address, int n) {
    Clients c;
    c.name = std::move(name);
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<std::unique_ptr<rpc::TcpChannel>> ch = rpc::TcpChannel::Connect(address);
      if (!ch.ok()) Die(ch.status(), "connect");
      c.channels.push_back(*std::move(ch));
    }
    c.get_keys.resize(static_cast<size_t>(n));
    return c;
  }
};

absl::Status PutPair(rpc::TcpChannel& ch, const std::string& key) {
  sp::PutStartRequest ps;
  ps.set_key(key);
  ps.set_size_bytes(absl::GetFlag(FLAGS_object_bytes));
  absl::StatusOr<sp::PutStartResponse> s = rpc::Call<rpc::PutStartMethod>(ch, ps);
  if (!s.ok()) return s.status();
  sp::PutEndRequest pe;
  pe.set_key(key);
  pe.set_put_id(s->put_id());
  return rpc::Call<rpc::PutEndMethod>(ch, pe).status();
}

// Runs body(client, stop, count) on one thread per client for --seconds and
// returns the counts summed at the stop, per second.
template <typename Body>
double TimedRun(size_t clients, Body body) {
  std::atomic<bool> stop{false};
  std::vector<std::atomic<uint64_t>> counts(clients);
  std::vector<std::thread> threads;
  const auto t0 = SteadyClock::now();
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] { body(c, stop, counts[c]); });
  }
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  // relaxed: the clients only poll it; the joins below order the rest.
  stop.store(true, std::memory_order_relaxed);
  uint64_t total = 0;
  for (auto& n : counts) total += n.load(std::memory_order_relaxed);
  const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  for (auto& t : threads) t.join();
  return static_cast<double>(total) / secs;
}

double ClosedPuts(Clients& cl) {
  const uint64_t run = cl.runs++;
  return TimedRun(cl.channels.size(),
                  [&](size_t c, std::atomic<bool>& stop, std::atomic<uint64_t>& count) {
                    std::vector<std::string>& keep = cl.get_keys[c];
                    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
                      std::string key = absl::StrCat("closed-", run, "-", c, "-", i);
                      if (absl::Status s = PutPair(*cl.channels[c], key); !s.ok())
                        Die(s, cl.name + " closed put");
                      if (keep.size() < kGetKeysPerClientMax) keep.push_back(std::move(key));
                      count.fetch_add(1, std::memory_order_relaxed);
                    }
                  });
}

// One client's pipeline: `depth` chains of put pairs, each completion issuing
// the next from the channel's I/O thread; never blocks in a callback.
class Pipeline {
 public:
  Pipeline(rpc::TcpChannel* ch, std::string prefix, const std::atomic<bool>* stop,
           std::atomic<uint64_t>* completed)
      : ch_(ch), prefix_(std::move(prefix)), stop_(stop), completed_(completed) {}

  // Blocks until every chain has ended after the stop.
  absl::Status Run(int depth) {
    MC_ASSERT(depth > 0, "a pipeline needs a depth");
    slots_ = depth;
    for (int i = 0; i < depth; ++i) IssueNext();
    drained_.WaitForNotification();
    MutexLock lock(&mu_);
    return first_error_;
  }

 private:
  void IssueNext() {
    if (stop_->load(std::memory_order_relaxed) || failed_.load(std::memory_order_relaxed)) {
      EndSlot();
      return;
    }
    sp::PutStartRequest ps;
    ps.set_key(absl::StrCat(prefix_, next_.fetch_add(1, std::memory_order_relaxed)));
    ps.set_size_bytes(absl::GetFlag(FLAGS_object_bytes));
    rpc::CallAsync<rpc::PutStartMethod>(
        *ch_, ps, {}, [this, key = ps.key()](absl::StatusOr<sp::PutStartResponse> r) {
          if (!r.ok()) return Fail(r.status());
          sp::PutEndRequest pe;
          pe.set_key(key);
          pe.set_put_id(r->put_id());
          rpc::CallAsync<rpc::PutEndMethod>(*ch_, pe, {},
                                            [this](absl::StatusOr<sp::PutEndResponse> e) {
                                              if (!e.ok()) return Fail(e.status());
                                              completed_->fetch_add(1, std::memory_order_relaxed);
                                              IssueNext();
                                            });
        });
  }

  // A failed chain ends (reissuing could recurse on an immediate failure).
  void Fail(const absl::Status& s) {
    {
      MutexLock lock(&mu_);
      if (first_error_.ok()) first_error_ = s;
    }
    failed_.store(true, std::memory_order_relaxed);
    EndSlot();
  }

  void EndSlot() {
    // acq_rel: the last chain to end publishes every chain's writes to Run.
    if (ended_.fetch_add(1, std::memory_order_acq_rel) + 1 == slots_) drained_.Notify();
  }

  rpc::TcpChannel* const ch_;
  const std::string prefix_;
  const std::atomic<bool>* const stop_;
  std::atomic<uint64_t>* const completed_;
  int slots_ = 0;
  std::atomic<uint64_t> next_{0};
  std::atomic<int> ended_{0};
  std::atomic<bool> failed_{false};
  Notification drained_;
  Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

double PipelinedPuts(Clients& cl) {
  const uint64_t run = cl.runs++;
  return TimedRun(
      cl.channels.size(), [&](size_t c, std::atomic<bool>& stop, std::atomic<uint64_t>& count) {
        Pipeline p(cl.channels[c].get(), absl::StrCat("piped-", run, "-", c, "-"), &stop, &count);
        if (absl::Status s = p.Run(absl::GetFlag(FLAGS_depth)); !s.ok()) {
          Die(s, cl.name + " pipelined put");
        }
      });
}

double Gets(Clients& cl) {
  std::vector<std::vector<uint64_t>> leases(cl.channels.size());
  const double rate = TimedRun(
      cl.channels.size(), [&](size_t c, std::atomic<bool>& stop, std::atomic<uint64_t>& count) {
        const std::vector<std::string>& keys = cl.get_keys[c];
        MC_ASSERT(!keys.empty(), "gets run after a closed put run");
        sp::GetReplicasRequest g;
        for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          g.set_key(keys[i % keys.size()]);
          absl::StatusOr<sp::GetReplicasResponse> r =
              rpc::Call<rpc::GetReplicasMethod>(*cl.channels[c], g);
          if (!r.ok()) Die(r.status(), cl.name + " get " + g.key());
          if (r->replicas_size() == 0) Die(absl::NotFoundError("no replica"), cl.name + " get");
          leases[c].push_back(r->lease().lease_id());
          count.fetch_add(1, std::memory_order_relaxed);
        }
      });
  // Untimed: keeps the lease table small for the next run.
  for (size_t c = 0; c < leases.size(); ++c) {
    for (size_t i = 0; i < leases[c].size(); i += kReleaseBatchMax) {
      sp::ReleaseLeasesRequest rel;
      for (size_t j = i; j < std::min(leases[c].size(), i + kReleaseBatchMax); ++j) {
        rel.add_lease_ids(leases[c][j]);
      }
      if (absl::Status s = rpc::Call<rpc::ReleaseLeasesMethod>(*cl.channels[c], rel).status();
          !s.ok()) {
        Die(s, cl.name + " release leases");
      }
    }
  }
  return rate;
}

// ---- The report ---------------------------------------------------------------

struct Figure {
  const char* name;
  const char* unit;
  std::vector<double> off, on;
};

std::string Reps(const std::vector<double>& v) {
  std::string s;
  for (double x : v) absl::StrAppend(&s, s.empty() ? "" : " ", absl::StrFormat("%.0f", x));
  return s;
}

void Print(const std::vector<Figure>& figures) {
  std::printf("\n%-10s %-8s %-28s %10s %-28s %10s %8s\n", "measure", "unit", "HA off (per rep)",
              "off med", "HA on (per rep)", "on med", "on/off");
  for (const Figure& f : figures) {
    const double off = Median(f.off), on = Median(f.on);
    std::printf("%-10s %-8s %-28s %10.0f %-28s %10.0f %8.3f\n", f.name, f.unit, Reps(f.off).c_str(),
                off, Reps(f.on).c_str(), on, on / off);
  }
}

void WriteJson(const std::string& path, const std::vector<Figure>& figures,
               const std::string& machine) {
  std::string s = absl::StrCat("{\n  \"machine\": \"", machine,
                               "\",\n  \"seconds\": ", absl::GetFlag(FLAGS_seconds),
                               ",\n  \"reps\": ", absl::GetFlag(FLAGS_reps),
                               ",\n  \"clients\": ", absl::GetFlag(FLAGS_clients),
                               ",\n  \"depth\": ", absl::GetFlag(FLAGS_depth),
                               ",\n  \"object_bytes\": ", absl::GetFlag(FLAGS_object_bytes));
  for (const Figure& f : figures) {
    const double off = Median(f.off), on = Median(f.on);
    absl::StrAppend(&s, ",\n  \"", f.name, "\": {\"unit\": \"", f.unit,
                    "\", \"off_median\": ", absl::StrFormat("%.1f", off),
                    ", \"on_median\": ", absl::StrFormat("%.1f", on),
                    ", \"on_over_off\": ", absl::StrFormat("%.4f", on / off), "}");
  }
  absl::StrAppend(&s, "\n}\n");
  std::ofstream out(path);
  out << s;
  if (!out) Die(absl::UnavailableError("write failed"), "json " + path);
}

int Main() {
  const int reps = absl::GetFlag(FLAGS_reps);
  const int clients = absl::GetFlag(FLAGS_clients);
  if (reps < 1 || clients < 1 || absl::GetFlag(FLAGS_depth) < 1 ||
      absl::GetFlag(FLAGS_seconds) <= 0) {
    Die(absl::InvalidArgumentError("reps, clients, depth and seconds must be > 0"), "flags");
  }
  const std::string machine =
      absl::StrCat(CpuModel(), ", ", std::thread::hardware_concurrency(), " CPUs online");
  std::printf("ha_benchmark: machine: %s\n", machine.c_str());
  std::printf(
      "  %d clients, %.1f s per run, %d reps, depth %d, %llu-byte objects, %llu GiB segment\n",
      clients, absl::GetFlag(FLAGS_seconds), reps, absl::GetFlag(FLAGS_depth),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_object_bytes)),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_segment_gib)));
  std::printf("  the master, its clients and (HA on) etcd share this machine's CPUs\n");

  PlainMaster plain;
  if (absl::Status s = plain.Start(); !s.ok()) Die(s, "HA off: start");
  HaNode node;
  if (absl::Status s = node.Start(); !s.ok()) Die(s, "HA on: start");
  Worker off_worker, on_worker;
  if (absl::Status s = off_worker.Start(plain.server->address()); !s.ok()) Die(s, "HA off: mount");
  if (absl::Status s = on_worker.Start(node.server->address()); !s.ok()) Die(s, "HA on: mount");
  Clients off = Clients::Connect("HA off", plain.server->address(), clients);
  Clients on = Clients::Connect("HA on", node.server->address(), clients);

  std::vector<Figure> figures = {
      {"closed", "pairs/s", {}, {}}, {"pipelined", "pairs/s", {}, {}}, {"gets", "gets/s", {}, {}}};
  for (int r = 0; r < reps; ++r) {
    // Alternating off and on, so drift in the machine's load hits both.
    figures[0].off.push_back(ClosedPuts(off));
    figures[0].on.push_back(ClosedPuts(on));
    figures[1].off.push_back(PipelinedPuts(off));
    figures[1].on.push_back(PipelinedPuts(on));
    figures[2].off.push_back(Gets(off));
    figures[2].on.push_back(Gets(on));
    std::printf("rep %d: closed %.0f / %.0f  pipelined %.0f / %.0f  gets %.0f / %.0f (off / on)\n",
                r + 1, figures[0].off.back(), figures[0].on.back(), figures[1].off.back(),
                figures[1].on.back(), figures[2].off.back(), figures[2].on.back());
    std::fflush(stdout);
  }
  Print(figures);

  const master::MasterStats so = plain.master->Stats();
  const master::MasterStats sn = node.ha->master()->Stats();
  const HaMasterStatus hs = node.ha->status();
  std::printf(
      "\nafter the runs: HA off %lld objects, %.2f GiB used; HA on %lld objects, %.2f GiB used, "
      "%llu oplog batches stored, %llu snapshots written, leader %s\n",
      static_cast<long long>(so.objects), static_cast<double>(so.used_bytes) / (1 << 30),
      static_cast<long long>(sn.objects), static_cast<double>(sn.used_bytes) / (1 << 30),
      static_cast<unsigned long long>(hs.applied_seq),
      static_cast<unsigned long long>(hs.snapshots_written), hs.leader ? "yes" : "NO");
  if (hs.writer.batches > 0 && hs.writer.mutations > 0) {
    std::printf("oplog this term: %llu batches, %.1f changes a batch, %.1f bytes stored a change\n",
                static_cast<unsigned long long>(hs.writer.batches),
                static_cast<double>(hs.writer.mutations) / static_cast<double>(hs.writer.batches),
                static_cast<double>(hs.writer.bytes) / static_cast<double>(hs.writer.mutations));
    const double b = static_cast<double>(hs.writer.batches);
    std::printf(
        "oplog committers, us a batch: cut %.1f, encode %.1f, store %.1f, answer %.1f "
        "(%.2f s storing of the runs' total)\n",
        static_cast<double>(hs.writer.cut_ns) / b / 1e3,
        static_cast<double>(hs.writer.encode_ns) / b / 1e3,
        static_cast<double>(hs.writer.append_ns) / b / 1e3,
        static_cast<double>(hs.writer.answer_ns) / b / 1e3,
        static_cast<double>(hs.writer.append_ns) / 1e9);
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    WriteJson(path, figures, machine);
    std::printf("medians written to %s\n", path.c_str());
  }
  off_worker.Stop();
  on_worker.Stop();
  off.channels.clear();
  on.channels.clear();
  node.Stop();
  plain.Stop();
  return 0;
}

}  // namespace
}  // namespace mooncake::ha

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::ha::Main();
}
