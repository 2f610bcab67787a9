// Replays the Mooncake conversation trace through the real Master with an SSD
// tier under its one worker, and reports the prefix hit rate by tier.
//
// The master only keeps metadata, so objects have a nominal size
// (--block_bytes, default 64 KiB, one 512-token block each) and nothing is
// stored: a scripted worker thread answers every OFFLOAD, LOAD and DROP at
// once through TierSync. Everything else is the store's own code: placement
// in a TLSF segment of 3M tokens' worth of blocks, LRU eviction writing back
// to a 30M-token tier (charged as the worker's SsdTier would be), the tier's
// own LRU when full, loads on read, puts asked to retry while offloads run.
//
// A request: PrefixQuery of its chain with replicas (the blocks found, in
// DRAM or on SSD, up to the first absent one; a block on SSD only is an SSD
// hit and starts its load; if any did, the query is asked again, every 20 us,
// until they are all in DRAM, as a client waits for its loads), then a put of
// every block from the first miss on (a block present further down is read
// instead, as trace_replay.h does).
// Same-run baselines: the same master without a tier at 3M tokens and at 33M
// tokens; mooncake/tier:tier_trace_replay runs the same trace through
// TieredStore. The first three rows use the store's default eviction policy
// (LRU); the last two, S3-FIFO (mooncake_store --eviction_policy=s3fifo).
//
// Run: bazel run -c opt //mooncake/store/master:master_tier_replay --
//      [--trace=/work/shared/traces/conversation_trace.jsonl] [--block_bytes=65536]
//      [--dram_tokens=3000000] [--ssd_tokens=30000000]
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/clock.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {
namespace {

namespace proto = ::mooncake::store::proto;
constexpr uint64_t kBlockTokens = 512;

struct Result {
  uint64_t requested = 0, dram_hits = 0, ssd_hits = 0;
  uint64_t offloads = 0, loads = 0, ssd_evictions = 0, failed_puts = 0;
  uint64_t load_waits = 0, loads_given_up = 0;  // requests that waited for loads; gave up
  std::string first_error;
};

// Answers every task at once, reporting in the next TierSync.
template <typename M>
class ScriptedWorker {
 public:
  ScriptedWorker(M* m, uint64_t capacity) : master_(m), capacity_(capacity) {
    Sync({});  // registers the tier before the first eviction
    thread_ = std::thread([this] { Loop(); });
  }
  ~ScriptedWorker() {
    stop_ = true;
    master_->StopTierWaits();
    thread_.join();
  }

 private:
  std::vector<uint64_t> Sync(const std::vector<uint64_t>& done) {
    proto::TierSyncRequest req;
    req.set_worker_id("w1");
    req.set_capacity_bytes(capacity_);
    req.set_max_tasks(static_cast<uint32_t>(rpc::kMaxTierTasks));
    req.set_wait_ms(done.empty() ? 20 : 0);
    for (const uint64_t id : done) req.add_results()->set_task_id(id);
    std::vector<uint64_t> ids;
    auto resp = master_->TierSync(req);
    if (!resp.ok()) return ids;
    for (const proto::TierTask& t : resp->tasks()) ids.push_back(t.task_id());
    return ids;
  }
  void Loop() {
    std::vector<uint64_t> done;
    while (!stop_) done = Sync(done);
  }

  M* const master_;
  const uint64_t capacity_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Through a master whose eviction policy is P (index::LruPolicy, the store's
// default, or index::S3FifoPolicy, its --eviction_policy=s3fifo).
template <typename P>
Result Replay(const std::vector<std::vector<Hash128>>& chains, uint64_t dram_tokens,
              uint64_t ssd_tokens, uint64_t block_bytes) {
  using M = Master<alloc::TlsfAllocator, P>;
  FakeClock clock(1'000'000'000);  // time stands still: no lease or heartbeat expires
  MasterOptions o;
  o.high_watermark = 0.99;  // the reference binary's defaults
  o.low_watermark = 0.97;
  auto m = M::Create(o, &clock);
  if (!m.ok()) std::abort();
  M& master = **m;
  proto::MountSegmentRequest mount;
  mount.mutable_segment()->set_worker_id("w1");
  mount.mutable_segment()->set_name("seg0");
  mount.mutable_segment()->set_size_bytes(dram_tokens / kBlockTokens * block_bytes);
  if (!master.MountSegment(mount).ok()) std::abort();
  std::unique_ptr<ScriptedWorker<M>> worker;
  if (ssd_tokens > 0) {
    const uint64_t record = ((block_bytes + 4095) / 4096 + 1) * 4096;  // SsdTier's charge
    worker = std::make_unique<ScriptedWorker<M>>(&master, ssd_tokens / kBlockTokens * record);
  }
  Result res;
  size_t n = 0;
  for (const std::vector<Hash128>& chain : chains) {
    res.requested += chain.size();
    proto::PrefixQueryRequest q;
    q.set_with_replicas(true);
    for (const Hash128& b : chain) rpc::ToProto(b, q.add_chain());
    auto r = master.PrefixQuery(q);
    if (!r.ok()) std::abort();
    for (const proto::BlockReplicas& b : r->blocks())
      ++(b.loading() ? res.ssd_hits : res.dram_hits);
    const auto release = [&](const proto::PrefixQueryResponse& a) {
      if (a.lease().lease_id() == 0) return;
      proto::ReleaseLeasesRequest rel;
      rel.add_lease_ids(a.lease().lease_id());
      (void)master.ReleaseLeases(rel);
    };
    const auto any_loading = [](const proto::PrefixQueryResponse& a) {
      for (const proto::BlockReplicas& b : a.blocks()) {
        if (b.loading()) return true;
      }
      return false;
    };
    release(*r);
    // Blocks only on SSD are being loaded: ask again until they are in DRAM,
    // as a client does before it reads them (the ask that finds them loaded
    // is a read, which the eviction policy sees).
    if (any_loading(*r)) {
      ++res.load_waits;
      proto::PrefixQueryRequest again;
      again.set_with_replicas(true);
      for (size_t i = 0; i < r->matched(); ++i) rpc::ToProto(chain[i], again.add_chain());
      bool loading = true;
      for (int ask = 0; loading && ask < 50'000; ++ask) {
        absl::SleepFor(absl::Microseconds(20));
        auto a = master.PrefixQuery(again);
        if (!a.ok()) std::abort();
        release(*a);
        loading = any_loading(*a);
      }
      if (loading) ++res.loads_given_up;
    }
    for (size_t i = r->matched(); i < chain.size(); ++i) {
      const std::string key = rpc::BlockObjectKey(chain[i]);
      proto::PutStartRequest put;
      put.set_key(key);
      put.set_size_bytes(block_bytes);
      put.set_checksum(1);
      auto start = master.PutStart(put);
      // DRAM full while offloads are in flight: ask again, as the client does.
      for (int ask = 0; ask < 100'000 && start.ok() && start->retry(); ++ask) {
        absl::SleepFor(absl::Microseconds(20));
        start = master.PutStart(put);
      }
      if (absl::IsAlreadyExists(start.status())) continue;  // present further down
      if (!start.ok() || start->retry()) {
        if (res.failed_puts++ == 0) res.first_error = start.status().ToString();
        continue;
      }
      proto::PutEndRequest end;
      end.set_key(key);
      end.set_put_id(start->put_id());
      if (!master.PutEnd(end).ok()) ++res.failed_puts;
    }
    if (++n % 64 == 0) master.Tick();
  }
  auto counter = [&](std::string_view kind) {
    auto c = master.metrics()->GetCounter("mooncake_master_tier_tasks_total", "",
                                          {{"kind", std::string(kind)}, {"result", "ok"}});
    return c.ok() ? (*c)->Value() : 0;
  };
  res.offloads = counter("offload");
  res.loads = counter("load");
  auto ev = master.metrics()->GetCounter("mooncake_master_tier_ssd_evictions_total", "", {});
  res.ssd_evictions = ev.ok() ? (*ev)->Value() : 0;
  worker.reset();
  return res;
}

void Print(const std::string& name, const Result& r) {
  const double n = static_cast<double>(r.requested);
  std::printf(
      "%-30s DRAM hits %.4f  SSD hits %.4f  total %.4f  | offloads %llu loads %llu SSD evictions "
      "%llu failed puts %llu load waits %llu (gave up %llu)\n",
      name.c_str(), r.dram_hits / n, r.ssd_hits / n, (r.dram_hits + r.ssd_hits) / n,
      static_cast<unsigned long long>(r.offloads), static_cast<unsigned long long>(r.loads),
      static_cast<unsigned long long>(r.ssd_evictions),
      static_cast<unsigned long long>(r.failed_puts), static_cast<unsigned long long>(r.load_waits),
      static_cast<unsigned long long>(r.loads_given_up));
  if (!r.first_error.empty()) std::printf("  first failed put: %s\n", r.first_error.c_str());
}

// "3M" for whole millions of tokens, else the count.
std::string Tokens(uint64_t n) {
  return n % 1'000'000 == 0 ? absl::StrCat(n / 1'000'000, "M") : absl::StrCat(n);
}

int Main(int argc, char** argv) {
  uint64_t dram_tokens = 3'000'000, ssd_tokens = 30'000'000;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.substr(0, 14) == "--dram_tokens=") {
      dram_tokens = std::strtoull(argv[i] + 14, nullptr, 10);
    } else if (a.substr(0, 13) == "--ssd_tokens=") {
      ssd_tokens = std::strtoull(argv[i] + 13, nullptr, 10);
    } else {
      rest.push_back(argv[i]);
    }
  }
  const absl::StatusOr<index::TraceReplayFlags> flags = index::ParseTraceReplayFlags(
      static_cast<int>(rest.size()), rest.data(), {.block_bytes = 64 << 10}, 64);
  if (!flags.ok() || dram_tokens < kBlockTokens || ssd_tokens < kBlockTokens) {
    std::fprintf(
        stderr, "%s\n",
        flags.ok() ? "--dram_tokens and --ssd_tokens must be >= 512 (a block)"
                   : absl::StrCat(flags.status().message(), "; also --dram_tokens=N --ssd_tokens=N")
                         .c_str());
    return 2;
  }
  const uint64_t block_bytes = flags->block_bytes;
  auto requests = index::ReadTraceFile(flags->trace);
  if (!requests.ok()) {
    std::fprintf(stderr, "%s\n", std::string(requests.status().message()).c_str());
    return 1;
  }
  const index::BlockKeyer keyer = *index::BlockKeyer::Create(index::KeyNamespace{"trace"}, 1);
  std::vector<std::vector<Hash128>> chains;
  for (const index::TraceRequest& req : *requests) {
    std::vector<Hash128> chain;
    for (const index::BlockKey& k : index::TraceChain(keyer, req)) chain.push_back({k.low, k.high});
    if (chain.size() > rpc::kMaxChainBlocks) chain.resize(rpc::kMaxChainBlocks);
    chains.push_back(std::move(chain));
  }
  std::printf("trace %s: %zu requests; block = %llu tokens = %llu B (nominal)\n",
              flags->trace.c_str(), chains.size(), static_cast<unsigned long long>(kBlockTokens),
              static_cast<unsigned long long>(block_bytes));
  const absl::Time t0 = absl::Now();
  using Lru = index::LruPolicy<ObjectKey, ObjectKeyHash>;
  using S3Fifo = index::S3FifoPolicy<ObjectKey, ObjectKeyHash>;
  const std::string d = Tokens(dram_tokens), s = Tokens(ssd_tokens);
  const std::string both = Tokens(dram_tokens + ssd_tokens);
  Print(absl::StrCat("store: DRAM ", d, " over SSD ", s),
        Replay<Lru>(chains, dram_tokens, ssd_tokens, block_bytes));
  Print(absl::StrCat("store: DRAM ", d, " only"), Replay<Lru>(chains, dram_tokens, 0, block_bytes));
  Print(absl::StrCat("store: DRAM ", both, " only"),
        Replay<Lru>(chains, dram_tokens + ssd_tokens, 0, block_bytes));
  Print(absl::StrCat("s3fifo: DRAM ", d, " over SSD ", s),
        Replay<S3Fifo>(chains, dram_tokens, ssd_tokens, block_bytes));
  Print(absl::StrCat("s3fifo: DRAM ", d, " only"),
        Replay<S3Fifo>(chains, dram_tokens, 0, block_bytes));
  std::printf("(%.1f s)\n", absl::ToDoubleSeconds(absl::Now() - t0));
  return 0;
}

}  // namespace
}  // namespace mooncake::master

int main(int argc, char** argv) { return mooncake::master::Main(argc, argv); }
