// Scheduler benchmarks.
//
// 1. BM_PushPop<S>: single-thread push+pop rate of every model (Item =
//    uint64_t, 4 classes), against std::deque<uint64_t> in the same run.
// 2. BM_LockedMpsc<S>: LockedScheduler<S> with 2 producer threads and 1
//    consumer, against the same wrapper used by one thread.
// 3. BM_SharedLink<S>: the point of the package. A latency-critical stream
//    of small items (bursts of --crit_burst items of 4 KiB, Poisson burst
//    arrivals, 20% of the link) and a saturating bulk stream of 64 KiB items
//    share one simulated link: a consumer thread pops an item and spins for
//    cost / B seconds ("sending" at B = 1 GiB/s) before it pops the next.
//    Each run measures the critical stream alone first, then with bulk, and
//    reports the critical queueing delay (push to pop) P50/P99 in both
//    phases, their P99 ratio, and the bulk bandwidth kept as a fraction of
//    what the critical stream leaves.
//
// After the runs a summary prints the medians over repetitions and the
// same-run ratios (the figures quoted in docs/qos.md).
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/histogram.h"
#include "mooncake/qos/drr_scheduler.h"
#include "mooncake/qos/fifo_scheduler.h"
#include "mooncake/qos/locked_scheduler.h"
#include "mooncake/qos/scheduler.h"
#include "mooncake/qos/strict_priority_scheduler.h"

namespace mooncake::qos {
namespace {

// --- Medians over repetitions, for the closing summary. ---------------------

std::mutex g_record_mu;
std::map<std::string, std::vector<double>>& Records() {
  static auto* records = new std::map<std::string, std::vector<double>>;
  return *records;
}
void Record(const std::string& key, double value) {
  std::lock_guard<std::mutex> lock(g_record_mu);
  Records()[key].push_back(value);
}
double Median(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_record_mu);
  auto it = Records().find(key);
  if (it == Records().end() || it->second.empty()) return 0;
  std::vector<double> v = it->second;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// --- Models under test, named. ------------------------------------------------

template <typename T>
FifoScheduler<T> MakeModel(FifoScheduler<T>*, const SchedulerLimits& limits) {
  return FifoScheduler<T>({limits});
}
template <typename T>
StrictPriorityScheduler<T> MakeModel(StrictPriorityScheduler<T>*, const SchedulerLimits& limits) {
  return StrictPriorityScheduler<T>({limits});  // no aging: class 0 always first
}
template <typename T>
DrrScheduler<T> MakeModel(DrrScheduler<T>*, const SchedulerLimits& limits) {
  // Critical (class 0) weighs 4, the rest 1.
  std::vector<uint32_t> weights(limits.class_count, 1);
  weights[0] = 4;
  return DrrScheduler<T>({limits, weights, /*quantum_bytes=*/16 * 1024});
}
template <typename S>
S Make(const SchedulerLimits& limits) {
  return MakeModel(static_cast<S*>(nullptr), limits);
}

// The same model over another item type.
template <typename S, typename T>
struct Rebind;
template <template <typename> class M, typename U, typename T>
struct Rebind<M<U>, T> {
  using type = M<T>;
};

template <typename S>
const char* ModelName();
template <>
const char* ModelName<FifoScheduler<uint64_t>>() {
  return "fifo";
}
template <>
const char* ModelName<StrictPriorityScheduler<uint64_t>>() {
  return "strict";
}
template <>
const char* ModelName<DrrScheduler<uint64_t>>() {
  return "drr";
}

// --- 1. Single-thread push+pop. -----------------------------------------------

// Items (each pushed once and popped once) per second, in millions.
void RecordRate(const std::string& key, std::chrono::steady_clock::time_point start,
                int64_t items) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Record(key, static_cast<double>(items) / secs / 1e6);
}

constexpr int kBatch = 64;
constexpr int64_t kPushPopIterations = 100000;  // x 64 items

void BM_PushPop_StdDeque(benchmark::State& state) {
  std::deque<uint64_t> q;
  uint64_t sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) q.push_back(static_cast<uint64_t>(i));
    for (int i = 0; i < kBatch; ++i) {
      sink += q.front();
      q.pop_front();
    }
  }
  RecordRate("pushpop/deque", start, state.iterations() * kBatch);
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations() * kBatch);
}

template <typename S>
void BM_PushPop(benchmark::State& state) {
  S s = Make<S>(SchedulerLimits{4, 1024});
  uint64_t sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      const uint64_t cost = 512u << (i & 7);  // 512 B .. 64 KiB
      if (s.Push(static_cast<uint64_t>(i), static_cast<ClassId>(i & 3), cost) !=
          PushResult::kAccepted) {
        state.SkipWithError("push refused");
      }
    }
    for (int i = 0; i < kBatch; ++i) sink += *s.Pop();
  }
  RecordRate(std::string("pushpop/") + ModelName<S>(), start, state.iterations() * kBatch);
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// --- 2. Locked wrapper, 2 producers + 1 consumer. -----------------------------

constexpr uint64_t kMpscItems = 1 << 21;

template <typename S>
void BM_LockedMpsc(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  for (auto _ : state) {
    LockedScheduler<S> s(Make<S>(SchedulerLimits{4, 4096}));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    const uint64_t per_producer = producers > 0 ? kMpscItems / producers : 0;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&s, p, per_producer] {
        for (uint64_t i = 0; i < per_producer; ++i) {
          while (s.Push(uint64_t{i}, static_cast<ClassId>((i + p) & 3), 4096) ==
                 PushResult::kFull) {
            std::this_thread::yield();
          }
        }
      });
    }
    uint64_t got = 0, sink = 0;
    const uint64_t total = per_producer * producers;
    if (producers == 0) {
      // Uncontended: one thread pushes and pops through the lock.
      for (uint64_t i = 0; i < kMpscItems; i += kBatch) {
        for (int j = 0; j < kBatch; ++j)
          (void)s.Push(uint64_t{i}, static_cast<ClassId>(j & 3), 4096);
        for (int j = 0; j < kBatch; ++j) sink += *s.Pop();
      }
      got = kMpscItems;
    }
    while (got < total) {
      if (std::optional<uint64_t> v = s.Pop()) {
        sink += *v;
        ++got;
      }
    }
    for (auto& t : threads) t.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(sink);
    const double mips = static_cast<double>(producers == 0 ? kMpscItems : total) / secs / 1e6;
    state.counters["M_items_per_s"] = mips;
    Record(std::string("mpsc/") + ModelName<S>() + "/" + std::to_string(producers), mips);
  }
}

// --- 3. Shared link. ----------------------------------------------------------

constexpr ClassId kCritical = 0;
constexpr ClassId kBulk = 1;
constexpr uint64_t kLinkBytesPerSec = uint64_t{1} << 30;  // B = 1 GiB/s
constexpr uint64_t kCritItemBytes = 4096;
constexpr uint64_t kBulkWindowItems = 32;  // bulk keeps 2 MiB queued
constexpr double kCritLoad = 0.20;         // share of B the critical stream offers
constexpr int64_t kPhaseNs = 400'000'000;

struct LinkItem {
  int64_t push_ns;
  uint32_t cls;
  uint32_t bytes;
};

struct PhaseResult {
  uint64_t crit_p50_ns = 0, crit_p99_ns = 0, crit_count = 0;
  int64_t late_ns = 0;           // worst lag of the link thread (RunPhase)
  int64_t artifact_idle_ns = 0;  // see RunPhase
  double secs = 0;               // link time covered
  double crit_bytes_per_sec = 0, bulk_bytes_per_sec = 0;
};

inline void CpuRelax() { __builtin_ia32_pause(); }

// The link and critical threads ask for nice -20 so that unrelated work on a
// shared 2-core host (compilers) rarely preempts the simulated link. Best
// effort: without CAP_SYS_NICE they run at normal priority, and the summary
// says so.
std::atomic<bool> g_boost_failed{false};
void BoostThisThread() {
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), -20) != 0) {
    g_boost_failed.store(true);
  }
}

// Critical: bursts at Poisson times, each item stamped when pushed; the same
// seed gives every model the same arrival schedule.
template <typename Q>
void ProduceCritical(Q& q, int crit_burst, uint64_t seed, int64_t start_ns, int64_t end_ns) {
  BoostThisThread();
  const Clock& clock = MonotonicClock::Get();
  std::mt19937_64 rng(seed);
  const double mean_gap_ns = static_cast<double>(crit_burst * kCritItemBytes) /
                             (kCritLoad * static_cast<double>(kLinkBytesPerSec)) * 1e9;
  std::exponential_distribution<double> gap(1.0 / mean_gap_ns);
  int64_t next_ns = start_ns + static_cast<int64_t>(gap(rng));
  while (next_ns < end_ns) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(next_ns - clock.NowNs()));
    // Woken late (host preemption): the burst arrives now and the next gap is
    // drawn from here, so missed bursts do not arrive bunched together.
    next_ns = std::max(next_ns, clock.NowNs());
    for (int i = 0; i < crit_burst; ++i) {
      // Stamped under the queue's lock, so a preemption of this thread
      // between stamping and pushing cannot pass for queueing delay.
      while (q.WithLock([&](auto& inner) {
        LinkItem item{clock.NowNs(), kCritical, static_cast<uint32_t>(kCritItemBytes)};
        return inner.Push(std::move(item), kCritical, kCritItemBytes);
      }) == PushResult::kFull) {
        CpuRelax();
      }
    }
    next_ns += static_cast<int64_t>(gap(rng));
  }
}

// The link keeps its own time line: an item starts when the previous one
// ends (or when it arrives at an idle link) and occupies bytes / B ns. The
// consumer thread pops when real time reaches the end of the current item, so
// the order is decided live by the scheduler; but if the thread is preempted
// (2 shared cores), the link catches up afterwards instead of losing capacity
// and charging the stall to every queued item.
template <typename S>
PhaseResult RunPhase(bool with_bulk, int crit_burst, uint64_t bulk_item_bytes, uint64_t seed) {
  using Model = typename Rebind<S, LinkItem>::type;
  LockedScheduler<Model> q(Make<Model>(SchedulerLimits{2, 4096}));
  const Clock& clock = MonotonicClock::Get();
  const int64_t start_ns = clock.NowNs();
  const int64_t end_ns = start_ns + kPhaseNs;

  std::thread critical([&] { ProduceCritical(q, crit_burst, seed, start_ns, end_ns); });

  BoostThisThread();  // this thread is the link
  LatencyHistogram crit_delay;
  uint64_t sent[2] = {0, 0};
  uint64_t bulk_queued = 0;
  int64_t late_ns = 0;  // worst lag of the consumer thread behind the link
  int64_t artifact_idle_ns = 0;
  bool busy = false;  // an item occupies the link until next_free_ns
  int64_t next_free_ns = start_ns;
  for (;;) {
    const int64_t now_ns = clock.NowNs();
    if (now_ns >= end_ns || next_free_ns >= end_ns) break;
    if (busy && now_ns < next_free_ns) {
      CpuRelax();
      continue;
    }
    // Bulk: an always-backlogged source (a KV offload) that keeps a send
    // window of kBulkWindowItems queued; its push time is irrelevant (0).
    while (with_bulk && bulk_queued < kBulkWindowItems) {
      LinkItem item{0, kBulk, static_cast<uint32_t>(bulk_item_bytes)};
      if (q.Push(std::move(item), kBulk, bulk_item_bytes) != PushResult::kAccepted) break;
      ++bulk_queued;
    }
    std::optional<LinkItem> item = q.Pop();
    if (!item) {
      busy = false;
      CpuRelax();
      continue;
    }
    // An idle link's next_free_ns lies before the arrival of anything it pops.
    const int64_t begin_ns = std::max(next_free_ns, item->push_ns);
    // A link that is idle while bulk waits exists only when this thread lagged
    // and then popped an item that arrived after the link freed: a thread on
    // time would have sent bulk there. Counted, so the figure can exclude it.
    if (busy && with_bulk && begin_ns > next_free_ns) artifact_idle_ns += begin_ns - next_free_ns;
    if (busy) late_ns = std::max(late_ns, now_ns - next_free_ns);
    if (item->cls == kCritical) {
      crit_delay.Record(static_cast<uint64_t>(begin_ns - item->push_ns));
    } else {
      --bulk_queued;
    }
    sent[item->cls] += item->bytes;
    next_free_ns =
        begin_ns + static_cast<int64_t>(item->bytes * 1'000'000'000ull / kLinkBytesPerSec);
    busy = true;
  }
  critical.join();
  // Rates over the link's own time line (it may trail real time a little).
  const double secs = static_cast<double>(std::min(next_free_ns, end_ns) - start_ns) / 1e9;
  PhaseResult r;
  r.secs = secs;
  r.late_ns = late_ns;
  r.artifact_idle_ns = artifact_idle_ns;
  r.crit_p50_ns = crit_delay.P50();
  r.crit_p99_ns = crit_delay.P99();
  r.crit_count = crit_delay.Count();
  r.crit_bytes_per_sec = static_cast<double>(sent[kCritical]) / secs;
  r.bulk_bytes_per_sec = static_cast<double>(sent[kBulk]) / secs;
  return r;
}

// The same workload in virtual time, single thread, no clock reads: the
// scheduler's policy alone, free of the host's noise. Deterministic.
template <typename S>
PhaseResult SimPhase(bool with_bulk, int crit_burst, uint64_t bulk_item_bytes, uint64_t seed) {
  using Model = typename Rebind<S, LinkItem>::type;
  Model q = Make<Model>(SchedulerLimits{2, 1 << 16});
  constexpr int64_t kSimNs = 2'000'000'000;
  std::mt19937_64 rng(seed);
  const double mean_gap_ns = static_cast<double>(crit_burst * kCritItemBytes) /
                             (kCritLoad * static_cast<double>(kLinkBytesPerSec)) * 1e9;
  std::exponential_distribution<double> gap(1.0 / mean_gap_ns);
  int64_t next_burst_ns = static_cast<int64_t>(gap(rng));
  LatencyHistogram crit_delay;
  uint64_t sent[2] = {0, 0};
  uint64_t bulk_queued = 0;
  int64_t t = 0;
  while (t < kSimNs) {
    for (; next_burst_ns <= t; next_burst_ns += static_cast<int64_t>(gap(rng))) {
      for (int i = 0; i < crit_burst; ++i) {
        LinkItem item{next_burst_ns, kCritical, static_cast<uint32_t>(kCritItemBytes)};
        if (q.Push(std::move(item), kCritical, kCritItemBytes) != PushResult::kAccepted) {
          std::abort();  // 2^16 items of headroom: a refusal is a bug here
        }
      }
    }
    while (with_bulk && bulk_queued < kBulkWindowItems) {
      LinkItem item{t, kBulk, static_cast<uint32_t>(bulk_item_bytes)};
      if (q.Push(std::move(item), kBulk, bulk_item_bytes) != PushResult::kAccepted) break;
      ++bulk_queued;
    }
    std::optional<LinkItem> item = q.Pop();
    if (!item) {
      t = next_burst_ns;  // idle until the next arrival
      continue;
    }
    if (item->cls == kCritical) {
      crit_delay.Record(static_cast<uint64_t>(t - item->push_ns));
    } else {
      --bulk_queued;
    }
    sent[item->cls] += item->bytes;
    t += static_cast<int64_t>(item->bytes * 1'000'000'000ull / kLinkBytesPerSec);
  }
  PhaseResult r;
  r.crit_p50_ns = crit_delay.P50();
  r.crit_p99_ns = crit_delay.P99();
  r.crit_count = crit_delay.Count();
  r.secs = t / 1e9;
  r.crit_bytes_per_sec = static_cast<double>(sent[kCritical]) / (t / 1e9);
  r.bulk_bytes_per_sec = static_cast<double>(sent[kBulk]) / (t / 1e9);
  return r;
}

template <typename S, bool kSimulated>
void SharedLinkBody(benchmark::State& state) {
  const int crit_burst = static_cast<int>(state.range(0));
  const uint64_t bulk_item_bytes = static_cast<uint64_t>(state.range(1));
  static uint64_t seed = 1;
  for (auto _ : state) {
    ++seed;
    const PhaseResult alone = kSimulated ? SimPhase<S>(false, crit_burst, bulk_item_bytes, seed)
                                         : RunPhase<S>(false, crit_burst, bulk_item_bytes, seed);
    const PhaseResult mixed = kSimulated ? SimPhase<S>(true, crit_burst, bulk_item_bytes, seed)
                                         : RunPhase<S>(true, crit_burst, bulk_item_bytes, seed);
    const double ratio = static_cast<double>(mixed.crit_p99_ns) /
                         static_cast<double>(std::max<uint64_t>(alone.crit_p99_ns, 1));
    const double left = static_cast<double>(kLinkBytesPerSec) - mixed.crit_bytes_per_sec;
    const double kept = mixed.bulk_bytes_per_sec / left;
    // The same, with the lag artifact's idle link time taken out (see RunPhase).
    const double busy_secs = mixed.secs - mixed.artifact_idle_ns / 1e9;
    const double kept_adj =
        mixed.bulk_bytes_per_sec * mixed.secs /
        (static_cast<double>(kLinkBytesPerSec) * busy_secs - mixed.crit_bytes_per_sec * mixed.secs);
    state.counters["alone_p50_us"] = alone.crit_p50_ns / 1e3;
    state.counters["alone_p99_us"] = alone.crit_p99_ns / 1e3;
    state.counters["bulk_p50_us"] = mixed.crit_p50_ns / 1e3;
    state.counters["bulk_p99_us"] = mixed.crit_p99_ns / 1e3;
    state.counters["p99_ratio"] = ratio;
    state.counters["bulk_kept"] = kept;
    state.counters["bulk_kept_adj"] = kept_adj;
    state.counters["crit_items"] = static_cast<double>(mixed.crit_count);
    state.counters["late_ms"] = std::max(alone.late_ns, mixed.late_ns) / 1e6;
    const std::string key = std::string(kSimulated ? "sim/" : "link/") + ModelName<S>() + "/" +
                            std::to_string(crit_burst) + "/" + std::to_string(bulk_item_bytes);
    Record(key + "/alone_p50", alone.crit_p50_ns / 1e3);
    Record(key + "/alone_p99", alone.crit_p99_ns / 1e3);
    Record(key + "/bulk_p50", mixed.crit_p50_ns / 1e3);
    Record(key + "/bulk_p99", mixed.crit_p99_ns / 1e3);
    Record(key + "/ratio", ratio);
    Record(key + "/kept", kept);
    Record(key + "/kept_adj", kept_adj);
    Record(key + "/late_ms", std::max(alone.late_ns, mixed.late_ns) / 1e6);
  }
}

template <typename S>
void BM_SharedLink(benchmark::State& state) {
  SharedLinkBody<S, false>(state);
}
template <typename S>
void BM_SharedLinkSim(benchmark::State& state) {
  SharedLinkBody<S, true>(state);
}

using Fifo = FifoScheduler<uint64_t>;
using Strict = StrictPriorityScheduler<uint64_t>;
using Drr = DrrScheduler<uint64_t>;

BENCHMARK(BM_PushPop_StdDeque)->Iterations(kPushPopIterations);
BENCHMARK_TEMPLATE(BM_PushPop, Fifo)->Iterations(kPushPopIterations);
BENCHMARK_TEMPLATE(BM_PushPop, Strict)->Iterations(kPushPopIterations);
BENCHMARK_TEMPLATE(BM_PushPop, Drr)->Iterations(kPushPopIterations);

BENCHMARK_TEMPLATE(BM_LockedMpsc, Fifo)->Arg(0)->Arg(2)->Iterations(1)->UseRealTime();
BENCHMARK_TEMPLATE(BM_LockedMpsc, Strict)->Arg(0)->Arg(2)->Iterations(1)->UseRealTime();
BENCHMARK_TEMPLATE(BM_LockedMpsc, Drr)->Arg(0)->Arg(2)->Iterations(1)->UseRealTime();

// Args: critical burst (items of 4 KiB), bulk item bytes.
void LinkArgs(benchmark::internal::Benchmark* b) {
  b->Args({32, 64 * 1024})->Args({8, 64 * 1024})->Args({32, 256 * 1024})->Args({8, 1 << 20});
  b->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_TEMPLATE(BM_SharedLink, Fifo)->Apply(LinkArgs);
BENCHMARK_TEMPLATE(BM_SharedLink, Strict)->Apply(LinkArgs);
BENCHMARK_TEMPLATE(BM_SharedLink, Drr)->Apply(LinkArgs);
BENCHMARK_TEMPLATE(BM_SharedLinkSim, Fifo)->Apply(LinkArgs);
BENCHMARK_TEMPLATE(BM_SharedLinkSim, Strict)->Apply(LinkArgs);
BENCHMARK_TEMPLATE(BM_SharedLinkSim, Drr)->Apply(LinkArgs);

void PrintSummary() {
  std::printf("\n=== qos summary (medians over repetitions; ratios within the same run) ===\n");
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("machine: %u hardware threads, load average %.2f at the end; link threads %s\n",
              std::thread::hardware_concurrency(), load[0],
              g_boost_failed.load() ? "at normal priority (nice -20 refused)" : "at nice -20");
  const double deque = Median("pushpop/deque");
  std::printf("push+pop, 1 thread, M items/s (target >= 10; baseline std::deque %.1f):\n", deque);
  for (const char* m : {"fifo", "strict", "drr"}) {
    const double v = Median(std::string("pushpop/") + m);
    std::printf("  %-6s %6.1f  (%.2fx deque)\n", m, v, v / deque);
  }
  std::printf("LockedScheduler, M items/s: 1 thread through the lock | 2 producers + 1 consumer\n");
  for (const char* m : {"fifo", "strict", "drr"}) {
    std::printf("  %-6s %6.1f | %6.1f\n", m, Median(std::string("mpsc/") + m + "/0"),
                Median(std::string("mpsc/") + m + "/2"));
  }
  std::printf(
      "shared link B=1 GiB/s, critical 4 KiB items at 20%% load, bulk window 32 items;\n"
      "critical queueing delay us (alone -> with bulk), P99 ratio (target <= 2), bulk kept "
      "(target >= 0.90; in brackets without the lag artifact's idle time):\n");
  for (const char* kind : {"link", "sim"}) {
    std::printf(kind[0] == 'l' ? " consumer thread, real time:\n" : " virtual-time simulation:\n");
    for (const char* cfg : {"32/65536", "8/65536", "32/262144", "8/1048576"}) {
      std::printf(" burst %s B bulk items:\n", cfg);
      for (const char* m : {"fifo", "strict", "drr"}) {
        const std::string k = std::string(kind) + "/" + m + "/" + cfg;
        if (Records().count(k + "/ratio") == 0) continue;
        std::printf(
            "  %-6s P50 %7.1f -> %8.1f  P99 %7.1f -> %8.1f  ratio %6.2f  kept %.3f (%.3f)  late "
            "%.2f ms\n",
            m, Median(k + "/alone_p50"), Median(k + "/bulk_p50"), Median(k + "/alone_p99"),
            Median(k + "/bulk_p99"), Median(k + "/ratio"), Median(k + "/kept"),
            Median(k + "/kept_adj"), Median(k + "/late_ms"));
      }
    }
  }
}

}  // namespace
}  // namespace mooncake::qos

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  mooncake::qos::PrintSummary();
  return 0;
}
