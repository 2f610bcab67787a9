// SsdTier throughput and latency beside fio (io_uring, O_DIRECT) on the same
// file and block size, in the same run.
//
// For each object size (64 KiB, 1 MiB, 4 MiB, 16 MiB) and queue depth
// (1, 8, 32): write then read `ops` objects through SsdTier with `qd`
// operations in flight, for four payloads: random bytes (stored raw), bf16
// synthetic KV with compression off (bf16/raw), on (bf16/zip: kAlways), and
// kAuto (bf16/auto: the tier decides from the device bandwidth it measured). Then fio runs on
// the tier's own file with bs = object size and iodepth = qd: read, write,
// and write with --fdatasync=N where N is the tier's measured writes per
// fdatasync (its group commit), i.e. the same durability work per write.
// Each figure is the median of --reps runs. Read GB/s counts raw bytes
// delivered to the caller (the "effective" rate when compressed).
//
// --compare_rounds=N (the compressed-read target): the same bf16 objects are
// written once to a raw tier (kNever) and once to a compressed one (kAlways),
// then N rounds each run, back to back: fio read of the raw tier's file (the
// device), fio read of the compressed tier's records (fioz: the device on the
// very file and extents the compressed tier reads, with bs = object size), a
// read of every object from the raw tier, and from the compressed one
// (--codec_threads, default every hardware thread), and from a third
// compressed tier with codec_threads=1 (zip1: one record decoded by one
// thread), taking turns going first (round r starts with reader r mod 5).
// The device's speed drifts a lot on a shared VM disk, and differs between
// files written at different times, so each round's ratios compressed/fio and
// compressed/fioz are formed from neighbouring windows and the median of the
// per-round ratios is reported, with the decode speed of the same objects
// measured in memory in the same run: on one core, and on one core joined by
// the helper pool the tier uses (one record's chunks on every core).
//
// --paired_rounds=N (the compressed-read target, with the device's drift and
// the file's placement taken out): ONE compressed tier (kAlways) holds every
// object twice, side by side in the same file: "r<i>" written as kBytes
// (stored raw: the tier never compresses kBytes) and "z<i>" as bf16
// (compressed). Each round reads all of them in groups of a few objects,
// raw group then compressed group alternately (which kind goes first flips
// every group and round), timing each kind on its own, plus one fio read of
// the file. So both kinds see the same extents of the same file within
// milliseconds of each other; the raw reads are the tier's own reading of
// the device (the >= 0.9x fio target), and zip/raw is the gain of
// compression. Medians over rounds, and the median of the per-round ratios.
//
// Run: bazel run -c opt //mooncake/tier:ssd_tier_benchmark -- [--reps=3]
//      [--dir=/tmp/mooncake_tier_bench] [--total_mib=256] [--max_ops=1024]
//      [--sizes_kib=64,1024,4096,16384] [--qds=1,8,32]
//      [--payloads=random,bf16/raw,bf16/zip,bf16/auto] [--compare_rounds=N]
//      [--zip_piece_kib=N] [--codec_threads=N] [--paired_rounds=N]
//      [--paired_group=N] [--durability=power_loss|process_crash|no_sync]
//      [--background_sync_ms=N] [--io_chunk_kib=N] [--rewrite=true]
//      [--paired_write_rounds=N] [--pause_ms=N] [--paired_control=true]
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/fork_join_pool.h"
#include "mooncake/base/histogram.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/ssd_tier.h"

namespace mooncake::tier {
namespace {

struct Flags {
  int reps = 3;
  std::string dir = "/tmp/mooncake_tier_bench";
  uint64_t total_mib = 256;
  uint64_t max_ops = 1024;
  std::vector<uint64_t> sizes_kib = {64, 1024, 4096, 16384};
  std::vector<uint32_t> qds = {1, 8, 32};
  // Which payload rows to run (PayloadName); empty = all.
  std::vector<std::string> payloads;
  // > 0: run the interleaved compressed-read comparison instead of the table.
  int compare_rounds = 0;
  // > 0: run the same-file paired raw/compressed read comparison instead.
  int paired_rounds = 0;
  // Objects per group in the paired comparison (0: max(4 qd, ops / 8)).
  uint64_t paired_group = 0;
  // SsdTierOptions::compressed_read_piece_bytes, in KiB (0: the default).
  uint64_t zip_piece_kib = 0;
  // SsdTierOptions::codec_threads of the compressed tiers (0: the default, every
  // hardware thread).
  uint32_t codec_threads = 0;
  // The table's tiers (SsdTierOptions::durability).
  Durability durability = Durability::kPowerLoss;
  int64_t background_sync_ms = -1;  // -1: the option's default
  uint64_t io_chunk_kib = 0;        // SsdTierOptions::io_chunk_bytes in KiB (0: the default)
  // The table's tiers first fill their file with the same objects and remove them (untimed),
  // so the timed writes go into written extents, as in a tier that has run for a while; the
  // like-for-like baseline is then fio on a written file (column "fio", ratio "p").
  bool rewrite = false;
  // --paired_write_rounds=N: pairs of rounds of the write target with the disk's drift taken
  // out (PairedWrites).
  int paired_write_rounds = 0;
  // Idle gap before every timed phase of --paired_write_rounds, tier and fio alike (fio's own
  // start-up adds a few ms more before its phase).
  int64_t pause_ms = 0;
  // --paired_control=true: an A/A control of --paired_write_rounds. fio takes the tier's
  // place as well (same block size, QD and region), so "tier/fio" is fio against fio: how far
  // apart two identical writers land in this design on this disk.
  bool paired_control = false;
};

template <typename T>
std::vector<T> ParseList(const char* v) {
  std::vector<T> out;
  const char* p = v;
  while (*p != '\0') {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(p, &end, 10);
    if (end == p) break;  // not a number: stop; the caller rejects what is left
    out.push_back(static_cast<T>(x));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

enum class Payload { kRandom, kBf16Raw, kBf16Always, kBf16Auto };
const char* PayloadName(Payload p) {
  switch (p) {
    case Payload::kRandom:
      return "random";
    case Payload::kBf16Raw:
      return "bf16/raw";
    case Payload::kBf16Always:
      return "bf16/zip";
    case Payload::kBf16Auto:
      return "bf16/auto";
  }
  return "?";
}

struct Phase {
  double gbps = 0;
  double p50_us = 0;
  double p99_us = 0;
};

struct TierRun {
  Phase write, read;
  double writes_per_sync = 1;
  bool compressed = false;
  double stored_ratio = 1;  // raw / stored payload bytes
};

struct AlignedFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<std::byte, AlignedFree>;
AlignedBuf AlignedAlloc(size_t bytes) {
  return AlignedBuf(
      static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
}

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `ops` operations with at most `qd` in flight. issue(i, slot, done)
// starts op i using buffer slot `slot`; done(ok) must be called exactly once.
template <typename Issue>
Phase RunQd(uint64_t ops, uint32_t qd, uint64_t bytes_per_op, Issue issue) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint32_t> free_slots;
  for (uint32_t s = 0; s < qd; ++s) free_slots.push_back(s);
  LatencyHistogram hist;
  std::atomic<uint64_t> failures{0};
  const double start = NowS();
  for (uint64_t i = 0; i < ops; ++i) {
    uint32_t slot;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_slots.empty(); });
      slot = free_slots.back();
      free_slots.pop_back();
    }
    const auto t0 = std::chrono::steady_clock::now();
    issue(i, slot, [&, slot, t0](bool ok) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
      hist.Record(static_cast<uint64_t>(ns));
      if (!ok) failures.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu);
      free_slots.push_back(slot);
      cv.notify_one();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return free_slots.size() == qd; });
  }
  const double secs = NowS() - start;
  if (failures.load() != 0) {
    std::fprintf(stderr, "FATAL: %llu operations failed\n",
                 static_cast<unsigned long long>(failures.load()));
    std::exit(1);
  }
  return Phase{static_cast<double>(ops * bytes_per_op) / secs / 1e9, hist.P50() / 1e3,
               hist.P99() / 1e3};
}

SsdTierOptions TierOptions(const std::string& path, uint64_t file_bytes, Compression c,
                           const SsdTierInfo& device, uint32_t codec_threads = 0) {
  SsdTierOptions o;
  o.paths = {path};
  o.capacity_bytes_per_file = file_bytes;
  o.compression = c;
  o.codec_threads = codec_threads;
  o.device_read_bytes_per_s = device.device_read_bytes_per_s;
  o.device_write_bytes_per_s = device.device_write_bytes_per_s;
  return o;
}

// Objects per run: --total_mib of them, at least two per slot, at most --max_ops.
uint64_t OpsFor(const Flags& flags, uint64_t size, uint32_t qd) {
  return std::clamp<uint64_t>(flags.total_mib * (1ull << 20) / size, 2 * qd,
                              std::max<uint64_t>(flags.max_ops, 2 * qd));
}

// `size` bytes of a fixed pseudo-random stream (incompressible).
std::vector<std::byte> RandomBytes(uint64_t size) {
  std::vector<std::byte> out(size);
  std::mt19937_64 rng(size);
  for (size_t i = 0; i + 8 <= size; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

uint64_t FileBytes(uint64_t size, uint64_t ops) {
  // Header block per record plus the file header, with slack for the allocator.
  return (ops * (size + 8192) + (8ull << 20)) / 4096 * 4096 + (16ull << 20);
}

TierRun RunTier(const std::string& path, uint64_t size, uint64_t ops, uint32_t qd, Payload payload,
                const SsdTierInfo& device, const Flags& flags) {
  const uint32_t codec_threads = flags.codec_threads;
  const Durability durability = flags.durability;
  const int64_t background_sync_ms = flags.background_sync_ms;
  const uint64_t io_chunk_kib = flags.io_chunk_kib;
  std::filesystem::remove(path);
  const Compression c = payload == Payload::kBf16Always ? Compression::kAlways
                        : payload == Payload::kBf16Auto ? Compression::kAuto
                                                        : Compression::kNever;
  SsdTierOptions options = TierOptions(path, FileBytes(size, ops), c, device, codec_threads);
  options.durability = durability;
  if (io_chunk_kib != 0) options.io_chunk_bytes = static_cast<uint32_t>(io_chunk_kib << 10);
  if (background_sync_ms >= 0)
    options.background_sync_ms = static_cast<uint32_t>(background_sync_ms);
  auto tier_or = SsdTier::Open(std::move(options));
  if (!tier_or.ok()) {
    std::fprintf(stderr, "FATAL: open: %s\n", std::string(tier_or.status().message()).c_str());
    std::exit(1);
  }
  SsdTier& tier = **tier_or;
  std::vector<std::byte> src;
  ObjectMeta meta;
  if (payload == Payload::kRandom) {
    src = RandomBytes(size);
  } else {
    src = compress::SyntheticKvBytes(size, compress::DType::kBFloat16, size);
    meta.dtype = compress::DType::kBFloat16;
  }
  TierRun run;
  if (flags.rewrite) {
    for (uint64_t i = 0; i < ops; ++i) {
      const std::string key = absl::StrCat("pre", i);
      if (!WriteBlocking(tier, key, src, meta).ok() || !RemoveBlocking(tier, key).ok()) {
        std::fprintf(stderr, "FATAL: could not fill and empty the tier before the timed run\n");
        std::exit(1);
      }
    }
  }
  const TierStats before = tier.stats();
  run.write = RunQd(ops, qd, size, [&](uint64_t i, uint32_t, auto done) {
    tier.Write(absl::StrCat("obj", i), src, meta,
               [done = std::move(done)](absl::Status s) mutable { done(s.ok()); });
  });
  const TierStats after = tier.stats();
  run.writes_per_sync = static_cast<double>(after.writes - before.writes) /
                        std::max<uint64_t>(1, after.syncs - before.syncs);
  run.compressed = after.compressed_writes > 0;
  uint64_t stored = 0, raw = 0;
  tier.ForEach([&](const ObjectInfo& info) {
    stored += info.stored_bytes;
    raw += info.raw_bytes;
  });
  run.stored_ratio = static_cast<double>(raw) / std::max<uint64_t>(1, stored);
  std::vector<AlignedBuf> bufs;
  for (uint32_t s = 0; s < qd; ++s) bufs.push_back(AlignedAlloc(size));
  run.read = RunQd(ops, qd, size, [&](uint64_t i, uint32_t slot, auto done) {
    tier.Read(absl::StrCat("obj", i), std::span<std::byte>(bufs[slot].get(), size),
              [done = std::move(done)](absl::StatusOr<ReadResult> r) mutable { done(r.ok()); });
  });
  // Verify outside the timed loop: wrong bytes would make every figure void.
  auto check = AlignedAlloc(size);
  if (!ReadBlocking(tier, absl::StrCat("obj", ops - 1), std::span<std::byte>(check.get(), size))
           .ok() ||
      std::memcmp(check.get(), src.data(), size) != 0) {
    std::fprintf(stderr, "FATAL: read back wrong bytes\n");
    std::exit(1);
  }
  return run;
}

// Pulls the number after `"key" :` at or after `from` in fio's JSON.
double JsonNumberAfter(const std::string& json, size_t from, const std::string& key) {
  const size_t at = json.find("\"" + key + "\"", from);
  if (at == std::string::npos) return -1;
  const size_t colon = json.find(':', at);
  return std::strtod(json.c_str() + colon + 1, nullptr);
}

// fio on `path` with the tier's block size and queue depth. kind: "read",
// "write"; fdatasync: 0 = none, else sync every N writes.
// fio on `path` with bs = `size` over `span` bytes from offset 4096 (where a
// tier file's records start).
Phase RunFio(const std::string& path, const std::string& kind, uint64_t size, uint64_t span,
             uint32_t qd, int fdatasync) {
  const std::string out = path + ".fio.json";
  std::string cmd = absl::StrCat(
      "fio --name=tier --filename=", path, " --ioengine=io_uring --direct=1 --rw=", kind,
      " --bs=", size, " --iodepth=", qd, " --size=", span, " --offset=4096",
      " --numjobs=1 --group_reporting --output-format=json --output=", out);
  if (fdatasync > 0) absl::StrAppend(&cmd, " --fdatasync=", fdatasync);
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "FATAL: fio failed: %s\n", cmd.c_str());
    std::exit(1);
  }
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string json = ss.str();
  const size_t section = json.find("\"" + kind + "\" :");
  Phase p;
  p.gbps = JsonNumberAfter(json, section, "bw_bytes") / 1e9;
  const size_t clat = json.find("\"clat_ns\"", section);
  p.p50_us = JsonNumberAfter(json, clat, "50.000000") / 1e3;
  p.p99_us = JsonNumberAfter(json, clat, "99.000000") / 1e3;
  if (p.gbps <= 0) {
    std::fprintf(stderr, "FATAL: could not parse fio output %s\n", out.c_str());
    std::exit(1);
  }
  return p;
}

template <typename T, typename F>
double Median(const std::vector<T>& runs, F field) {
  std::vector<double> v;
  for (const T& r : runs) v.push_back(field(r));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Median(const std::vector<double>& runs) {
  return Median(runs, [](double v) { return v; });
}

double LoadAverage() {
  double load[1] = {0};
  getloadavg(load, 1);
  return load[0];
}

bool IsTrue(std::string_view v) { return v == "true" || v == "1"; }

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = absl::StrCat("--", name, "=");
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("reps")) {
      f.reps = std::max(1, std::atoi(v));
    } else if (const char* v = value("dir")) {
      f.dir = v;
    } else if (const char* v = value("total_mib")) {
      f.total_mib = std::max<uint64_t>(1, std::strtoull(v, nullptr, 10));
    } else if (const char* v = value("max_ops")) {
      f.max_ops = std::max<uint64_t>(1, std::strtoull(v, nullptr, 10));
    } else if (const char* v = value("sizes_kib")) {
      f.sizes_kib = ParseList<uint64_t>(v);
    } else if (const char* v = value("qds")) {
      f.qds = ParseList<uint32_t>(v);
    } else if (const char* v = value("zip_piece_kib")) {
      f.zip_piece_kib = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("codec_threads")) {
      f.codec_threads = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = value("compare_rounds")) {
      f.compare_rounds = std::max(1, std::atoi(v));
    } else if (const char* v = value("paired_rounds")) {
      f.paired_rounds = std::max(1, std::atoi(v));
    } else if (const char* v = value("paired_group")) {
      f.paired_group = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("durability")) {
      const std::optional<Durability> d = ParseDurability(v);
      if (!d) {
        std::fprintf(stderr, "--durability must be power_loss, process_crash or no_sync\n");
        std::exit(2);
      }
      f.durability = *d;
    } else if (const char* v = value("paired_write_rounds")) {
      f.paired_write_rounds = std::max(1, std::atoi(v));
    } else if (const char* v = value("paired_control")) {
      f.paired_control = IsTrue(v);
    } else if (const char* v = value("pause_ms")) {
      f.pause_ms = std::max<int64_t>(0, std::strtoll(v, nullptr, 10));
    } else if (const char* v = value("rewrite")) {
      f.rewrite = IsTrue(v);
    } else if (const char* v = value("io_chunk_kib")) {
      f.io_chunk_kib = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("background_sync_ms")) {
      f.background_sync_ms = std::strtoll(v, nullptr, 10);
    } else if (const char* v = value("payloads")) {
      f.payloads = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else {
      std::fprintf(stderr,
                   "unknown flag %s (--reps --dir --total_mib --max_ops --sizes_kib=64,1024 "
                   "--qds=1,8,32 --payloads=random,bf16/raw,bf16/zip,bf16/auto --compare_rounds "
                   "--paired_rounds --paired_group --zip_piece_kib --codec_threads "
                   "--durability=power_loss|process_crash|no_sync --background_sync_ms "
                   "--io_chunk_kib --rewrite --paired_write_rounds --pause_ms --paired_control)\n",
                   argv[i]);
      std::exit(2);
    }
  }
  return f;
}

void PrintMachine() {
  utsname u;
  uname(&u);
  std::printf("machine: %s %s, %ld cpus; fio: ", u.sysname, u.release,
              sysconf(_SC_NPROCESSORS_ONLN));
  std::fflush(stdout);
  if (std::system("fio --version") != 0) std::printf("(fio missing)\n");
}

// Creates (preallocates) a tier file as SsdTier::Open does, then closes it.
void CreateLikeTier(const std::string& path, uint64_t file_bytes, const SsdTierInfo& device) {
  auto tier = SsdTier::Open(TierOptions(path, file_bytes, Compression::kNever, device));
  if (!tier.ok()) {
    std::fprintf(stderr, "FATAL: create: %s\n", std::string(tier.status().message()).c_str());
    std::exit(1);
  }
}

SsdTierInfo ProbeDevice(const std::string& path) {
  std::filesystem::remove(path);
  SsdTierOptions o;
  o.paths = {path};
  o.capacity_bytes_per_file = 256ull << 20;
  auto tier = SsdTier::Open(o);
  if (!tier.ok()) {
    std::fprintf(stderr, "FATAL: probe open: %s\n", std::string(tier.status().message()).c_str());
    std::exit(1);
  }
  return (*tier)->info();
}

std::unique_ptr<SsdTier> OpenOrDie(const SsdTierOptions& o) {
  auto tier = SsdTier::Open(o);
  if (!tier.ok()) {
    std::fprintf(stderr, "FATAL: open: %s\n", std::string(tier.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(tier);
}

// Reads objects obj0..obj{ops-1} of `size` bytes with `qd` in flight.
Phase ReadAll(SsdTier& tier, uint64_t size, uint64_t ops, uint32_t qd,
              std::vector<AlignedBuf>& bufs) {
  return RunQd(ops, qd, size, [&](uint64_t i, uint32_t slot, auto done) {
    tier.Read(absl::StrCat("obj", i), std::span<std::byte>(bufs[slot].get(), size),
              [done = std::move(done)](absl::StatusOr<ReadResult> r) mutable { done(r.ok()); });
  });
}

// Decode speed (raw bytes/s) of one object coded as the tier codes it: on the
// caller's thread alone (no pool), or joined by the pool's helpers.
double DecodeSpeed(const std::vector<std::byte>& src, uint32_t chunk_bytes,
                   ForkJoinPool* pool = nullptr) {
  compress::AdaptiveCodec<> codec(compress::CodecOptions{
      .chunk_bytes = chunk_bytes,
      .threads = pool != nullptr ? pool->helpers() + 1 : 1,
      .pool = pool,
  });
  std::vector<std::byte> frame(codec.MaxCompressedSize(src.size()));
  frame.resize(*codec.Compress(src, compress::DType::kBFloat16, frame));
  std::vector<std::byte> out(src.size());
  std::vector<double> runs;
  for (int r = 0; r < 9; ++r) {
    const double t0 = NowS();
    int n = 0;
    for (; n < 8 || NowS() - t0 < 0.05; ++n) {
      if (!codec.Decompress(frame, out).ok()) std::exit(1);
    }
    runs.push_back(static_cast<double>(src.size()) * n / (NowS() - t0));
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// Exits unless `key` reads back from `tier` as exactly `want`.
void ExpectReadsBack(SsdTier& tier, const std::string& key, const std::vector<std::byte>& want) {
  auto got = AlignedAlloc(want.size());
  if (!ReadBlocking(tier, key, std::span<std::byte>(got.get(), want.size())).ok() ||
      std::memcmp(got.get(), want.data(), want.size()) != 0) {
    std::fprintf(stderr, "FATAL: %s read back wrong bytes\n", key.c_str());
    std::exit(1);
  }
}

void CompareCompressedReads(const Flags& flags, const SsdTierInfo& device) {
  std::printf(
      "compressed-read comparison: %d rounds of [fio read of the raw tier's file | fio read of "
      "the compressed tier's records, bs = object size (fioz) | raw tier read | compressed tier "
      "read (codec_threads %u) | compressed tier read with codec_threads 1 (zip1: each record "
      "decoded by its reaper alone)], taking turns going first; GB/s (tiers: of raw bytes); "
      "medians over rounds, and the median of the per-round ratios\n",
      flags.compare_rounds, flags.codec_threads);
  std::printf("%-6s %-3s | %-6s %-6s %-6s %-6s %-6s | %-8s %-8s %-8s %-8s | %-7s %-6s %-6s | %s\n",
              "size", "qd", "fio", "fioz", "raw", "zip", "zip1", "zip/fio", "zip/fioz", "zip/raw",
              "zip/zip1", "stored", "decode", "dec+h", "load");
  ForkJoinPool helpers(UsableCpuCount() - 1);  // as the tier's default codec_threads
  const std::string raw_path = flags.dir + "/raw.dat", zip_path = flags.dir + "/zip.dat",
                    zip1_path = flags.dir + "/zip1.dat";
  for (uint64_t size_kib : flags.sizes_kib) {
    const uint64_t size = size_kib << 10;
    for (uint32_t qd : flags.qds) {
      const uint64_t ops = OpsFor(flags, size, qd);
      std::filesystem::remove(raw_path);
      std::filesystem::remove(zip_path);
      std::filesystem::remove(zip1_path);
      auto raw =
          OpenOrDie(TierOptions(raw_path, FileBytes(size, ops), Compression::kNever, device));
      SsdTierOptions zip_options =
          TierOptions(zip_path, FileBytes(size, ops), Compression::kAlways, device);
      if (flags.zip_piece_kib != 0) {
        zip_options.compressed_read_piece_bytes = static_cast<uint32_t>(flags.zip_piece_kib << 10);
      }
      SsdTierOptions zip1_options = zip_options;
      zip_options.codec_threads = flags.codec_threads;
      zip1_options.paths = {zip1_path};
      zip1_options.codec_threads = 1;
      auto zip = OpenOrDie(zip_options);
      auto zip1 = OpenOrDie(zip1_options);
      const std::vector<std::byte> src =
          compress::SyntheticKvBytes(size, compress::DType::kBFloat16, size);
      const ObjectMeta meta{compress::DType::kBFloat16, 0};
      for (SsdTier* t : {raw.get(), zip.get(), zip1.get()}) {
        RunQd(ops, qd, size, [&](uint64_t i, uint32_t, auto done) {
          t->Write(absl::StrCat("obj", i), src, meta,
                   [done = std::move(done)](absl::Status s) mutable { done(s.ok()); });
        });
      }
      uint64_t stored = 0;
      zip->ForEach([&](const ObjectInfo& info) { stored += info.stored_bytes; });
      std::vector<AlignedBuf> bufs;
      for (uint32_t s = 0; s < qd; ++s) bufs.push_back(AlignedAlloc(size));
      // The compressed records' extents, for fioz: records are allocated
      // from the start of an empty file, so they span what they occupy.
      const uint64_t zip_span = std::max(stored, size);
      std::vector<double> fio, fioz, tr, tz, tz1, z_fio, z_fioz, z_raw, z_z1;
      for (int round = 0; round < flags.compare_rounds; ++round) {
        // The readers take turns going first: a virtual disk's burst credit
        // (refilled while the round's set-up runs) would otherwise go to the
        // same one every round.
        double g[5] = {0, 0, 0, 0, 0};
        for (int k = 0; k < 5; ++k) {
          const int who = (round + k) % 5;
          if (who == 0) g[0] = RunFio(raw_path, "read", size, size * ops, qd, 0).gbps;
          if (who == 1) g[1] = RunFio(zip_path, "read", size, zip_span, qd, 0).gbps;
          if (who == 2) g[2] = ReadAll(*raw, size, ops, qd, bufs).gbps;
          if (who == 3) g[3] = ReadAll(*zip, size, ops, qd, bufs).gbps;
          if (who == 4) g[4] = ReadAll(*zip1, size, ops, qd, bufs).gbps;
        }
        fio.push_back(g[0]);
        fioz.push_back(g[1]);
        tr.push_back(g[2]);
        tz.push_back(g[3]);
        tz1.push_back(g[4]);
        z_fio.push_back(tz.back() / fio.back());
        z_fioz.push_back(tz.back() / fioz.back());
        z_raw.push_back(tz.back() / tr.back());
        z_z1.push_back(tz.back() / tz1.back());
      }
      ExpectReadsBack(*zip, absl::StrCat("obj", ops - 1), src);
      std::printf(
          "%-6s %-3u | %6.2f %6.2f %6.2f %6.2f %6.2f | %8.2f %8.2f %8.2f %8.2f | "
          "%7.3f %6.2f %6.2f | %.1f\n",
          absl::StrCat(size_kib, "K").c_str(), qd, Median(fio), Median(fioz), Median(tr),
          Median(tz), Median(tz1), Median(z_fio), Median(z_fioz), Median(z_raw), Median(z_z1),
          static_cast<double>(ops * size) / static_cast<double>(stored),
          DecodeSpeed(src, TierOptions("", 0, Compression::kAlways, device).codec_chunk_bytes) /
              1e9,
          DecodeSpeed(src, TierOptions("", 0, Compression::kAlways, device).codec_chunk_bytes,
                      &helpers) /
              1e9,
          LoadAverage());
      std::fflush(stdout);
    }
  }
  std::filesystem::remove(raw_path);
  std::filesystem::remove(zip_path);
  std::filesystem::remove(zip1_path);
  std::filesystem::remove(raw_path + ".fio.json");
  std::filesystem::remove(zip_path + ".fio.json");
}

void PairedReads(const Flags& flags, const SsdTierInfo& device) {
  std::printf(
      "paired same-file reads: %d rounds; one compressed tier (codec_threads %u) holds each bf16 "
      "object twice, stored raw (kBytes) and compressed, side by side; each round reads both "
      "kinds in alternating groups, timed per kind, and fio reads the file (bs = object size); "
      "GB/s (tiers: of raw bytes); medians over rounds, and the median of the per-round "
      "ratios\n",
      flags.paired_rounds, flags.codec_threads);
  std::printf("%-6s %-3s %-5s | %-6s %-6s %-6s | %-8s %-8s | %-7s %-6s | %s\n", "size", "qd",
              "group", "fio", "raw", "zip", "zip/raw", "raw/fio", "stored", "dec+h", "load");
  ForkJoinPool helpers(UsableCpuCount() - 1);
  const std::string path = flags.dir + "/paired.dat";
  for (uint64_t size_kib : flags.sizes_kib) {
    const uint64_t size = size_kib << 10;
    for (uint32_t qd : flags.qds) {
      const uint64_t ops = OpsFor(flags, size, qd);
      // Groups small enough that the two kinds share the disk's windows,
      // large enough to keep `qd` reads in flight most of a group.
      const uint64_t group = std::min<uint64_t>(
          ops, flags.paired_group != 0 ? flags.paired_group : std::max<uint64_t>(4 * qd, ops / 8));
      std::filesystem::remove(path);
      SsdTierOptions o = TierOptions(path, FileBytes(size, 2 * ops), Compression::kAlways, device);
      o.codec_threads = flags.codec_threads;
      if (flags.zip_piece_kib != 0) {
        o.compressed_read_piece_bytes = static_cast<uint32_t>(flags.zip_piece_kib << 10);
      }
      auto tier = OpenOrDie(o);
      const std::vector<std::byte> src =
          compress::SyntheticKvBytes(size, compress::DType::kBFloat16, size);
      const auto key = [](bool zip, uint64_t i) { return absl::StrCat(zip ? "z" : "r", i); };
      RunQd(2 * ops, qd, size, [&](uint64_t i, uint32_t, auto done) {
        const bool zip = i % 2 == 1;
        tier->Write(key(zip, i / 2), src,
                    ObjectMeta{zip ? compress::DType::kBFloat16 : compress::DType::kBytes, 0},
                    [done = std::move(done)](absl::Status s) mutable { done(s.ok()); });
      });
      uint64_t stored_raw = 0, stored_zip = 0;
      tier->ForEach([&](const ObjectInfo& info) {
        (info.compressed ? stored_zip : stored_raw) += info.stored_bytes;
      });
      if (stored_zip == 0 || stored_raw == 0) {
        std::fprintf(stderr, "FATAL: the paired tier did not store both kinds\n");
        std::exit(1);
      }
      std::vector<AlignedBuf> bufs;
      for (uint32_t s = 0; s < qd; ++s) bufs.push_back(AlignedAlloc(size));
      std::vector<double> fio, raw_gbps, zip_gbps, ratio, raw_fio;
      for (int round = 0; round < flags.paired_rounds; ++round) {
        double secs[2] = {0, 0};
        uint64_t bytes[2] = {0, 0};
        const bool fio_first = round % 2 == 0;
        double fio_gbps = 0;
        if (fio_first) fio_gbps = RunFio(path, "read", size, stored_raw + stored_zip, qd, 0).gbps;
        for (uint64_t first = 0, g = 0; first < ops; first += group, ++g) {
          const uint64_t n = std::min(group, ops - first);
          for (int k = 0; k < 2; ++k) {
            const bool zip = ((round + g + k) % 2) == 1;
            const Phase p = RunQd(n, qd, size, [&](uint64_t i, uint32_t slot, auto done) {
              tier->Read(
                  key(zip, first + i), std::span<std::byte>(bufs[slot].get(), size),
                  [done = std::move(done)](absl::StatusOr<ReadResult> r) mutable { done(r.ok()); });
            });
            secs[zip] += static_cast<double>(n * size) / (p.gbps * 1e9);
            bytes[zip] += n * size;
          }
        }
        if (!fio_first) fio_gbps = RunFio(path, "read", size, stored_raw + stored_zip, qd, 0).gbps;
        fio.push_back(fio_gbps);
        raw_gbps.push_back(static_cast<double>(bytes[0]) / secs[0] / 1e9);
        zip_gbps.push_back(static_cast<double>(bytes[1]) / secs[1] / 1e9);
        ratio.push_back(zip_gbps.back() / raw_gbps.back());
        raw_fio.push_back(raw_gbps.back() / fio_gbps);
      }
      for (bool zip : {false, true}) ExpectReadsBack(*tier, key(zip, ops - 1), src);
      std::printf(
          "%-6s %-3u %-5llu | %6.2f %6.2f %6.2f | %8.2f %8.2f | %7.3f %6.2f | %.1f\n",
          absl::StrCat(size_kib, "K").c_str(), qd, static_cast<unsigned long long>(group),
          Median(fio), Median(raw_gbps), Median(zip_gbps), Median(ratio), Median(raw_fio),
          static_cast<double>(stored_raw) / static_cast<double>(stored_zip),
          DecodeSpeed(src, TierOptions("", 0, Compression::kAlways, device).codec_chunk_bytes,
                      &helpers) /
              1e9,
          LoadAverage());
      std::fflush(stdout);
      tier.reset();
      std::filesystem::remove(path);
      std::filesystem::remove(path + ".fio.json");
    }
  }
}

// The write target, paired: ONE tier (--durability, random bytes, stored raw) and fio take
// turns writing the same region of the tier's file. Each round the tier writes `ops`
// objects (timed) and removes them (untimed), and fio writes the region the records
// occupied (bs = object size, same QD) while the tier is open and empty (free space, which
// the tier never reads); which goes first alternates. So both write the same extents of
// the same file, written ones after the first round (round 0, into fresh extents, is not
// counted), within seconds of each other. On the virtio disk here the second writer of a
// round is often faster, so the ratio is taken per pair of rounds (one of each order, the
// geometric mean of their two ratios) and the median over pairs is reported, beside the
// median ratio of each order.
void PairedWrites(const Flags& flags, const SsdTierInfo& device) {
  std::printf(
      "paired same-file writes: %d pairs of rounds after an untimed first one; tier durability "
      "%s; the tier writes its objects and removes them, fio writes the same region; each pair "
      "has one round of each order; GB/s medians over rounds; tier/fio: median over pairs of "
      "the geometric mean of the pair's two ratios, then the median ratio with the tier "
      "writing first and with fio first\n",
      flags.paired_write_rounds, std::string(DurabilityName(flags.durability)).c_str());
  if (flags.pause_ms > 0) {
    std::printf("%lld ms idle before every timed phase\n", static_cast<long long>(flags.pause_ms));
  }
  if (flags.paired_control) {
    std::printf("A/A CONTROL: fio writes in the tier's place; the \"tier\" columns are fio\n");
  }
  std::printf("%-6s %-3s | %-6s %-6s | %-8s %-6s %-6s | %-15s | %s\n", "size", "qd", "tier", "fio",
              "tier/fio", "t1st", "f1st", "tier P50/P99 us", "load");
  const std::string path = flags.dir + "/paired_write.dat";
  for (uint64_t size_kib : flags.sizes_kib) {
    const uint64_t size = size_kib << 10;
    for (uint32_t qd : flags.qds) {
      const uint64_t ops = OpsFor(flags, size, qd);
      std::filesystem::remove(path);
      SsdTierOptions o = TierOptions(path, FileBytes(size, ops), Compression::kNever, device);
      o.durability = flags.durability;
      if (flags.io_chunk_kib != 0) {
        o.io_chunk_bytes = static_cast<uint32_t>(flags.io_chunk_kib << 10);
      }
      if (flags.background_sync_ms >= 0) {
        o.background_sync_ms = static_cast<uint32_t>(flags.background_sync_ms);
      }
      auto tier = OpenOrDie(o);
      const std::vector<std::byte> src = RandomBytes(size);
      const uint64_t region = ops * tier_internal::RecordBytes(size);
      std::vector<double> tier_gbps, fio_gbps, ratio, p50, p99;
      // Every timed phase starts after the same idle gap.
      const auto fio_write = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(flags.pause_ms));
        return RunFio(path, "write", size, region, qd, 0);
      };
      for (int round = 0; round <= 2 * flags.paired_write_rounds; ++round) {
        const bool fio_first = round % 2 == 1;
        double f = 0;
        if (fio_first) f = fio_write().gbps;
        Phase t;
        if (flags.paired_control) {
          t = fio_write();
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(flags.pause_ms));
          t = RunQd(ops, qd, size, [&](uint64_t i, uint32_t, auto done) {
            tier->Write(absl::StrCat("w", i), src, {},
                        [done = std::move(done)](absl::Status s) mutable { done(s.ok()); });
          });
          ExpectReadsBack(*tier, absl::StrCat("w", ops - 1), src);
          for (uint64_t i = 0; i < ops; ++i) {
            if (!RemoveBlocking(*tier, absl::StrCat("w", i)).ok()) {
              std::fprintf(stderr, "FATAL: remove failed\n");
              std::exit(1);
            }
          }
        }
        if (!fio_first) f = fio_write().gbps;
        if (round == 0) continue;  // into fresh extents
        tier_gbps.push_back(t.gbps);
        fio_gbps.push_back(f);
        ratio.push_back(t.gbps / f);
        p50.push_back(t.p50_us);
        p99.push_back(t.p99_us);
      }
      // ratio[0] is round 1 (fio first), ratio[1] round 2 (tier first), ...
      std::vector<double> pairs, tier_first, fio_first;
      for (size_t i = 0; i + 1 < ratio.size(); i += 2) {
        pairs.push_back(std::sqrt(ratio[i] * ratio[i + 1]));
        fio_first.push_back(ratio[i]);
        tier_first.push_back(ratio[i + 1]);
      }
      std::printf("%-6s %-3u | %6.2f %6.2f | %8.2f %6.2f %6.2f | %7.0f/%-7.0f | %.1f\n",
                  absl::StrCat(size_kib, "K").c_str(), qd, Median(tier_gbps), Median(fio_gbps),
                  Median(pairs), Median(tier_first), Median(fio_first), Median(p50), Median(p99),
                  LoadAverage());
      std::printf("       per-round tier/fio (fio first in odd rounds):");
      for (double r : ratio) std::printf(" %.2f", r);
      std::printf("\n");
      std::fflush(stdout);
      tier.reset();
      std::filesystem::remove(path);
      std::filesystem::remove(path + ".fio.json");
    }
  }
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  std::filesystem::create_directories(flags.dir);
  const std::string path = flags.dir + "/tier.dat";
  PrintMachine();
  const SsdTierInfo device = ProbeDevice(path);
  std::printf("device probe (SsdTier::Open): read %.2f GB/s, write %.2f GB/s, direct_io=%d\n",
              device.device_read_bytes_per_s / 1e9, device.device_write_bytes_per_s / 1e9,
              device.direct_io);
  if (flags.paired_write_rounds > 0) {
    PairedWrites(flags, device);
    std::filesystem::remove(path);
    return 0;
  }
  if (flags.paired_rounds > 0) {
    PairedReads(flags, device);
    std::filesystem::remove(path);
    return 0;
  }
  if (flags.compare_rounds > 0) {
    CompareCompressedReads(flags, device);
    std::filesystem::remove(path);
    return 0;
  }
  std::printf(
      "medians of %d runs; GB/s of raw bytes; latency us per object (P50/P99); tier durability "
      "%s (a write is acknowledged %s)\n",
      flags.reps, std::string(DurabilityName(flags.durability)).c_str(),
      flags.durability == Durability::kPowerLoss ? "after an fdatasync covering it"
      : flags.durability == Durability::kNoSync
          ? "when written; no fdatasync until the tier closes"
          : absl::StrCat("when written; background fdatasync at most every ",
                         flags.background_sync_ms >= 0 ? flags.background_sync_ms
                                                       : SsdTierOptions{}.background_sync_ms,
                         " ms")
                .c_str());
  std::printf("tier writes go into %s\n",
              flags.rewrite ? "a file the tier filled and emptied first (written extents, like "
                              "fio's \"fio\" column; --rewrite)"
                            : "its new file (unwritten extents, like fio's \"fresh\" column)");
  std::printf(
      "columns: tier write GB/s P50/P99 us | fio write GB/s: plain on a written file, plain on a "
      "fresh (fallocated) file like the one the tier writes into, +fdatasync on a fresh file, "
      "+fdatasync on a written file (same writes per fdatasync as the tier) | tier writes per "
      "fdatasync | tier read GB/s P50/P99 | fio read GB/s P50/P99 | raw/stored | write ratios "
      "tier/fio: fresh plain, fresh+sync, written+sync, written plain | read ratio tier/fio\n");
  std::printf("%-6s %-3s %-9s | %-19s %-5s %-5s %-5s %-5s %-5s | %-18s %-18s %-5s | %-19s | %s\n",
              "size", "qd", "payload", "tier write", "fio", "fresh", "f+s", "sync", "w/s",
              "tier read", "fio read", "ratio", "w/fio fp fs s p", "r/fio");

  for (uint64_t size_kib : flags.sizes_kib) {
    const uint64_t size = size_kib << 10;
    for (uint32_t qd : flags.qds) {
      if (size == 0 || size % 4096 != 0 || qd == 0) {
        std::fprintf(stderr, "sizes must be multiples of 4 KiB and qds positive\n");
        return 2;
      }
      const uint64_t ops = OpsFor(flags, size, qd);
      for (Payload payload :
           {Payload::kRandom, Payload::kBf16Raw, Payload::kBf16Always, Payload::kBf16Auto}) {
        if (!flags.payloads.empty() && std::find(flags.payloads.begin(), flags.payloads.end(),
                                                 PayloadName(payload)) == flags.payloads.end()) {
          continue;
        }
        std::vector<TierRun> tier_runs;
        std::vector<Phase> fio_r, fio_w, fio_ws, fio_w_fresh, fio_ws_fresh;
        for (int rep = 0; rep < flags.reps; ++rep) {
          // The tier writes into a file it just created (fallocate: unwritten extents, whose
          // first fdatasync also commits metadata), unless --rewrite; fio's "fresh" runs
          // (plain and +sync) get the same kind of file.
          std::filesystem::remove(path);
          tier_runs.push_back(RunTier(path, size, ops, qd, payload, device, flags));
          const int per_sync =
              std::max(1, static_cast<int>(tier_runs.back().writes_per_sync + 0.5));
          // These fio runs use the tier's own file, now fully written.
          fio_w.push_back(RunFio(path, "write", size, size * ops, qd, 0));
          fio_ws.push_back(RunFio(path, "write", size, size * ops, qd, per_sync));
          fio_r.push_back(RunFio(path, "read", size, size * ops, qd, 0));
          std::filesystem::remove(path);
          CreateLikeTier(path, FileBytes(size, ops), device);
          fio_ws_fresh.push_back(RunFio(path, "write", size, size * ops, qd, per_sync));
          std::filesystem::remove(path);
          CreateLikeTier(path, FileBytes(size, ops), device);
          fio_w_fresh.push_back(RunFio(path, "write", size, size * ops, qd, 0));
        }
        auto g = [](auto ph) { return [ph](const TierRun& r) { return (r.*ph).gbps; }; };
        auto p50 = [](auto ph) { return [ph](const TierRun& r) { return (r.*ph).p50_us; }; };
        auto p99 = [](auto ph) { return [ph](const TierRun& r) { return (r.*ph).p99_us; }; };
        const double tw = Median(tier_runs, g(&TierRun::write));
        const double tr = Median(tier_runs, g(&TierRun::read));
        const auto fg = [](const Phase& p) { return p.gbps; };
        const auto f50 = [](const Phase& p) { return p.p50_us; };
        const auto f99 = [](const Phase& p) { return p.p99_us; };
        const double fw = Median(fio_w, fg), fws = Median(fio_ws, fg), fr = Median(fio_r, fg);
        const double fwf = Median(fio_ws_fresh, fg), fwp = Median(fio_w_fresh, fg);
        std::printf(
            "%-6s %-3u %-9s | %5.2f %6.0f/%-6.0f %5.2f %5.2f %5.2f %5.2f %-5.1f | %5.2f "
            "%5.0f/%-6.0f %5.2f %5.0f/%-6.0f %-5.2f | %.2f %.2f %.2f %.2f | %.2f%s\n",
            absl::StrCat(size >> 10, "K").c_str(), qd, PayloadName(payload), tw,
            Median(tier_runs, p50(&TierRun::write)), Median(tier_runs, p99(&TierRun::write)), fw,
            fwp, fwf, fws, Median(tier_runs, [](const TierRun& r) { return r.writes_per_sync; }),
            tr, Median(tier_runs, p50(&TierRun::read)), Median(tier_runs, p99(&TierRun::read)), fr,
            Median(fio_r, f50), Median(fio_r, f99),
            Median(tier_runs, [](const TierRun& r) { return r.stored_ratio; }), tw / fwp, tw / fwf,
            tw / fws, tw / fw, tr / fr, tier_runs.back().compressed ? "  (compressed)" : "");
        std::fflush(stdout);
      }
    }
  }
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".fio.json");
  return 0;
}

}  // namespace
}  // namespace mooncake::tier

int main(int argc, char** argv) { return mooncake::tier::Main(argc, argv); }
