// Compaction by relocation at the master (internal/relocation_path.h,
// docs/alloc.md "Relocation"):
//
//   bazel run -c opt //mooncake/store/master:master_relocation_benchmark -- --steps=20000
//
// One segment (256 MiB, TLSF, the reference binary's default allocator) on a
// real Master<> with a FakeClock (one put per millisecond), churned: each
// step puts a new object of a random size (64 KiB .. 2 MiB, powers of two,
// like KV chunks of several models); before each put, random live objects
// are removed while the segment's use is above --target (0.9): a cache its
// clients keep 90% full, so a put that finds no room finds it for
// fragmentation. A put that finds no room evicts (LRU); with relocation on,
// a put that falls short for fragmentation comes back, Tick starts the
// compaction and a scripted worker answers its copy tasks at once (the
// master never touches bytes, so only the accounting runs here), then the
// put is retried. The same walk (same seed) runs with relocation off and on;
// printed: objects evicted, evicted bytes, failed puts, the mean segment use
// after each put, the bytes relocation moved (the copies' cost), and the
// ratios.
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/master/master.h"

namespace {

using mooncake::FakeClock;
using mooncake::MetricsRegistry;
namespace proto = mooncake::store::proto;
using Master = mooncake::master::Master<>;

constexpr uint64_t kSegmentBytes = uint64_t{256} << 20;

struct WalkResult {
  uint64_t puts = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t failed_puts = 0;
  double mean_use = 0;
  uint64_t relocated_bytes = 0;
  uint64_t compactions = 0;
  double seconds = 0;
};

uint64_t CounterValue(MetricsRegistry& m, const std::string& name,
                      const mooncake::MetricLabels& labels = {}) {
  auto c = m.GetCounter("mooncake_master_" + name, "", labels);
  return c.ok() ? (*c)->Value() : 0;
}

WalkResult Walk(bool relocation, uint64_t steps, uint64_t seed, double target) {
  FakeClock clock(1'000'000'000);
  MetricsRegistry metrics;
  mooncake::master::MasterOptions o;
  o.relocation.enabled = relocation;
  o.high_watermark = 1.0;  // only puts evict: the walk measures them
  o.low_watermark = 0.99;
  o.membership.heartbeat_timeout_ms = 3'600'000;
  auto created = Master::Create(o, &clock, &metrics);
  if (!created.ok()) std::abort();
  std::unique_ptr<Master> m = std::move(*created);
  proto::MountSegmentRequest mount;
  mount.mutable_segment()->set_worker_id("w0");
  mount.mutable_segment()->set_name("seg0");
  mount.mutable_segment()->set_size_bytes(kSegmentBytes);
  mount.mutable_segment()->mutable_endpoint()->set_host_id("h0");
  mount.mutable_segment()->mutable_endpoint()->set_router_endpoint("router://w0");
  const uint64_t segment = m->MountSegment(mount)->segment_id();

  auto worker = [&] {  // answers every copy task at once
    proto::CopySyncRequest req;
    req.set_worker_id("w0");
    req.set_max_tasks(64);
    for (;;) {
      auto resp = m->CopySync(req);
      req.clear_results();
      if (!resp.ok() || resp->tasks().empty()) return;
      for (const proto::CopyTask& t : resp->tasks()) req.add_results()->set_task_id(t.task_id());
    }
  };
  std::mt19937_64 rng(seed);
  std::vector<std::string> live;
  WalkResult r;
  double use_sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < steps; ++i) {
    clock.AdvanceNs(1'000'000);  // a put per millisecond
    while (!live.empty() && static_cast<double>(m->SegmentAllocatorStats(segment)->used_bytes) >
                                target * static_cast<double>(kSegmentBytes)) {
      const size_t k = rng() % live.size();
      proto::RemoveRequest rm;
      rm.set_key(live[k]);
      static_cast<void>(m->Remove(rm));
      live[k] = live.back();
      live.pop_back();
    }
    proto::PutStartRequest put;
    put.set_key(absl::StrCat("k", i));
    put.set_size_bytes(uint64_t{64} << 10 << (rng() % 6));
    put.mutable_options()->set_replica_count(1);
    bool ok = false;
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto start = m->PutStart(put);
      if (!start.ok()) break;
      if (start->retry()) {  // compacting: the worker copies, the client comes back
        m->Tick();
        worker();
        m->Tick();
        continue;
      }
      proto::PutEndRequest end;
      end.set_key(put.key());
      end.set_put_id(start->put_id());
      ok = m->PutEnd(end).ok();
      break;
    }
    ++r.puts;
    if (ok) {
      live.push_back(put.key());
    } else {
      ++r.failed_puts;
    }
    use_sum += static_cast<double>(m->SegmentAllocatorStats(segment)->used_bytes) /
               static_cast<double>(kSegmentBytes);
    // Evicted objects' keys stay in `live` until drawn: a Remove of a gone
    // key is a cheap miss, as a client's would be.
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.mean_use = use_sum / static_cast<double>(steps);
  r.evictions = CounterValue(metrics, "evictions_total");
  r.evicted_bytes = CounterValue(metrics, "evicted_bytes_total");
  r.relocated_bytes = CounterValue(metrics, "relocated_bytes_total");
  r.compactions = CounterValue(metrics, "compactions_total", {{"outcome", "started"}});
  return r;
}

double Ratio(double a, double b) { return b == 0 ? 0 : a / b; }

}  // namespace

int main(int argc, char** argv) {
  uint64_t steps = 20'000, seed = 1;
  double target = 0.9;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) steps = std::strtoull(argv[i] + 8, nullptr, 10);
    if (std::strncmp(argv[i], "--seed=", 7) == 0) seed = std::strtoull(argv[i] + 7, nullptr, 10);
    if (std::strncmp(argv[i], "--target=", 9) == 0) target = std::strtod(argv[i] + 9, nullptr);
  }
  std::printf("master relocation walk: one %" PRIu64 " MiB TLSF segment, %" PRIu64
              " steps (random removes while use > %.2f, then a put of 64K..2M), seed %" PRIu64 "\n",
              kSegmentBytes >> 20, steps, target, seed);
  const WalkResult off = Walk(false, steps, seed, target);
  const WalkResult on = Walk(true, steps, seed, target);
  auto row = [](const char* name, const WalkResult& r) {
    std::printf("%-15s evictions %7" PRIu64 "  evicted %8.1f MiB  failed puts %5" PRIu64
                "  mean use %.4f  relocated %8.1f MiB  compactions %6" PRIu64 "  %.2f s\n",
                name, r.evictions, static_cast<double>(r.evicted_bytes) / (1 << 20), r.failed_puts,
                r.mean_use, static_cast<double>(r.relocated_bytes) / (1 << 20), r.compactions,
                r.seconds);
  };
  row("relocation off", off);
  row("relocation on", on);
  std::printf(
      "on/off: evictions %.3f, evicted bytes %.3f, mean use %.4f; moved bytes per "
      "eviction-byte avoided %.3f\n",
      Ratio(static_cast<double>(on.evictions), static_cast<double>(off.evictions)),
      Ratio(static_cast<double>(on.evicted_bytes), static_cast<double>(off.evicted_bytes)),
      Ratio(on.mean_use, off.mean_use),
      Ratio(static_cast<double>(on.relocated_bytes),
            static_cast<double>(off.evicted_bytes) - static_cast<double>(on.evicted_bytes)));
  return 0;
}
