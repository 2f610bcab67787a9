// The seeded KV-cache workload the benchmarks and tests replay.
//
// Block sizes come from real model shapes: one KV block of a model is
//   layers x kv_heads x head_dim x block_tokens x dtype_bytes x 2 (K and V)
// for one tensor-parallel rank. DefaultKvBlockSizes() uses Llama-3-8B
// (32 layers, 8 KV heads, head_dim 128) and Qwen2.5-7B (28 layers, 4 KV
// heads, head_dim 128), bf16, with 16- and 64-token blocks:
//   Llama-3-8B: 2 MiB (16 tokens), 8 MiB (64 tokens)
//   Qwen2.5-7B: 896 KiB (16 tokens), 3.5 MiB (64 tokens)
// A fraction of requests (10% by default) are odd sizes, uniform in bytes
// between 4 KiB and 4 MiB (metadata, partial blocks, other models).
// Block requests ask for 4 KiB alignment (page-aligned for DMA), odd ones
// for 64 B.
#ifndef MOONCAKE_ALLOC_INTERNAL_KV_WORKLOAD_H_
#define MOONCAKE_ALLOC_INTERNAL_KV_WORKLOAD_H_

#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mooncake/alloc/allocator.h"
#include "mooncake/base/assert.h"

namespace mooncake::alloc_internal {

constexpr uint64_t KvBlockBytes(uint64_t layers, uint64_t kv_heads, uint64_t head_dim,
                                uint64_t block_tokens, uint64_t dtype_bytes) {
  return layers * kv_heads * head_dim * block_tokens * dtype_bytes * 2;
}

inline std::vector<uint64_t> DefaultKvBlockSizes() {
  return {KvBlockBytes(32, 8, 128, 16, 2), KvBlockBytes(32, 8, 128, 64, 2),
          KvBlockBytes(28, 4, 128, 16, 2), KvBlockBytes(28, 4, 128, 64, 2)};
}

// The same models stored one layer per object (as engines that keep
// per-layer KV tensors do): 64 KiB, 256 KiB, 32 KiB, 128 KiB.
inline std::vector<uint64_t> PerLayerKvBlockSizes() {
  return {KvBlockBytes(1, 8, 128, 16, 2), KvBlockBytes(1, 8, 128, 64, 2),
          KvBlockBytes(1, 4, 128, 16, 2), KvBlockBytes(1, 4, 128, 64, 2)};
}

struct KvWorkloadOptions {
  std::vector<uint64_t> block_bytes = DefaultKvBlockSizes();
  double odd_fraction = 0.1;
  uint64_t odd_min_bytes = 4096;
  uint64_t odd_max_bytes = uint64_t{4} << 20;
  uint64_t block_alignment = 4096;
  uint64_t odd_alignment = 64;
};

// The per-layer variant: per-layer blocks, odd sizes scaled alike (4 KiB to
// 128 KiB), so the largest request is again about the largest block.
inline KvWorkloadOptions PerLayerKvWorkloadOptions() {
  KvWorkloadOptions options;
  options.block_bytes = PerLayerKvBlockSizes();
  options.odd_max_bytes = uint64_t{128} << 10;
  return options;
}

struct KvRequest {
  uint64_t size = 0;
  uint64_t alignment = 1;
};

class KvWorkload {
 public:
  KvWorkload(KvWorkloadOptions options, uint64_t seed) : options_(std::move(options)), rng_(seed) {
    MC_ASSERT(!options_.block_bytes.empty() && options_.odd_min_bytes > 0 &&
                  options_.odd_min_bytes <= options_.odd_max_bytes,
              "bad KvWorkloadOptions");
  }

  KvRequest Next() {
    if (std::uniform_real_distribution<double>(0, 1)(rng_) < options_.odd_fraction) {
      return {std::uniform_int_distribution<uint64_t>(options_.odd_min_bytes,
                                                      options_.odd_max_bytes)(rng_),
              options_.odd_alignment};
    }
    const size_t i =
        std::uniform_int_distribution<size_t>(0, options_.block_bytes.size() - 1)(rng_);
    return {options_.block_bytes[i], options_.block_alignment};
  }

  // Uniform in [0, n).
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  const KvWorkloadOptions& options() const { return options_; }

 private:
  KvWorkloadOptions options_;
  std::mt19937_64 rng_;
};

struct FirstFailure {
  double utilization = 0;  // live requested bytes / capacity at the failure
  uint64_t operations = 0;
  uint64_t live_allocations = 0;
};

struct RelocatingRun {
  FirstFailure first_failure;
  uint64_t allocated_bytes = 0;  // requested bytes of every successful allocation
  uint64_t moved_bytes = 0;      // bytes the owner copied for relocations
  uint64_t relocations = 0;      // Relocation callbacks
};

// Random walk: allocate with probability `alloc_probability` (always when
// nothing is live), else free a uniformly chosen live allocation; stop at the
// first failed allocation. The live byte count is the walk's own, not the
// allocator's stats. Frees everything before returning. With `relocation`,
// allocations go through the allocator's AllocateRelocating and the walk is
// the owner of the bytes: it answers each Relocation by updating its live
// allocation (it has no bytes to copy; it counts what it would copy), so the
// first failure is the first request that even relocation cannot serve.
template <typename A>
RelocatingRun RunWalk(A& allocator, uint64_t capacity_bytes, KvWorkload& workload,
                      double alloc_probability, uint64_t max_operations,
                      const alloc::RelocationOptions* relocation) {
  std::vector<alloc::Allocation> live;
  std::unordered_map<uint64_t, size_t> by_offset;  // live offset -> index in `live`
  uint64_t live_bytes = 0;
  RelocatingRun run;
  FirstFailure& result = run.first_failure;
  auto relocate = [&](const alloc::Relocation& r) {
    const auto it = by_offset.find(r.from_offset);
    MC_ASSERT(it != by_offset.end(), "relocation of an offset the walk does not hold");
    const size_t i = it->second;
    by_offset.erase(it);
    live[i].offset = r.to_offset;
    live[i].handle = r.handle;
    MC_ASSERT(by_offset.emplace(r.to_offset, i).second, "relocated onto a live allocation");
    run.moved_bytes += live[i].size;
    ++run.relocations;
  };
  auto allocate = [&](const KvRequest& r) -> std::optional<alloc::Allocation> {
    if constexpr (requires {
                    allocator.AllocateRelocating(r.size, r.alignment, *relocation, relocate);
                  }) {
      if (relocation != nullptr) {
        return allocator.AllocateRelocating(r.size, r.alignment, *relocation, relocate);
      }
    }
    MC_ASSERT(relocation == nullptr, "the allocator cannot relocate");
    return allocator.allocate(r.size, r.alignment);
  };
  for (; result.operations < max_operations; ++result.operations) {
    if (live.empty() || workload.Chance(alloc_probability)) {
      std::optional<alloc::Allocation> a = allocate(workload.Next());
      if (!a.has_value()) break;
      if (relocation != nullptr) {
        MC_ASSERT(by_offset.emplace(a->offset, live.size()).second, "allocated a live offset");
      }
      live.push_back(*a);
      live_bytes += a->size;
      run.allocated_bytes += a->size;
    } else {
      const size_t i = workload.Pick(live.size());
      allocator.free(live[i]);
      live_bytes -= live[i].size;
      if (relocation != nullptr) {
        by_offset.erase(live[i].offset);
        if (i + 1 != live.size()) by_offset[live.back().offset] = i;
      }
      live[i] = live.back();
      live.pop_back();
    }
  }
  result.utilization = static_cast<double>(live_bytes) / static_cast<double>(capacity_bytes);
  result.live_allocations = live.size();
  for (const alloc::Allocation& a : live) allocator.free(a);
  return run;
}

template <alloc::Allocator A>
FirstFailure RunUntilFirstFailure(A& allocator, uint64_t capacity_bytes, KvWorkload& workload,
                                  double alloc_probability, uint64_t max_operations) {
  return RunWalk(allocator, capacity_bytes, workload, alloc_probability, max_operations, nullptr)
      .first_failure;
}

template <typename A>
RelocatingRun RunUntilFirstFailureRelocating(A& allocator, uint64_t capacity_bytes,
                                             KvWorkload& workload, double alloc_probability,
                                             uint64_t max_operations,
                                             const alloc::RelocationOptions& options) {
  return RunWalk(allocator, capacity_bytes, workload, alloc_probability, max_operations, &options);
}

}  // namespace mooncake::alloc_internal

#endif  // MOONCAKE_ALLOC_INTERNAL_KV_WORKLOAD_H_
