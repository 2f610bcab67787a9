// How one master behaves as it grows: 10K, 1M, 10M objects over 1,000
// mounted segments, and 1,000 workers heartbeating at 1 Hz (docs/master_scale.md).
//
//   bazel run -c opt //mooncake/store/master:master_scale_benchmark -- --objects=10K,1M,10M
//
// One process, a real Master<> (TLSF segments, LRU eviction). The master never
// touches segment bytes (segment_pool.h: a segment is a size and an owner), so
// 10M objects of 4 KiB "fill" 40 GiB of segments that exist only as numbers.
// For each object count N, in a fresh master on a FakeClock (time moves only
// when the benchmark moves it, so no put, lease or worker times out mid-run):
//
//   startup   Create + mounting the segments (one per simulated worker)
//   load      N objects (PutStart + PutEnd; the master has no batch put), half
//             of them block objects in 64-block chains (rpc::BlockObjectKey of
//             index::BlockKeyer chains), to fill 90% of the segments; rate, and
//             memory growth per object (RSS from /proc/self/statm; malloc'd
//             bytes from mallinfo2), right after the load and again once the
//             put deadlines of the load have been swept by Tick
//   reads     GetReplicas (random existing keys, 1 thread and --threads, direct
//             and over rpc::InProcessChannel + MasterService), PrefixQuery of
//             whole 64-block chains (probe, and with replicas + lease),
//             Exists, BatchExists (64 keys a call); leases released in
//             batches of 256 inside the timed loop, as a client would
//   remove    Remove of random committed user keys
//   evict     puts until use passes the high watermark, then Tick until it
//             stops evicting: Tick time per object evicted
//   shutdown  destruction of the master with its objects
//
// Then, once: put latency with 10, 100 and 1,000 segments mounted, and 1,000
// workers (one segment each) heartbeating at 1 Hz on a real clock: the CPU
// they cost the process, with and without the 100 ms Tick timer.
//
// Rates are the median of --reps runs of --seconds each; random keys are drawn
// uniformly from all N (formatted per call, so the client's share of the
// cost is the same at every N). The baseline of every ratio (10K) is measured
// in the same run.
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/inline_string.h"
#include "mooncake/base/mutex.h"
#include "mooncake/index/block_key.h"
#include "mooncake/store/master/internal/deadline_queue.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"
#include "mooncake/store/rpc/service.h"

ABSL_FLAG(std::string, objects, "10K,1M", "object counts, comma-separated (K = 1e3, M = 1e6)");
ABSL_FLAG(int, segments, 1000, "segments mounted for each N, one per simulated worker");
ABSL_FLAG(uint64_t, object_bytes, 4096, "size of every object");
ABSL_FLAG(double, block_fraction, 0.5, "share of the N objects that are block objects");
ABSL_FLAG(int, chain_blocks, 64, "blocks per chain (PrefixQuery asks for whole chains)");
ABSL_FLAG(double, fill, 0.90, "segment use after the load (below the 0.95 high watermark)");
ABSL_FLAG(int, threads, 0, "threads for the load and the multi-thread reads; 0 = cores");
ABSL_FLAG(double, seconds, 0.5, "length of one rate run");
ABSL_FLAG(int, reps, 3, "rate runs per figure (median)");
ABSL_FLAG(bool, realistic_ids, true,
          "router-style worker ids (~70 B) and 32-hex machine-id host ids, as workers send; "
          "false: 11-byte ids that fit std::string's inline buffer");
ABSL_FLAG(int, workers, 1000, "workers of the heartbeat section");
ABSL_FLAG(double, heartbeat_seconds, 5, "length of each paced 1 Hz heartbeat run");
ABSL_FLAG(double, max_load_seconds, 300, "a load still running after this is stopped");

namespace mooncake::master {
namespace {

using M = Master<>;
using SteadyClock = std::chrono::steady_clock;

double Since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

double Median(std::vector<double> v) {
  MC_ASSERT(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Threads() {
  const int t = absl::GetFlag(FLAGS_threads);
  return t > 0 ? t : std::max(1u, std::thread::hardware_concurrency());
}

// ---- The machine and the process ----------------------------------------------

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

uint64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    uint64_t kb = 0;
    if (line.starts_with("MemAvailable:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(13, line.size() - 16)), &kb)) {
      return kb * 1024;
    }
  }
  return 0;
}

struct Memory {
  uint64_t rss_bytes = 0;
  uint64_t malloc_bytes = 0;  // in use: arenas' allocated chunks + mmapped chunks
};

Memory ReadMemory() {
  malloc_trim(0);  // hand freed pages back, so RSS deltas count live data only
  Memory m;
  std::ifstream in("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  in >> size_pages >> resident_pages;
  m.rss_bytes = resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const struct mallinfo2 mi = mallinfo2();
  m.malloc_bytes = mi.uordblks + mi.hblkhd;
  return m;
}

double ProcessCpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// ---- What the benchmark puts --------------------------------------------------

std::string WorkerId(int w) {
  if (!absl::GetFlag(FLAGS_realistic_ids)) return absl::StrCat("worker-", 10000 + w);
  // The shape rpc::FormatWorkerId gives a worker (rpc/worker_id.h).
  return absl::StrCat("router://gpu-node-", 1000 + w, "/", 40000 + w, "|local://0|shm://@mc.",
                      40000 + w, ".0|tcp://10.0.", w / 256, ".", w % 256, ":4000#", w + 1);
}

std::string HostId(int w) {
  if (!absl::GetFlag(FLAGS_realistic_ids)) return absl::StrCat("host-", 10000 + w);
  char buf[33];  // a machine-id: 32 hex digits
  std::snprintf(buf, sizeof(buf), "%016" PRIx64 "%016" PRIx64, StableHash64(&w, sizeof(w)),
                uint64_t{0x5eedULL} * static_cast<uint64_t>(w + 1));
  return buf;
}

// N objects: user keys "obj-<i>" for i < users, then chains of block objects.
struct Workload {
  uint64_t n = 0;
  uint64_t users = 0;
  uint64_t chains = 0;
  uint64_t chain_blocks = 0;
  std::vector<Hash128> blocks;  // chain c is blocks[c * chain_blocks, ...)

  static Workload Make(uint64_t n) {
    Workload w;
    w.n = n;
    w.chain_blocks = static_cast<uint64_t>(absl::GetFlag(FLAGS_chain_blocks));
    w.chains = static_cast<uint64_t>(static_cast<double>(n) * absl::GetFlag(FLAGS_block_fraction)) /
               w.chain_blocks;
    w.users = n - w.chains * w.chain_blocks;
    const index::BlockKeyer keyer =
        *index::BlockKeyer::Create(index::KeyNamespace{.model_id = "scale-model"}, 16);
    w.blocks.resize(w.chains * w.chain_blocks);
    std::vector<uint32_t> tokens(16);
    for (uint64_t c = 0; c < w.chains; ++c) {
      Hash128 parent = keyer.root();
      for (uint64_t b = 0; b < w.chain_blocks; ++b) {
        std::iota(tokens.begin(), tokens.end(), static_cast<uint32_t>(c * 7 + b * 131));
        tokens[0] = static_cast<uint32_t>(c);
        parent = keyer.Next(parent, tokens);
        w.blocks[c * w.chain_blocks + b] = parent;
      }
    }
    return w;
  }

  // Object i's key into *key (reused: no allocation once it has grown).
  void Key(uint64_t i, std::string* key) const {
    if (i < users) {
      key->assign("obj-");
      absl::StrAppend(key, i);
      return;
    }
    key->resize(rpc::kBlockObjectKeyBytes);
    rpc::WriteBlockObjectKey(blocks[i - users], key);
  }
};

// ---- Driving a master -------------------------------------------------------

struct Bench {
  FakeClock clock{1'000'000'000};
  std::unique_ptr<M> master;
};

MasterOptions ScaleOptions() {
  MasterOptions o;
  // Workers on a FakeClock never heartbeat; time is moved by hand here.
  o.membership.heartbeat_timeout_ms = int64_t{1} << 40;
  return o;
}

void Mount(M& m, int workers, uint64_t segment_bytes) {
  for (int w = 0; w < workers; ++w) {
    proto::MountSegmentRequest r;
    r.mutable_segment()->set_worker_id(WorkerId(w));
    r.mutable_segment()->set_name("dram");
    r.mutable_segment()->set_size_bytes(segment_bytes);
    r.mutable_segment()->mutable_endpoint()->set_host_id(HostId(w));
    MC_ASSERT(m.MountSegment(r).ok(), "mount");
  }
}

bool Put(M& m, const std::string& key, uint64_t bytes) {
  proto::PutStartRequest s;
  s.set_key(key);
  s.set_size_bytes(bytes);
  auto started = m.PutStart(s);
  if (!started.ok()) return false;
  proto::PutEndRequest e;
  e.set_key(key);
  e.set_put_id(started->put_id());
  return m.PutEnd(e).ok();
}

// Moves time past every put deadline and lease, and ticks until nothing more
// expires (each Tick takes at most tick_batch_max of each).
void Settle(Bench& b) {
  b.clock.AdvanceMs(b.master->options().max_lease_ms + b.master->options().put_timeout_ms + 1000);
  for (;;) {
    const TickReport r = b.master->Tick();
    if (r.puts_timed_out == 0 && r.leases_expired == 0 && r.objects_expired == 0) break;
  }
}

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Runs body(thread, stop) on `threads` threads for --seconds; body returns
// the units it did. Median units/s over --reps runs. One thread: units per
// second of that thread's CPU time, so that other processes sharing the
// cores do not show up as a slower master. More threads: per wall second
// (what contention between them costs is the point).
template <typename Body>
double RatePerSecond(int threads, Body&& body) {
  std::vector<double> rates;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    std::atomic<bool> stop{false};
    std::vector<uint64_t> done(static_cast<size_t>(threads));
    std::vector<double> cpu(static_cast<size_t>(threads));
    const auto t0 = SteadyClock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const double c0 = ThreadCpuSeconds();
        done[static_cast<size_t>(t)] = body(t, stop);
        cpu[static_cast<size_t>(t)] = ThreadCpuSeconds() - c0;
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
    stop.store(true, std::memory_order_relaxed);  // relaxed: a flag; join publishes `done`
    for (auto& t : ts) t.join();
    const double secs = threads == 1 ? cpu[0] : Since(t0);
    rates.push_back(static_cast<double>(std::accumulate(done.begin(), done.end(), uint64_t{0})) /
                    secs);
  }
  return Median(rates);
}

// Releases leases in batches of 256, as a client does.
class LeaseBatch {
 public:
  explicit LeaseBatch(M* m) : m_(m) {}
  ~LeaseBatch() { Flush(); }
  void Add(uint64_t id) {
    rel_.add_lease_ids(id);
    if (rel_.lease_ids_size() == 256) Flush();
  }
  void Flush() {
    if (rel_.lease_ids_size() == 0) return;
    MC_ASSERT(m_->ReleaseLeases(rel_).ok(), "release");
    rel_.clear_lease_ids();
  }

 private:
  M* m_;
  proto::ReleaseLeasesRequest rel_;
};

// ---- The table --------------------------------------------------------------

class Table {
 public:
  explicit Table(size_t columns) : columns_(columns) {}
  void Set(const std::string& row, size_t col, double v) {
    auto [it, fresh] = index_.try_emplace(row, rows_.size());
    if (fresh) rows_.push_back({row, std::vector<double>(columns_, -1)});
    rows_[it->second].values[col] = v;
  }
  std::optional<double> Get(const std::string& row, size_t col) const {
    auto it = index_.find(row);
    if (it == index_.end() || rows_[it->second].values[col] < 0) return std::nullopt;
    return rows_[it->second].values[col];
  }
  void Print(const std::vector<std::string>& headers) const {
    std::printf("| %-44s |", "figure");
    for (const std::string& h : headers) std::printf(" %14s |", h.c_str());
    std::printf("\n|%s|", std::string(46, '-').c_str());
    for (size_t i = 0; i < headers.size(); ++i) std::printf("%s:|", std::string(15, '-').c_str());
    std::printf("\n");
    for (const Row& r : rows_) {
      std::printf("| %-44s |", r.name.c_str());
      for (double v : r.values) {
        if (v < 0) {
          std::printf(" %14s |", "-");
        } else if (v >= 1e5 || v == static_cast<double>(static_cast<int64_t>(v))) {
          std::printf(" %14.0f |", v);
        } else {
          std::printf(" %14.3g |", v);
        }
      }
      std::printf("\n");
    }
  }

 private:
  struct Row {
    std::string name;
    std::vector<double> values;
  };
  size_t columns_;
  std::vector<Row> rows_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// ---- One object count -------------------------------------------------------

// Loads w's objects on Threads() threads; returns how many went in (fewer
// than w.n only when --max_load_seconds ran out).
uint64_t Load(M& m, const Workload& w, uint64_t bytes, double* secs) {
  const int threads = Threads();
  std::atomic<uint64_t> loaded{0};
  std::atomic<bool> late{false};
  const auto t0 = SteadyClock::now();
  const double limit = absl::GetFlag(FLAGS_max_load_seconds);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::string key;
      uint64_t mine = 0;
      // Interleaved, so every thread puts user keys and whole chains alike.
      for (uint64_t i = static_cast<uint64_t>(t); i < w.n; i += static_cast<uint64_t>(threads)) {
        if ((mine & 1023) == 0 && (late.load(std::memory_order_relaxed) || Since(t0) > limit)) {
          late.store(true, std::memory_order_relaxed);  // relaxed: a flag
          break;
        }
        w.Key(i, &key);
        MC_ASSERT(Put(m, key, bytes), "load put");
        ++mine;
      }
      loaded.fetch_add(mine, std::memory_order_relaxed);
    });
  }
  for (auto& t : ts) t.join();
  *secs = Since(t0);
  return loaded.load();
}

// The same calls over a hot set of fixed size (4,096 objects, 64 chains)
// spread across all N: what stays of the rate when the working set fits in
// the caches at every N, i.e. the algorithms' scaling apart from the memory
// hierarchy's.
void MeasureHotReads(Bench& b, const Workload& w, Table& tab, size_t col) {
  M& m = *b.master;
  std::vector<proto::GetReplicasRequest> gets(4096);
  for (size_t k = 0; k < gets.size(); ++k) {
    w.Key((k * 2'654'435'761u) % w.n, gets[k].mutable_key());
  }
  tab.Set("GetReplicas ops/s, 1 thread, 4096 hot keys", col,
          RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
            LeaseBatch leases(&m);
            uint64_t n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
              auto r = m.GetReplicas(gets[n % gets.size()]);
              MC_ASSERT(r.ok(), "GetReplicas of an existing key");
              leases.Add(r->lease().lease_id());
              ++n;
            }
            return n;
          }));
  if (w.chains > 0) {
    std::vector<proto::PrefixQueryRequest> chains(64);
    for (size_t k = 0; k < chains.size(); ++k) {
      const uint64_t c = (k * 2'654'435'761u) % w.chains;
      for (uint64_t j = 0; j < w.chain_blocks; ++j) {
        rpc::ToProto(w.blocks[c * w.chain_blocks + j], chains[k].add_chain());
      }
    }
    const double queries = RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        auto r = m.PrefixQuery(chains[n % chains.size()]);
        MC_ASSERT(r.ok() && r->matched() == w.chain_blocks, "every chain is cached");
        ++n;
      }
      return n;
    });
    tab.Set("PrefixQuery blocks/s, probe, 64 hot chains", col,
            queries * static_cast<double>(w.chain_blocks));
  }
  Settle(b);
}

void MeasureReads(Bench& b, const Workload& w, Table& tab, size_t col) {
  M& m = *b.master;
  auto get_body = [&](int t, std::atomic<bool>& stop) {
    std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
    proto::GetReplicasRequest req;
    LeaseBatch leases(&m);
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      w.Key(rng() % w.n, req.mutable_key());
      auto r = m.GetReplicas(req);
      MC_ASSERT(r.ok(), "GetReplicas of an existing key");
      leases.Add(r->lease().lease_id());
      ++n;
    }
    return n;
  };
  tab.Set("GetReplicas ops/s, 1 thread", col, RatePerSecond(1, get_body));
  tab.Set(absl::StrCat("GetReplicas ops/s, ", Threads(), " threads"), col,
          RatePerSecond(Threads(), get_body));
  Settle(b);

  // The RPC path: the same call through MasterService's handlers over an
  // in-process channel (request and response serialized as on the wire).
  MasterService<M> service(&m, {});
  rpc::ServiceRegistry registry;
  MC_ASSERT(service.Register(&registry).ok(), "register");
  rpc::InProcessChannel channel(&registry);
  tab.Set("GetReplicas ops/s, in-process RPC, 1 thread", col,
          RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
            std::mt19937_64 rng(99);
            proto::GetReplicasRequest req;
            LeaseBatch leases(&m);
            uint64_t n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
              w.Key(rng() % w.n, req.mutable_key());
              auto r = rpc::Call<rpc::GetReplicasMethod>(channel, req);
              MC_ASSERT(r.ok(), "GetReplicas RPC");
              leases.Add(r->lease().lease_id());
              ++n;
            }
            return n;
          }));
  Settle(b);
  MeasureHotReads(b, w, tab, col);

  if (w.chains > 0) {
    std::vector<proto::PrefixQueryRequest> chains(4096);
    std::mt19937_64 rng(5);
    for (auto& q : chains) {
      const uint64_t c = rng() % w.chains;
      for (uint64_t k = 0; k < w.chain_blocks; ++k) {
        rpc::ToProto(w.blocks[c * w.chain_blocks + k], q.add_chain());
      }
    }
    for (const bool with_replicas : {false, true}) {
      for (auto& q : chains) q.set_with_replicas(with_replicas);
      const double queries = RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
        LeaseBatch leases(&m);
        uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          auto r = m.PrefixQuery(chains[n % chains.size()]);
          MC_ASSERT(r.ok() && r->matched() == w.chain_blocks, "every chain is cached");
          if (with_replicas) leases.Add(r->lease().lease_id());
          ++n;
        }
        return n;
      });
      tab.Set(with_replicas ? "PrefixQuery blocks/s, with replicas" : "PrefixQuery blocks/s, probe",
              col, queries * static_cast<double>(w.chain_blocks));
    }
    Settle(b);
  }

  tab.Set("Exists ops/s", col, RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
            std::mt19937_64 rng(11);
            proto::ExistsRequest req;
            uint64_t n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
              w.Key(rng() % w.n, req.mutable_key());
              MC_ASSERT(m.Exists(req)->exists(), "exists");
              ++n;
            }
            return n;
          }));
  tab.Set("BatchExists keys/s (64 a call)", col,
          RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
            std::mt19937_64 rng(13);
            proto::BatchExistsRequest req;
            for (int k = 0; k < 64; ++k) req.add_keys();
            uint64_t n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
              for (int k = 0; k < 64; ++k) w.Key(rng() % w.n, req.mutable_keys(k));
              auto r = m.BatchExists(req);
              MC_ASSERT(r.ok() && r->exists_size() == 64, "batch exists");
              n += 64;
            }
            return n;
          }));
}

// Removes up to 10% of the user keys (at most 200K), drawn at random.
void MeasureRemove(M& m, const Workload& w, Table& tab, size_t col) {
  const uint64_t count = std::min<uint64_t>(w.users / 10, 200'000);
  if (count == 0) return;
  uint64_t stride = 1'000'003;  // distinct keys: a stride coprime to users
  while (std::gcd(stride, w.users) != 1) stride += 2;
  proto::RemoveRequest req;
  const auto t0 = SteadyClock::now();
  for (uint64_t k = 0; k < count; ++k) {
    w.Key((k * stride + 17) % w.users, req.mutable_key());
    MC_ASSERT(m.Remove(req).ok(), "remove");
  }
  tab.Set("Remove ops/s", col, static_cast<double>(count) / Since(t0));
}

// Puts past the high watermark, then ticks until Tick evicts no more.
void MeasureEviction(Bench& b, uint64_t bytes, Table& tab, size_t col) {
  M& m = *b.master;
  const TickReport idle = m.Tick();
  MC_ASSERT(idle.evicted_objects == 0, "below the watermark before the fill");
  const MasterStats st = m.Stats();
  const double target =
      (m.options().high_watermark + 0.002) * static_cast<double>(st.capacity_bytes);
  const uint64_t extra = static_cast<uint64_t>((target - static_cast<double>(st.used_bytes)) /
                                               static_cast<double>(bytes)) +
                         1;
  std::string key;
  const auto tp = SteadyClock::now();
  for (uint64_t i = 0; i < extra; ++i) {
    key.assign("fill-");
    absl::StrAppend(&key, i);
    MC_ASSERT(Put(m, key, bytes), "fill put");
  }
  tab.Set("Put us, N loaded (fill, 1 thread)", col, Since(tp) * 1e6 / static_cast<double>(extra));
  uint64_t evicted = 0, ticks = 0;
  double total = 0, longest = 0;
  for (; ticks < 100'000; ++ticks) {
    const auto t0 = SteadyClock::now();
    const TickReport r = m.Tick();
    const double dt = Since(t0);
    if (r.evicted_objects == 0) break;
    evicted += r.evicted_objects;
    total += dt;
    longest = std::max(longest, dt);
  }
  MC_ASSERT(evicted > 0, "the fill passed the high watermark");
  tab.Set("Eviction objects evicted (to low watermark)", col, static_cast<double>(evicted));
  tab.Set("Eviction ns per object (Tick)", col, total * 1e9 / static_cast<double>(evicted));
  tab.Set("Eviction longest Tick ms", col, longest * 1e3);
  tab.Set("Eviction Ticks that evicted", col, static_cast<double>(ticks));
  const MasterStats after = m.Stats();
  tab.Set("Eviction: use after those Ticks (low wm 0.85)", col,
          static_cast<double>(after.used_bytes) / static_cast<double>(after.capacity_bytes));
}

// Heartbeats of every mounted worker, direct: ns per call.
double HeartbeatNs(M& m, int workers) {
  std::vector<proto::HeartbeatRequest> reqs(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) {
    reqs[static_cast<size_t>(i)].set_worker_id(WorkerId(i));
    reqs[static_cast<size_t>(i)].add_usage()->set_segment_id(static_cast<uint64_t>(i) + 1);
  }
  return 1e9 / RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
           uint64_t n = 0;
           while (!stop.load(std::memory_order_relaxed)) {
             proto::HeartbeatRequest& r = reqs[n % reqs.size()];
             r.set_sequence(r.sequence() + 1);
             MC_ASSERT(!m.Heartbeat(r)->remount_required(), "known worker");
             ++n;
           }
           return n;
         });
}

// Returns false if the load did not finish in time.
bool RunOne(uint64_t n, Table& tab, size_t col) {
  const uint64_t bytes = absl::GetFlag(FLAGS_object_bytes);
  const int segments = absl::GetFlag(FLAGS_segments);
  const Workload w = Workload::Make(n);
  const uint64_t segment_bytes =
      (static_cast<uint64_t>(static_cast<double>(n * bytes) / absl::GetFlag(FLAGS_fill)) /
           static_cast<uint64_t>(segments) / 64 +
       2) *
      64;
  Bench b;
  auto t0 = SteadyClock::now();
  b.master = *M::Create(ScaleOptions(), &b.clock);
  tab.Set("Startup: Create ms", col, Since(t0) * 1e3);
  t0 = SteadyClock::now();
  Mount(*b.master, segments, segment_bytes);
  tab.Set(absl::StrCat("Startup: mount ", segments, " segments ms"), col, Since(t0) * 1e3);
  const Memory m0 = ReadMemory();  // the objects' growth only, not the segments'

  double load_secs = 0;
  const uint64_t loaded = Load(*b.master, w, bytes, &load_secs);
  const Memory m1 = ReadMemory();
  tab.Set("Objects loaded", col, static_cast<double>(loaded));
  tab.Set(absl::StrCat("Load puts/s (", Threads(), " threads)"), col,
          static_cast<double>(loaded) / load_secs);
  tab.Set("Load seconds", col, load_secs);
  const double per = static_cast<double>(loaded);
  tab.Set("RSS bytes/object, after load", col,
          static_cast<double>(m1.rss_bytes - m0.rss_bytes) / per);
  tab.Set("malloc bytes/object, after load", col,
          static_cast<double>(m1.malloc_bytes - m0.malloc_bytes) / per);
  t0 = SteadyClock::now();
  Settle(b);  // the load's put deadlines leave the queue
  tab.Set("Put-deadline sweep ns/object (Tick)", col, Since(t0) * 1e9 / per);
  const Memory m2 = ReadMemory();
  tab.Set("RSS bytes/object, deadlines swept", col,
          static_cast<double>(m2.rss_bytes - m0.rss_bytes) / per);
  tab.Set("malloc bytes/object, deadlines swept", col,
          static_cast<double>(m2.malloc_bytes - m0.malloc_bytes) / per);
  if (loaded < n) {
    std::printf("N=%" PRIu64 ": the load passed --max_load_seconds after %" PRIu64
                " objects; the rest of this column is skipped\n",
                n, loaded);
    return false;
  }
  std::printf("N=%" PRIu64 ": loaded in %.1f s, measuring\n", n, load_secs);
  std::fflush(stdout);

  MeasureReads(b, w, tab, col);
  tab.Set("Heartbeat ns (direct)", col, HeartbeatNs(*b.master, segments));
  MeasureRemove(*b.master, w, tab, col);
  MeasureEviction(b, bytes, tab, col);
  t0 = SteadyClock::now();
  b.master.reset();
  tab.Set("Shutdown: destroy master ms", col, Since(t0) * 1e3);
  return true;
}

// ---- Once: placement across many segments, and 1,000 workers --------------

// Mean PutStart+PutEnd us into a master with `segments` segments.
double PutUs(int segments, int puts) {
  FakeClock clock(1'000'000'000);
  auto m = *M::Create(ScaleOptions(), &clock);
  Mount(*m, segments, uint64_t{1} << 34);
  std::string key;
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < puts; ++i) {
    key.assign("p-");
    absl::StrAppend(&key, i);
    MC_ASSERT(Put(*m, key, absl::GetFlag(FLAGS_object_bytes)), "put");
  }
  return Since(t0) * 1e6 / puts;
}

struct WorkerFigures {
  double heartbeat_direct_ns = 0;
  double heartbeat_rpc_ns = 0;
  double idle_tick_us = 0;
  double paced_core_fraction = 0;         // heartbeats only
  double paced_ticker_core_fraction = 0;  // heartbeats and the 100 ms Tick timer
  uint64_t remounts = 0;                  // workers that expired during the paced runs
  size_t alive_after_ticks = 0;           // workers left after the idle Ticks
};

// `workers` heartbeats spread evenly over each second, for `seconds`, over the
// in-process channel. Returns the process CPU per wall second. A worker told
// to remount (it was silent past the timeout: the process was starved)
// remounts, as a real one would, and is counted in *remounts.
double PacedHeartbeats(M& m, rpc::InProcessChannel& ch, int workers, double seconds,
                       uint64_t* remounts) {
  std::vector<proto::HeartbeatRequest> reqs(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) {
    reqs[static_cast<size_t>(i)].set_worker_id(WorkerId(i));
    reqs[static_cast<size_t>(i)].add_usage()->set_segment_id(static_cast<uint64_t>(i) + 1);
  }
  const auto gap = std::chrono::duration<double>(1.0 / workers);
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = SteadyClock::now();
  auto next = t0;
  for (uint64_t n = 0; Since(t0) < seconds; ++n) {
    proto::HeartbeatRequest& r = reqs[n % reqs.size()];
    r.set_sequence(r.sequence() + 1);
    auto resp = rpc::Call<rpc::HeartbeatMethod>(ch, r);
    if (!resp.ok()) {
      std::printf("heartbeat failed: %s\n", resp.status().ToString().c_str());
      MC_ASSERT(false, "heartbeat RPC");
    }
    if (resp->remount_required()) {
      ++*remounts;
      proto::MountSegmentRequest mr;
      const int w = static_cast<int>(n % reqs.size());
      mr.mutable_segment()->set_worker_id(WorkerId(w));
      mr.mutable_segment()->set_name("dram");
      mr.mutable_segment()->set_size_bytes(uint64_t{1} << 34);
      mr.mutable_segment()->mutable_endpoint()->set_host_id(HostId(w));
      MC_ASSERT(m.MountSegment(mr).ok(), "remount");
    }
    next += std::chrono::duration_cast<SteadyClock::duration>(gap);
    std::this_thread::sleep_until(next);
  }
  return (ProcessCpuSeconds() - cpu0) / Since(t0);
}

WorkerFigures MeasureWorkers(int workers) {
  WorkerFigures f;
  auto m = *M::Create(MasterOptions{});  // the real clock: workers must keep heartbeating
  Mount(*m, workers, uint64_t{1} << 34);
  f.heartbeat_direct_ns = HeartbeatNs(*m, workers);
  MasterService<M> service(m.get(), {});
  rpc::ServiceRegistry registry;
  MC_ASSERT(service.Register(&registry).ok(), "register");
  rpc::InProcessChannel channel(&registry);
  {
    std::vector<proto::HeartbeatRequest> reqs(static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) {
      reqs[static_cast<size_t>(i)].set_worker_id(WorkerId(i));
      reqs[static_cast<size_t>(i)].add_usage()->set_segment_id(static_cast<uint64_t>(i) + 1);
    }
    f.heartbeat_rpc_ns = 1e9 / RatePerSecond(1, [&](int, std::atomic<bool>& stop) {
                           uint64_t n = 0;
                           while (!stop.load(std::memory_order_relaxed)) {
                             proto::HeartbeatRequest& r = reqs[n % reqs.size()];
                             r.set_sequence(r.sequence() + 1);
                             auto resp = rpc::Call<rpc::HeartbeatMethod>(channel, r);
                             MC_ASSERT(resp.ok() && !resp->remount_required(), "hb");
                             ++n;
                           }
                           return n;
                         });
  }
  // Every worker was heard from within the last --seconds: none expires here
  // unless the process stalls for the whole heartbeat timeout.
  std::vector<double> ticks;
  for (int i = 0; i < 50; ++i) {
    const auto t0 = SteadyClock::now();
    m->Tick();
    ticks.push_back(Since(t0) * 1e6);
  }
  f.idle_tick_us = Median(ticks);
  f.alive_after_ticks = m->Stats().workers;
  const double secs = absl::GetFlag(FLAGS_heartbeat_seconds);
  f.paced_core_fraction = PacedHeartbeats(*m, channel, workers, secs, &f.remounts);
  service.StartTicker();
  f.paced_ticker_core_fraction = PacedHeartbeats(*m, channel, workers, secs, &f.remounts);
  service.StopTicker();
  return f;
}

// ---- Memory per object, field by field ----------------------------------------

// glibc's chunk for a malloc of n bytes.
double Chunk(double n) { return std::max(32.0, std::ceil((n + 8) / 16) * 16); }
// The heap block of an InlineString key of `len` bytes (none up to 23).
double HeapKey(size_t len) {
  return len > InlineString::kInlineMax ? Chunk(static_cast<double>(len)) : 0;
}

// Slots an absl SwissTable holds after n one-by-one inserts (capacity 2^k-1,
// grown when size would pass 7/8 of it).
double SwissCapacity(double n) {
  double cap = 15;
  while (cap - std::floor(cap / 8) < n) cap = cap * 2 + 1;
  return cap;
}

void PrintEstimate(uint64_t n, size_t shards, int segments) {
  const double blocks = absl::GetFlag(FLAGS_block_fraction);
  // Block keys' copies in the table and the LRU, both InlineStrings.
  const double key_heap = 2 * blocks * HeapKey(rpc::kBlockObjectKeyBytes);
  // node_hash_map: a pointer and a control byte per slot, one node per object.
  const double slot = sizeof(void*);
  // The table's keys are InlineStrings: a block key (18 bytes) sits in the node.
  const double node = Chunk(sizeof(std::pair<const InlineString, ObjectMeta>));
  const double table = SwissCapacity(static_cast<double>(n) / static_cast<double>(shards)) *
                           (slot + 1) * static_cast<double>(shards) / static_cast<double>(n) +
                       node;
  // One replica sits inside ObjectMeta (ReplicaList's inline slot) and its
  // worker and host ids are interned: nothing on the heap per object.
  const double replica = 0;
  // LruPolicy: one slab entry per key (the key, its charge and two 32-bit
  // links, in chunks: no heap block each) and the index's 4-byte entry
  // number and control byte per slot.
  const double lru_node = sizeof(ObjectKey) + sizeof(uint64_t) + 2 * sizeof(uint32_t);
  const double lru_map =
      SwissCapacity(static_cast<double>(n)) * (sizeof(uint32_t) + 1) / static_cast<double>(n);
  // TlsfAllocator keeps one 40-byte record per live allocation, in a vector.
  const double per_segment = static_cast<double>(n) / segments;
  const double tlsf =
      40 * std::exp2(std::ceil(std::log2(std::max(1.0, per_segment)))) / per_segment;
  const double deadline = sizeof(master_internal::DeadlineEntry) *
                          std::exp2(std::ceil(std::log2(static_cast<double>(n)))) /
                          static_cast<double>(n);
  std::printf("\nEstimate at N=%" PRIu64
              ", bytes/object (sizeof ObjectMeta %zu, Replica %zu, table node "
              "%.0f):\n"
              "  object table: slots (64 shards, + empty, ctrl) and nodes  %6.0f\n"
              "  replica heap (1 Replica inline, ids interned)            %6.0f\n"
              "  block keys' heap copies (table, LRU)                      %6.0f\n"
              "  LRU slab entry (key, charge, links)                       %6.0f\n"
              "  LRU index slots                                           %6.0f\n"
              "  TLSF allocation records (vector, %d segments)            %6.0f\n"
              "  = steady state                                            %6.0f\n"
              "  + put-deadline queue after a burst (vector kept)          %6.0f\n",
              n, sizeof(ObjectMeta), sizeof(Replica), node, table, replica, key_heap, lru_node,
              lru_map, segments, tlsf, table + replica + key_heap + lru_node + lru_map + tlsf,
              deadline);
}

// ---- Main -----------------------------------------------------------------------

std::vector<uint64_t> ParseCounts(const std::string& s) {
  std::vector<uint64_t> out;
  for (std::string part : std::vector<std::string>(absl::StrSplit(s, ',', absl::SkipEmpty()))) {
    uint64_t mult = 1;
    if (part.ends_with('K') || part.ends_with('k')) mult = 1'000;
    if (part.ends_with('M') || part.ends_with('m')) mult = 1'000'000;
    if (mult != 1) part.pop_back();
    uint64_t v = 0;
    MC_ASSERT(absl::SimpleAtoi(part, &v) && v > 0, "--objects: counts like 10K,1M,10M");
    out.push_back(v * mult);
  }
  MC_ASSERT(!out.empty(), "--objects is empty");
  return out;
}

std::string CountName(uint64_t n) {
  if (n % 1'000'000 == 0) return absl::StrCat(n / 1'000'000, "M");
  if (n % 1'000 == 0) return absl::StrCat(n / 1'000, "K");
  return absl::StrCat(n);
}

void Verdict(const char* what, double figure, double bound, bool below) {
  const bool met = below ? figure <= bound : figure >= bound;
  std::printf("  %-62s %10.3g (%s %g): %s\n", what, figure, below ? "<=" : ">=", bound,
              met ? "met" : "NOT met");
}

void PrintTargets(const Table& tab, const std::vector<std::string>& names, size_t base, size_t last,
                  const WorkerFigures& wf) {
  std::printf("\nTargets (largest N that ran: %s; baseline: %s, same run)\n", names[last].c_str(),
              names[base].c_str());
  if (auto v = tab.Get("RSS bytes/object, deadlines swept", last)) {
    Verdict("metadata bytes/object (RSS growth, deadlines swept)", *v, 200, true);
  }
  if (auto v = tab.Get("malloc bytes/object, deadlines swept", last)) {
    Verdict("metadata bytes/object (malloc'd, deadlines swept)", *v, 200, true);
  }
  for (const std::string& row : {std::string("GetReplicas ops/s, 1 thread"),
                                 absl::StrCat("GetReplicas ops/s, ", Threads(), " threads"),
                                 std::string("GetReplicas ops/s, in-process RPC, 1 thread"),
                                 std::string("GetReplicas ops/s, 1 thread, 4096 hot keys"),
                                 std::string("PrefixQuery blocks/s, probe"),
                                 std::string("PrefixQuery blocks/s, probe, 64 hot chains"),
                                 std::string("PrefixQuery blocks/s, with replicas")}) {
    auto a = tab.Get(row, base), b = tab.Get(row, last);
    if (a && b) Verdict(absl::StrCat(row, ": ratio").c_str(), *b / *a, 0.8, false);
  }
  const double hb = wf.heartbeat_rpc_ns * 1000 / 1e9;
  Verdict("1,000 heartbeats/s, core fraction (in-process RPC, tight loop)", hb, 0.05, true);
  Verdict("1,000 heartbeats/s, core fraction (paced run, process CPU)", wf.paced_core_fraction,
          0.05, true);
}

int Main() {
  const std::vector<uint64_t> counts = ParseCounts(absl::GetFlag(FLAGS_objects));
  std::printf("machine: %s, %u cores; %.1f GiB available at start\n", CpuModel().c_str(),
              std::thread::hardware_concurrency(),
              static_cast<double>(MemAvailableBytes()) / (1u << 30));
  std::printf("objects of %" PRIu64
              " B, %.0f%% block objects in %d-block chains, %d segments "
              "filled to %.0f%%, %s ids; %d threads; rates: median of %d x %.2f s\n",
              absl::GetFlag(FLAGS_object_bytes), absl::GetFlag(FLAGS_block_fraction) * 100,
              absl::GetFlag(FLAGS_chain_blocks), absl::GetFlag(FLAGS_segments),
              absl::GetFlag(FLAGS_fill) * 100,
              absl::GetFlag(FLAGS_realistic_ids) ? "realistic" : "short", Threads(),
              absl::GetFlag(FLAGS_reps), absl::GetFlag(FLAGS_seconds));
  std::fflush(stdout);
  Table tab(counts.size());
  std::vector<std::string> names;
  for (uint64_t n : counts) names.push_back(CountName(n));
  size_t last = 0;
  double bytes_per_object = 1500;  // until a run measures it
  for (size_t c = 0; c < counts.size(); ++c) {
    const double need = static_cast<double>(counts[c]) * bytes_per_object * 1.3;
    if (need > 0.85 * static_cast<double>(MemAvailableBytes())) {
      std::printf("N=%s skipped: needs ~%.1f GiB, %.1f GiB available\n", names[c].c_str(),
                  need / (1u << 30), static_cast<double>(MemAvailableBytes()) / (1u << 30));
      break;
    }
    const bool done = RunOne(counts[c], tab, c);
    bytes_per_object =
        std::max(bytes_per_object * 0.5, tab.Get("RSS bytes/object, after load", c).value_or(1500));
    last = c;
    tab.Print(names);  // so far (a later failure keeps what ran)
    std::fflush(stdout);
    if (!done) break;
  }
  // --workers=0 skips the heartbeat section (its figures stay 0).
  const WorkerFigures wf = absl::GetFlag(FLAGS_workers) > 0
                               ? MeasureWorkers(absl::GetFlag(FLAGS_workers))
                               : WorkerFigures{};
  std::printf("\n");
  tab.Print(names);
  std::printf("\nPlacement: PutStart+PutEnd us with 10 / 100 / 1000 segments mounted: ");
  for (int s : {10, 100, 1000}) std::printf("%.2f  ", PutUs(s, 20000));
  std::printf(
      "\n%d workers: Heartbeat %.0f ns direct, %.0f ns in-process RPC; idle Tick %.0f us; "
      "paced 1 Hz: %.4f of a core (heartbeats), %.4f (with the 100 ms Tick timer); "
      "%" PRIu64 " workers expired and remounted (%zu alive after the idle Ticks)\n",
      absl::GetFlag(FLAGS_workers), wf.heartbeat_direct_ns, wf.heartbeat_rpc_ns, wf.idle_tick_us,
      wf.paced_core_fraction, wf.paced_ticker_core_fraction, wf.remounts, wf.alive_after_ticks);
  PrintEstimate(counts[last], ScaleOptions().shard_count, absl::GetFlag(FLAGS_segments));
  PrintTargets(tab, names, 0, last, wf);
  return 0;
}

}  // namespace
}  // namespace mooncake::master

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::master::Main();
}
