// StableHash64/128 throughput against memcpy of the same bytes (the memory
// bandwidth ceiling), same run; and the read path's copy-and-digest out of
// memory against memcpy alone and against copy-then-digest, with ratios.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/value_checksum.h"

namespace mooncake {
namespace {

void BM_StableHash64(benchmark::State& state) {
  std::vector<char> buf(state.range(0), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(StableHash64(buf.data(), buf.size()));
  state.SetBytesProcessed(state.iterations() * buf.size());
}
BENCHMARK(BM_StableHash64)->Arg(64)->Arg(4096)->Arg(1 << 20);

void BM_StableHash128(benchmark::State& state) {
  std::vector<char> buf(state.range(0), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(StableHash128(buf.data(), buf.size()));
  state.SetBytesProcessed(state.iterations() * buf.size());
}
BENCHMARK(BM_StableHash128)->Arg(64)->Arg(4096)->Arg(1 << 20);

// The SSD tier's record checksum: FastStableHasher64 fed 256 KiB pieces (AVX2
// where the CPU has it), against the library's one-shot StableHash64 above.
void BM_FastStableHasher64Pieces(benchmark::State& state) {
  std::vector<char> buf(state.range(0), 'x');
  constexpr size_t kPiece = 256 << 10;
  for (auto _ : state) {
    FastStableHasher64 h;
    for (size_t at = 0; at < buf.size(); at += kPiece) {
      h.Update(buf.data() + at, std::min(kPiece, buf.size() - at));
    }
    benchmark::DoNotOptimize(h.Digest());
  }
  state.SetBytesProcessed(state.iterations() * buf.size());
  state.SetLabel(FastStableHash64Kernel());
}
BENCHMARK(BM_FastStableHasher64Pieces)->Arg(1 << 20);

void BM_BaselineMemcpy(benchmark::State& state) {
  std::vector<char> src(state.range(0), 'x'), dst(state.range(0));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * src.size());
}
BENCHMARK(BM_BaselineMemcpy)->Arg(64)->Arg(4096)->Arg(1 << 20);

// The SHM and local read path: a value copied out of a region far larger than
// the caches (a worker's segment) into the reader's buffer, with its 64 KiB
// chunk digests. Three ways, same region, same random offsets:
//   0 memcpy only (the ceiling), 1 memcpy then digest each chunk from cache
//   (CopyAndDigest before the fused kernels), 2 CopyAndDigest (fused).
// Threads(2): both cores copying, as 8 SHM clients on this machine do.
constexpr size_t kRegionBytes = size_t{512} << 20;

const unsigned char* ColdRegion() {
  static const unsigned char* region = [] {
    auto* r = new unsigned char[kRegionBytes];
    for (size_t i = 0; i < kRegionBytes; ++i)
      r[i] = static_cast<unsigned char>(i * 131 + (i >> 12));
    return r;
  }();
  return region;
}

void BM_CopyOut(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const int how = static_cast<int>(state.range(1));
  const unsigned char* region = ColdRegion();
  std::vector<unsigned char> dst(len);
  std::vector<uint64_t> digests(DigestChunkCount(len));
  std::mt19937_64 rng(0x5EED + state.thread_index());
  const size_t slots = (kRegionBytes - len) >> 12;
  for (auto _ : state) {
    const unsigned char* src = region + ((rng() % slots) << 12);
    switch (how) {
      case 0:
        std::memcpy(dst.data(), src, len);
        break;
      case 1:
        for (size_t off = 0, k = 0; off < len; off += kDigestChunkBytes, ++k) {
          const size_t n = std::min<size_t>(kDigestChunkBytes, len - off);
          std::memcpy(dst.data() + off, src + off, n);
          digests[k] = FastStableHash64(dst.data() + off, n);
        }
        break;
      default:
        CopyAndDigest(dst.data(), src, len, digests.data());
        break;
    }
    benchmark::DoNotOptimize(digests.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
  static constexpr const char* kHow[] = {"memcpy", "copy_then_digest", "copy_and_digest"};
  state.SetLabel(std::string(kHow[how]) + " " + FastStableHash64Kernel());
}
BENCHMARK(BM_CopyOut)
    ->ArgsProduct({{1 << 20, 4 << 20}, {0, 1, 2}})
    ->ArgNames({"bytes", "how"})
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// The console output, then BM_CopyOut's ratios (median runs when repeated):
// copy_and_digest against memcpy alone and against copy_then_digest.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal, so logs and pipes get plain text.
  RatioReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") continue;
      std::string name = run.benchmark_name();
      if (const size_t pos = name.find("_median"); pos != std::string::npos) name.erase(pos);
      const auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end()) rate_[name] = it->second;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios() const {
    bool header = false;
    for (const auto& [name, rate] : rate_) {
      const size_t how = name.find("/how:2");
      if (how == std::string::npos) continue;
      const auto other = [&](char h) {
        std::string n = name;
        n[how + 5] = h;
        const auto it = rate_.find(n);
        return it == rate_.end() ? 0.0 : it->second;
      };
      const double memcpy_rate = other('0'), then_rate = other('1');
      if (memcpy_rate == 0 || then_rate == 0) continue;
      if (!header) {
        std::printf(
            "\nSame-run ratios, copy_and_digest (GB/s) against memcpy alone and "
            "copy_then_digest:\n");
        header = true;
      }
      std::printf("  %-46s %6.2f GB/s  vs memcpy %6.2f (%.3f)  vs copy_then_digest %6.2f (%.3f)\n",
                  name.c_str(), rate / 1e9, memcpy_rate / 1e9, rate / memcpy_rate, then_rate / 1e9,
                  rate / then_rate);
    }
  }

 private:
  std::map<std::string, double> rate_;
};

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  mooncake::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
