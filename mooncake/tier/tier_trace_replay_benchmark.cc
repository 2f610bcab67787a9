// Replays the Mooncake conversation trace through TieredStore and reports the
// prefix hit rate by tier: DRAM hits, SSD hits, misses.
//
// Each 512-token block is one object. Prefix hit (as in
// mooncake/index/trace_replay.h): a request's blocks are looked up in order and
// its hit stops at its first miss; then every block from the miss on is
// inserted (or, if present further down, touched).
//
// Simulated runs (always): payloads are small stand-ins (--block_bytes,
// default 64 B) and budgets are scaled by the same factor, so 3M tokens of
// DRAM is 5,859 blocks' worth of stand-in bytes. Both tiers are DramTiers: the
// SSD tier is simulated by size, while TieredStore's own LRU demotion,
// write-back, promotion (2nd slow hit) and slow-tier eviction run for real.
// Baselines in the same run: DRAM only at the same DRAM size (write-back off),
// and DRAM only at DRAM + SSD size.
//
// Real-SSD runs (--ssd_dir=DIR): the same replay over a real SsdTier file in
// DIR holding 30M tokens' worth of --ssd_block_bytes (64 KiB) blocks, under a
// 3M-token DramTier. Every block is synthetic bf16 KV data
// (compress::SyntheticKvBytes slices) stamped with its key, every hit is
// compared byte for byte with what was put, and the run reports, beside the
// hit rates: the SSD's writes, reads and stored bytes, the latency of a get
// served by each tier, and the wall time. One run per --ssd_compression
// (never,auto: the record overhead, and what compression adds to the SSD's
// capacity). Exit status 1 on any wrong byte or failed operation.
//
// Run: bazel run -c opt //mooncake/tier:tier_trace_replay --
//      [--trace=/work/shared/traces/conversation_trace.jsonl] [--block_bytes=64]
//      [--ssd_dir=/tmp --ssd_block_bytes=65536 --ssd_compression=never,auto
//       --ssd_durability=no_sync --dram_tokens=3000000 --ssd_tokens=30000000
//       --max_requests=N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/tier/dram_tier.h"
#include "mooncake/tier/ssd_tier.h"
#include "mooncake/tier/tiered_store.h"

namespace mooncake::tier {
namespace {

constexpr uint64_t kBlockTokens = 512;

struct Result {
  uint64_t requested = 0, fast_hits = 0, slow_hits = 0, misses_requests = 0;
  uint64_t wrong_bytes = 0, get_errors = 0, put_errors = 0;
  std::vector<double> fast_us, slow_us;  // per get served by that tier (real runs)
  double seconds = 0;
  TieredStoreStats stats;
};

std::string KeyOf(const index::BlockKey& k) {
  std::string s(sizeof(k.low) + sizeof(k.high), '\0');
  std::memcpy(s.data(), &k.low, sizeof(k.low));
  std::memcpy(s.data() + sizeof(k.low), &k.high, sizeof(k.high));
  return s;
}

// Every block's bytes: a slice of one synthetic bf16 KV buffer at an offset
// (a whole 1024-channel row) the key picks, with the key written over its
// first bytes, so no two blocks are equal and a block read under the wrong
// key never compares equal.
class Payloads {
 public:
  explicit Payloads(uint64_t block_bytes)
      : block_bytes_(block_bytes),
        pool_(compress::SyntheticKvBytes(block_bytes + (16u << 20), compress::DType::kBFloat16)) {}

  void Fill(std::string_view key, std::span<std::byte> out) const {
    std::memcpy(out.data(), pool_.data() + Offset(key), block_bytes_);
    std::memcpy(out.data(), key.data(), std::min<size_t>(key.size(), block_bytes_));
  }
  bool Matches(std::string_view key, std::span<const std::byte> got) const {
    const size_t stamp = std::min<size_t>(key.size(), block_bytes_);
    return got.size() == block_bytes_ && std::memcmp(got.data(), key.data(), stamp) == 0 &&
           std::memcmp(got.data() + stamp, pool_.data() + Offset(key) + stamp,
                       block_bytes_ - stamp) == 0;
  }

 private:
  uint64_t Offset(std::string_view key) const {
    constexpr uint64_t kRow = 2048;  // 1024 bf16 channels
    const uint64_t rows = (pool_.size() - block_bytes_) / kRow + 1;
    return FastStableHash64(key.data(), key.size()) % rows * kRow;
  }

  uint64_t block_bytes_;
  std::vector<std::byte> pool_;
};

// The replay. `payloads` null: constant stand-in bytes, no checks, no timing.
template <typename Slow>
Result Replay(const std::vector<std::vector<std::string>>& chains, DramTier& fast, Slow& slow,
              const TieredStoreOptions& options, uint64_t block_bytes, const Payloads* payloads) {
  TieredStore<DramTier, Slow> store(fast, slow, options);
  std::vector<std::byte> payload(block_bytes, std::byte{0x5a}), buf(block_bytes);
  const ObjectMeta meta{.dtype = payloads != nullptr ? compress::DType::kBFloat16
                                                     : compress::DType::kBytes};
  Result res;
  const auto start = std::chrono::steady_clock::now();
  for (const std::vector<std::string>& chain : chains) {
    res.requested += chain.size();
    size_t i = 0;
    for (; i < chain.size(); ++i) {
      const TieredStoreStats before = store.stats();
      const auto t0 = std::chrono::steady_clock::now();
      const absl::StatusOr<ReadResult> r = store.Get(chain[i], buf);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (!r.ok()) {
        if (!absl::IsNotFound(r.status())) {
          ++res.get_errors;
          std::fprintf(stderr, "get: %s\n", std::string(r.status().message()).c_str());
        }
        break;
      }
      const TieredStoreStats after = store.stats();
      const bool slow_hit = after.slow_hits > before.slow_hits;
      res.fast_hits += after.fast_hits - before.fast_hits;
      res.slow_hits += after.slow_hits - before.slow_hits;
      if (payloads != nullptr) {
        (slow_hit ? res.slow_us : res.fast_us).push_back(us);
        if (!payloads->Matches(chain[i], std::span<const std::byte>(buf).first(r->raw_bytes))) {
          ++res.wrong_bytes;
        }
      }
    }
    if (i < chain.size()) ++res.misses_requests;
    for (; i < chain.size(); ++i) {
      if (payloads != nullptr) payloads->Fill(chain[i], payload);
      const absl::Status s = store.Put(chain[i], payload, meta);
      if (absl::IsAlreadyExists(s)) {
        (void)store.Get(chain[i], buf);
      } else if (!s.ok()) {
        ++res.put_errors;
        std::fprintf(stderr, "put: %s\n", std::string(s.message()).c_str());
      }
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.stats = store.stats();
  return res;
}

Result Simulated(const std::vector<std::vector<std::string>>& chains, uint64_t fast_tokens,
                 uint64_t slow_tokens, uint64_t block_bytes) {
  const uint64_t fast_bytes = fast_tokens / kBlockTokens * block_bytes;
  const uint64_t slow_bytes = std::max<uint64_t>(slow_tokens / kBlockTokens * block_bytes, 64);
  // The fast arena has slack; the store's byte budget is what limits it.
  DramTier fast(fast_bytes + 64 * block_bytes), slow(slow_bytes);
  TieredStoreOptions o{.fast_budget_bytes = fast_bytes, .promote_after_hits = 2};
  if (slow_tokens == 0) o.write_back = [](const ObjectInfo&) { return false; };
  return Replay(chains, fast, slow, o, block_bytes, nullptr);
}

void Print(const char* name, const Result& r) {
  const double n = static_cast<double>(r.requested);
  std::printf(
      "%-34s DRAM hits %.4f  SSD hits %.4f  total %.4f  misses %.4f  | promotions %llu "
      "demotions %llu slow evictions %llu\n",
      name, r.fast_hits / n, r.slow_hits / n, (r.fast_hits + r.slow_hits) / n,
      1 - (r.fast_hits + r.slow_hits) / n, static_cast<unsigned long long>(r.stats.promotions),
      static_cast<unsigned long long>(r.stats.demotions),
      static_cast<unsigned long long>(r.stats.slow_evictions));
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k];
}

struct Flags {
  index::TraceReplayFlags trace;
  std::string ssd_dir;  // empty: simulated runs only
  uint64_t dram_tokens = 3'000'000;
  uint64_t ssd_tokens = 30'000'000;
  uint64_t ssd_block_bytes = 64 << 10;
  std::vector<Compression> compressions = {Compression::kNever, Compression::kAuto};
  Durability durability = Durability::kNoSync;
  size_t max_requests = 0;  // 0: the whole trace
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&](std::string_view name) -> std::optional<std::string_view> {
      if (a.substr(0, name.size()) != name) return std::nullopt;
      return a.substr(name.size());
    };
    if (auto v = value("--ssd_dir=")) {
      f.ssd_dir = std::string(*v);
    } else if (auto v = value("--ssd_block_bytes=")) {
      f.ssd_block_bytes = std::strtoull(std::string(*v).c_str(), nullptr, 10);
      if (f.ssd_block_bytes < 4096 || f.ssd_block_bytes > (64u << 20)) {
        return absl::InvalidArgumentError("--ssd_block_bytes must be 4096..64Mi");
      }
    } else if (auto v = value("--ssd_compression=")) {
      f.compressions.clear();
      for (absl::string_view name : absl::StrSplit(AbslView(*v), ',')) {
        const std::optional<Compression> c =
            ParseCompression(std::string_view(name.data(), name.size()));
        if (!c) return absl::InvalidArgumentError(absl::StrCat("bad --ssd_compression ", name));
        f.compressions.push_back(*c);
      }
    } else if (auto v = value("--ssd_durability=")) {
      const std::optional<Durability> d = ParseDurability(*v);
      if (!d)
        return absl::InvalidArgumentError(absl::StrCat("bad --ssd_durability ", AbslView(*v)));
      f.durability = *d;
    } else if (auto v = value("--dram_tokens=")) {
      f.dram_tokens = std::strtoull(std::string(*v).c_str(), nullptr, 10);
    } else if (auto v = value("--ssd_tokens=")) {
      f.ssd_tokens = std::strtoull(std::string(*v).c_str(), nullptr, 10);
    } else if (auto v = value("--max_requests=")) {
      f.max_requests = std::strtoull(std::string(*v).c_str(), nullptr, 10);
    } else {
      rest.push_back(argv[i]);
    }
  }
  absl::StatusOr<index::TraceReplayFlags> trace = index::ParseTraceReplayFlags(
      static_cast<int>(rest.size()), rest.data(), {.block_bytes = 64}, 1);
  if (!trace.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        trace.status().message(),
        "; also --ssd_dir=DIR --ssd_block_bytes=N --ssd_compression=never,auto,always "
        "--ssd_durability=no_sync|process_crash|power_loss --dram_tokens=N --ssd_tokens=N "
        "--max_requests=N"));
  }
  f.trace = *trace;
  if (f.dram_tokens < kBlockTokens || f.ssd_tokens < kBlockTokens) {
    return absl::InvalidArgumentError("--dram_tokens and --ssd_tokens must be >= 512 (a block)");
  }
  return f;
}

// One real-SSD run; false if any byte was wrong or any operation failed.
bool RealSsdRun(const std::vector<std::vector<std::string>>& chains, const Flags& flags,
                Compression compression, const Payloads& payloads) {
  const uint64_t block = flags.ssd_block_bytes;
  const uint64_t fast_bytes = flags.dram_tokens / kBlockTokens * block;
  // --ssd_tokens of raw blocks plus the file's header block; records' own
  // headers and padding come out of it, as they would on a real device.
  const uint64_t file_bytes = std::max<uint64_t>(
      (flags.ssd_tokens / kBlockTokens * block + 4095) / 4096 * 4096 + 4096, 64 << 10);
  const std::string path = flags.ssd_dir + "/tier_trace_replay.ssd";
  SsdTierOptions o;
  o.paths = {path};
  o.start_empty = true;
  o.capacity_bytes_per_file = file_bytes;
  o.compression = compression;
  o.durability = flags.durability;
  absl::StatusOr<std::unique_ptr<SsdTier>> ssd = SsdTier::Open(o);
  if (!ssd.ok()) {
    std::fprintf(stderr, "SsdTier::Open(%s): %s\n", path.c_str(),
                 std::string(ssd.status().message()).c_str());
    return false;
  }
  const SsdTierInfo info = (*ssd)->info();
  DramTier fast(fast_bytes + 64 * block);
  const Result r =
      Replay(chains, fast, **ssd, {.fast_budget_bytes = fast_bytes, .promote_after_hits = 2}, block,
             &payloads);
  const std::string name =
      absl::StrCat("real SSD, compression ", AbslView(CompressionName(compression)));
  Print(name.c_str(), r);
  const TierStats& s = r.stats.slow;
  const double mib = 1024.0 * 1024;
  std::printf(
      "  %.1f s (%.0f requests/s); device probe read %.2f / write %.2f GB/s, direct_io=%d, "
      "durability %s\n",
      r.seconds, static_cast<double>(chains.size()) / r.seconds, info.device_read_bytes_per_s / 1e9,
      info.device_write_bytes_per_s / 1e9, info.direct_io ? 1 : 0,
      std::string(DurabilityName(flags.durability)).c_str());
  std::printf(
      "  SSD: %llu writes (%.1f MiB raw, %llu compressed), %llu reads (%.1f MiB), %llu removes; "
      "at the end %llu objects, %.1f MiB raw in %.1f MiB used of %.1f (raw/used %.3f)\n",
      static_cast<unsigned long long>(s.writes), static_cast<double>(s.bytes_written) / mib,
      static_cast<unsigned long long>(s.compressed_writes),
      static_cast<unsigned long long>(s.reads), static_cast<double>(s.bytes_read) / mib,
      static_cast<unsigned long long>(s.removes), static_cast<unsigned long long>(s.objects),
      static_cast<double>(s.raw_bytes) / mib, static_cast<double>(s.used_bytes) / mib,
      static_cast<double>(s.capacity_bytes) / mib,
      s.used_bytes == 0 ? 0.0
                        : static_cast<double>(s.raw_bytes) / static_cast<double>(s.used_bytes));
  std::printf(
      "  get served by DRAM: P50 %.1f us P99 %.1f us (%zu); by SSD: P50 %.1f us P99 %.1f us "
      "(%zu)\n",
      Percentile(r.fast_us, 0.5), Percentile(r.fast_us, 0.99), r.fast_us.size(),
      Percentile(r.slow_us, 0.5), Percentile(r.slow_us, 0.99), r.slow_us.size());
  std::printf(
      "  checks: %llu wrong blocks, %llu failed gets, %llu failed puts, %llu demote failures, "
      "%llu SSD I/O errors, %llu corrupt records\n",
      static_cast<unsigned long long>(r.wrong_bytes), static_cast<unsigned long long>(r.get_errors),
      static_cast<unsigned long long>(r.put_errors),
      static_cast<unsigned long long>(r.stats.demote_failures),
      static_cast<unsigned long long>(s.io_errors),
      static_cast<unsigned long long>(s.corrupt_records));
  ssd->reset();
  std::error_code ec;
  std::filesystem::remove(path, ec);
  return r.wrong_bytes == 0 && r.get_errors == 0 && r.put_errors == 0 && s.io_errors == 0 &&
         s.corrupt_records == 0;
}

int Main(int argc, char** argv) {
  const absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  const uint64_t block_bytes = flags->trace.block_bytes;
  auto requests = index::ReadTraceFile(flags->trace.trace);
  if (!requests.ok()) {
    std::fprintf(stderr, "%s\n", std::string(requests.status().message()).c_str());
    return 1;
  }
  if (flags->max_requests != 0 && requests->size() > flags->max_requests) {
    requests->resize(flags->max_requests);
  }
  const index::BlockKeyer keyer = *index::BlockKeyer::Create(index::KeyNamespace{"trace"}, 1);
  std::vector<std::vector<std::string>> chains;
  for (const index::TraceRequest& req : *requests) {
    std::vector<std::string> chain;
    for (const index::BlockKey& k : index::TraceChain(keyer, req)) chain.push_back(KeyOf(k));
    chains.push_back(std::move(chain));
  }
  std::printf("trace %s: %zu requests; block = %llu tokens, stand-in payload %llu B\n",
              flags->trace.trace.c_str(), chains.size(),
              static_cast<unsigned long long>(kBlockTokens),
              static_cast<unsigned long long>(block_bytes));
  const uint64_t dram = flags->dram_tokens, ssd = flags->ssd_tokens;
  const auto m = [](uint64_t tokens) {
    return absl::StrCat(static_cast<double>(tokens) / 1e6, "M");
  };
  Print(absl::StrCat("DRAM ", m(dram), " over SSD ", m(ssd), " (TieredStore)").c_str(),
        Simulated(chains, dram, ssd, block_bytes));
  Print(absl::StrCat("DRAM ", m(dram), " only (baseline)").c_str(),
        Simulated(chains, dram, 0, block_bytes));
  Print(absl::StrCat("DRAM ", m(dram + ssd), " only (same total)").c_str(),
        Simulated(chains, dram + ssd, 0, block_bytes));
  if (flags->ssd_dir.empty()) return 0;
  std::printf(
      "real SSD runs: %llu B bf16 blocks; DRAM %s tokens = %.1f MiB; SSD file in %s, %s tokens "
      "= %.1f MiB\n",
      static_cast<unsigned long long>(flags->ssd_block_bytes), m(dram).c_str(),
      static_cast<double>(dram / kBlockTokens * flags->ssd_block_bytes) / (1 << 20),
      flags->ssd_dir.c_str(), m(ssd).c_str(),
      static_cast<double>(ssd / kBlockTokens * flags->ssd_block_bytes) / (1 << 20));
  const Payloads payloads(flags->ssd_block_bytes);
  bool ok = true;
  for (Compression c : flags->compressions) ok = RealSsdRun(chains, *flags, c, payloads) && ok;
  if (!ok) std::printf("FAILED: wrong bytes or failed operations (above)\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace mooncake::tier

int main(int argc, char** argv) { return mooncake::tier::Main(argc, argv); }
