// Allocator benchmarks over every model, each with the plain first-fit free
// list (internal/first_fit_allocator.h) measured in the same run as the
// baseline; the ratios against it are printed after the table.
//
//   BM_AllocFreePairs<M>/fill/workload   single thread, steady state: 256
//       ops per iteration, each an allocation while live bytes are under
//       fill% of 1 GiB, else a free of a random live allocation, so two
//       ops are one alloc+free pair; items_per_second = pairs/s (a failed
//       allocation counts as an op: failed_allocs says how many there were).
//       workload 0: the mixed KV workload (internal/kv_workload.h);
//       workload 1: small objects, 64 B to 64 KiB log-uniform (~10^5 live).
//   BM_UtilizationAtFirstFailure<M>/workload   1 GiB, mixed KV workload
//       (0: whole-model blocks, odd sizes 4 KiB-4 MiB, the workload;
//       1: per-layer blocks, odd sizes 4 KiB-128 KiB), random walk
//       (allocate with p = 0.55, else free a random live allocation) until the
//       first failed allocation; utilization_at_first_failure = live requested
//       bytes / capacity at that moment, mean over 8 seeds (min also shown).
//   BM_UtilizationRelocating<M>/workload/windows   the same walk through
//       AllocateRelocating (the walk owns the bytes and answers relocations);
//       also moved_per_allocated (bytes it would copy / bytes allocated) and
//       relocations_per_run. Ratios against first fit's plain walk.
//   BM_FragmentationAfterChurn<M>/workload    1 GiB, mixed KV workload held at 85%
//       fill for 10^6 ops; external_fragmentation = 1 - largest free / free.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/internal/first_fit_allocator.h"
#include "mooncake/alloc/internal/kv_workload.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/alloc/locked_allocator.h"
#include "mooncake/alloc/size_class_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"

namespace mooncake::alloc {
namespace {

constexpr uint64_t kCapacity = uint64_t{1} << 30;

TlsfAllocator MakeTlsf(uint64_t capacity_bytes) {
  return TlsfAllocator(TlsfOptions{
      .capacity_bytes = capacity_bytes, .granularity_bytes = 64, .reserve_records = 1 << 18});
}

// workload 0: whole-model blocks (the workload); 1: per-layer blocks.
alloc_internal::KvWorkloadOptions KvOptions(int64_t workload) {
  return workload == 0 ? alloc_internal::KvWorkloadOptions{}
                       : alloc_internal::PerLayerKvWorkloadOptions();
}

SizeClassOptions KvClasses(int64_t workload) {
  return SizeClassOptions{.class_bytes = KvOptions(workload).block_bytes};
}

// Factories: the template argument names the model in each benchmark name.
struct FirstFit {
  using A = alloc_internal::FirstFitAllocator;
  static std::unique_ptr<A> Make(int64_t /*workload*/) { return std::make_unique<A>(kCapacity); }
};
struct Tlsf {
  using A = TlsfAllocator;
  static std::unique_ptr<A> Make(int64_t /*workload*/) {
    return std::make_unique<A>(MakeTlsf(kCapacity));
  }
};
struct LockedTlsf {
  using A = LockedAllocator<TlsfAllocator>;
  static std::unique_ptr<A> Make(int64_t /*workload*/) {
    return std::make_unique<A>(MakeTlsf(kCapacity));
  }
};
struct SizeClass {
  using A = SizeClassAllocator<TlsfAllocator>;
  static std::unique_ptr<A> Make(int64_t workload) {
    return std::make_unique<A>(MakeTlsf(kCapacity), KvClasses(workload));
  }
};
struct Kv {
  using A = KvAllocator<>;
  static std::unique_ptr<A> Make(int64_t workload) {
    return std::make_unique<A>(MakeTlsf(kCapacity), KvClasses(workload));
  }
};

// Small objects: log-uniform sizes 64 B .. 64 KiB, alignment 64.
class SmallObjects {
 public:
  explicit SmallObjects(uint64_t seed) : rng_(seed) {}
  alloc_internal::KvRequest Next() {
    const int bits = std::uniform_int_distribution<int>(6, 15)(rng_);
    return {std::uniform_int_distribution<uint64_t>(uint64_t{1} << bits, uint64_t{2} << bits)(rng_),
            64};
  }

 private:
  std::mt19937_64 rng_;
};

// Precomputed requests and victim picks so the timed loop measures the
// allocator, not the random number generator.
struct OpStream {
  static constexpr size_t kLength = 1 << 16;
  std::vector<alloc_internal::KvRequest> requests;
  std::vector<uint64_t> picks;

  template <typename Source>
  OpStream(Source& source, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < kLength; ++i) {
      requests.push_back(source.Next());
      picks.push_back(rng());
    }
  }
};

// Holds live bytes near `target`: allocate while under it, else free a random
// live allocation. Returns the number of failed allocations. Written as two
// loops (a run of allocations, then a run of frees) rather than one branch per
// op: the op sequence is the same, but each run ends in one mispredicted exit
// instead of a coin-flip branch on every op.
template <typename A>
uint64_t HoldFill(A& a, const OpStream& ops, size_t& cursor, std::vector<Allocation>& live,
                  uint64_t& live_bytes, uint64_t target, uint64_t op_count) {
  uint64_t failures = 0;
  const size_t end = cursor + op_count;
  while (cursor < end) {
    for (; cursor < end && (live_bytes < target || live.empty()); ++cursor) {
      const alloc_internal::KvRequest& r = ops.requests[cursor & (OpStream::kLength - 1)];
      if (std::optional<Allocation> x = a.allocate(r.size, r.alignment)) {
        live.push_back(*x);
        live_bytes += r.size;
      } else {
        ++failures;
      }
    }
    for (; cursor < end && live_bytes >= target && !live.empty(); ++cursor) {
      // Multiply-shift instead of %: a 64-bit division would cost as much as
      // the allocator call being measured.
      const uint64_t pick = ops.picks[cursor & (OpStream::kLength - 1)];
      const size_t v =
          static_cast<size_t>((static_cast<unsigned __int128>(pick) * live.size()) >> 64);
      a.free(live[v]);
      live_bytes -= live[v].size;
      live[v] = live.back();
      live.pop_back();
    }
  }
  return failures;
}

template <typename M>
void BM_AllocFreePairs(benchmark::State& state) {
  const uint64_t target = kCapacity * state.range(0) / 100;
  std::unique_ptr<typename M::A> a = M::Make(0);
  alloc_internal::KvWorkload kv({}, 42);
  SmallObjects small(42);
  const OpStream ops = state.range(1) == 0 ? OpStream(kv, 7) : OpStream(small, 7);
  std::vector<Allocation> live;
  uint64_t live_bytes = 0;
  size_t cursor = 0;
  // Reach the fill, then churn until the free extents reflect it.
  while (live_bytes < target) {
    if (HoldFill(*a, ops, cursor, live, live_bytes, target, 1) > 0) break;
  }
  HoldFill(*a, ops, cursor, live, live_bytes, target, 100'000);
  // A batch of ops per benchmark iteration keeps the framework's per-iteration
  // bookkeeping out of the figure; the ops themselves are unchanged.
  constexpr uint64_t kBatch = 256;
  uint64_t failures = 0;
  for (auto _ : state) failures += HoldFill(*a, ops, cursor, live, live_bytes, target, kBatch);
  state.SetItemsProcessed(state.iterations() * kBatch / 2);
  state.counters["fill"] = static_cast<double>(live_bytes) / kCapacity;
  state.counters["live"] = static_cast<double>(live.size());
  state.counters["failed_allocs"] = static_cast<double>(failures);
  state.counters["failed_per_op"] =
      static_cast<double>(failures) / static_cast<double>(state.iterations() * kBatch);
  for (const Allocation& x : live) a->free(x);
}

template <typename M>
void BM_UtilizationAtFirstFailure(benchmark::State& state) {
  double sum = 0, min = 1;
  int runs = 0;
  for (auto _ : state) {
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      std::unique_ptr<typename M::A> a = M::Make(state.range(0));
      alloc_internal::KvWorkload w(KvOptions(state.range(0)), seed);
      const double u =
          alloc_internal::RunUntilFirstFailure(*a, kCapacity, w, 0.55, uint64_t{1} << 26)
              .utilization;
      sum += u;
      min = std::min(min, u);
      ++runs;
    }
  }
  state.counters["utilization_at_first_failure"] = sum / runs;
  state.counters["utilization_min"] = min;
}

// BM_UtilizationAtFirstFailure with AllocateRelocating: the walk owns the
// bytes and lets the allocator move allocations (RelocationOptions defaults:
// at most twice the request moved per call). moved_per_allocated = bytes the
// owner would copy / bytes allocated over the walk.
template <typename M>
void BM_UtilizationRelocating(benchmark::State& state) {
  double sum = 0, min = 1, moved = 0, allocated = 0, relocations = 0;
  int runs = 0;
  for (auto _ : state) {
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      std::unique_ptr<typename M::A> a = M::Make(state.range(0));
      alloc_internal::KvWorkload w(KvOptions(state.range(0)), seed);
      const alloc_internal::RelocatingRun r = alloc_internal::RunUntilFirstFailureRelocating(
          *a, kCapacity, w, 0.55, uint64_t{1} << 26,
          RelocationOptions{.max_windows = static_cast<uint32_t>(state.range(1))});
      sum += r.first_failure.utilization;
      min = std::min(min, r.first_failure.utilization);
      moved += static_cast<double>(r.moved_bytes);
      allocated += static_cast<double>(r.allocated_bytes);
      relocations += static_cast<double>(r.relocations);
      ++runs;
    }
  }
  state.counters["utilization_at_first_failure"] = sum / runs;
  state.counters["utilization_min"] = min;
  state.counters["moved_per_allocated"] = allocated == 0 ? 0 : moved / allocated;
  state.counters["relocations_per_run"] = relocations / runs;
}

template <typename M>
void BM_FragmentationAfterChurn(benchmark::State& state) {
  double fragmentation = 0, largest_mib = 0, failures = 0;
  for (auto _ : state) {
    std::unique_ptr<typename M::A> a = M::Make(state.range(0));
    alloc_internal::KvWorkload kv(KvOptions(state.range(0)), 99);
    const OpStream ops(kv, 5);
    std::vector<Allocation> live;
    uint64_t live_bytes = 0;
    size_t cursor = 0;
    failures = static_cast<double>(
        HoldFill(*a, ops, cursor, live, live_bytes, kCapacity * 85 / 100, 1'000'000));
    const AllocatorStats s = a->stats();
    fragmentation = s.ExternalFragmentation();
    largest_mib = static_cast<double>(s.largest_free_bytes) / (1 << 20);
    for (const Allocation& x : live) a->free(x);
  }
  state.counters["external_fragmentation"] = fragmentation;
  state.counters["largest_free_mib"] = largest_mib;
  state.counters["failed_allocs"] = failures;
}

void PairArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"fill", "workload"});
  for (int workload : {0, 1}) {
    for (int fill : {50, 90}) b->Args({fill, workload});
  }
}

void KvPairArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"fill", "workload"});
  for (int fill : {50, 90}) b->Args({fill, 0});
}

// First fit takes ~1 ms per op on the small-object workload (~10^5 live): KV only.
BENCHMARK_TEMPLATE(BM_AllocFreePairs, FirstFit)->Apply(KvPairArgs);
BENCHMARK_TEMPLATE(BM_AllocFreePairs, Tlsf)->Apply(PairArgs);
BENCHMARK_TEMPLATE(BM_AllocFreePairs, LockedTlsf)->Apply(PairArgs);
BENCHMARK_TEMPLATE(BM_AllocFreePairs, SizeClass)->Apply(KvPairArgs);  // KV sizes only
BENCHMARK_TEMPLATE(BM_AllocFreePairs, Kv)->Apply(PairArgs);

void FillArgs(benchmark::internal::Benchmark* b) {
  b->ArgName("workload")->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);
}

BENCHMARK_TEMPLATE(BM_UtilizationAtFirstFailure, FirstFit)->Apply(FillArgs);
BENCHMARK_TEMPLATE(BM_UtilizationAtFirstFailure, Tlsf)->Apply(FillArgs);
BENCHMARK_TEMPLATE(BM_UtilizationAtFirstFailure, SizeClass)->Apply(FillArgs);
BENCHMARK_TEMPLATE(BM_UtilizationAtFirstFailure, Kv)->Apply(FillArgs);

// windows: RelocationOptions::max_windows (32 is the default; 8 and 256 show
// how little the number of windows tried matters).
void RelocatingArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"workload", "windows"})->Iterations(1)->Unit(benchmark::kMillisecond);
  for (const auto& [workload, windows] : {std::pair{0, 32}, {1, 32}, {0, 8}, {0, 256}}) {
    b->Args({workload, windows});
  }
}

BENCHMARK_TEMPLATE(BM_UtilizationRelocating, Tlsf)->Apply(RelocatingArgs);
BENCHMARK_TEMPLATE(BM_UtilizationRelocating, Kv)->Apply(RelocatingArgs);

BENCHMARK_TEMPLATE(BM_FragmentationAfterChurn, FirstFit)->Apply(FillArgs);
BENCHMARK_TEMPLATE(BM_FragmentationAfterChurn, Tlsf)->Apply(FillArgs);
BENCHMARK_TEMPLATE(BM_FragmentationAfterChurn, SizeClass)->Apply(FillArgs);
BENCHMARK_TEMPLATE(BM_FragmentationAfterChurn, Kv)->Apply(FillArgs);

// Passes everything to the console and keeps the counters of the runs that
// matter (medians when repeated) to print ratios against FirstFit.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") continue;
      std::string name = run.benchmark_name();
      if (const size_t pos = name.find("_median"); pos != std::string::npos) name.erase(pos);
      for (const auto& [counter, value] : run.counters) results_[name][counter] = value;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios() const {
    static constexpr const char* kMetrics[] = {"items_per_second", "utilization_at_first_failure",
                                               "external_fragmentation"};
    std::printf("\nSame-run ratios against the first-fit baseline (median runs):\n");
    for (const auto& [name, counters] : results_) {
      const size_t open = name.find('<'), close = name.find('>');
      if (open == std::string::npos || close == std::string::npos) continue;
      if (name.compare(open + 1, close - open - 1, "FirstFit") == 0) continue;
      // The relocating walk is compared with first fit's plain walk.
      std::string prefix = name.substr(0, open + 1), suffix = name.substr(close);
      if (prefix == "BM_UtilizationRelocating<") {
        prefix = "BM_UtilizationAtFirstFailure<";
        const size_t w = suffix.find("/windows:");
        if (w != std::string::npos) suffix.erase(w, suffix.find('/', w + 1) - w);
      }
      const std::string base = prefix + "FirstFit" + suffix;
      const auto it = results_.find(base);
      if (it == results_.end()) continue;
      for (const char* metric : kMetrics) {
        const auto mine = counters.find(metric), theirs = it->second.find(metric);
        if (mine == counters.end() || theirs == it->second.end()) continue;
        std::printf("  %-58s %-29s %12.4g vs %12.4g  ratio %.3f\n", name.c_str(), metric,
                    static_cast<double>(mine->second), static_cast<double>(theirs->second),
                    theirs->second == 0 ? 0.0 : mine->second / theirs->second);
      }
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> results_;
};

}  // namespace
}  // namespace mooncake::alloc

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  mooncake::alloc::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
