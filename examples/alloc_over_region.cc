// alloc_over_region: mooncake's allocator embedded over memory the caller owns.
//
// An inference engine registers one large region once (ibv_reg_mr for RDMA,
// cudaMalloc + an IPC handle for GPUs) and then carves its KV blocks out of it.
// mooncake's allocators never read or write the bytes they manage: they hand
// out offsets into [0, capacity) and keep their metadata elsewhere, so the same
// allocator serves host DRAM, GPU memory or registered memory alike. The caller
// adds its own base address.
//
// Here an mmap'd buffer stands in for the registered region. A KvAllocator
// carves it: requests of exactly the KV block size are packed into slab pages,
// any other size (a partial trailing block, a metadata record) comes from the
// TLSF backing. The program places the blocks of three requests, writes each
// block's bytes at base + offset, frees one finished request, fills the region
// until the allocator refuses, checks every live block's bytes, and prints
// the allocator's statistics.
//
//   bazel run //examples:alloc_over_region
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/status_macros.h"

namespace {

using mooncake::alloc::Allocation;
using mooncake::alloc::AllocatorStats;
using mooncake::alloc::KvAllocator;
using mooncake::alloc::SizeClassOptions;
using mooncake::alloc::TlsfAllocator;
using mooncake::alloc::TlsfOptions;

// One KV block of one layer: 16 tokens x (K and V) x 8 KV heads x 128 dims x
// 2 bytes (bf16) = 64 KiB.
constexpr uint64_t kBlockBytes = 16 * 2 * 8 * 128 * 2;
constexpr uint64_t kRegionBytes = uint64_t{64} << 20;
constexpr uint64_t kAlignment = 4096;  // what a NIC or a GPU copy engine likes

// The caller's region: anonymous memory here, registered memory in an engine.
class Region {
 public:
  explicit Region(uint64_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~Region() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  char* base() const { return base_; }

 private:
  uint64_t bytes_;
  char* base_;
};

// A placed block: where it is and whose bytes it holds.
struct Block {
  Allocation where;
  uint64_t tag;
};

// Fills [p, p + n) with a pattern derived from `tag` (the engine's KV writes).
void Write(char* p, uint64_t n, uint64_t tag) {
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t word = tag * 0x9E3779B97F4A7C15ULL + i;
    std::memcpy(p + i, &word, 8);
  }
}

bool Check(const char* p, uint64_t n, uint64_t tag) {
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    if (word != tag * 0x9E3779B97F4A7C15ULL + i) return false;
  }
  return true;
}

void PrintStats(const char* when, const AllocatorStats& s) {
  std::printf(
      "%-22s used %6.2f MiB  free %6.2f MiB  largest free %6.2f MiB  live %4llu  "
      "fragmentation %.3f\n",
      when, s.used_bytes / 1048576.0, s.free_bytes / 1048576.0, s.largest_free_bytes / 1048576.0,
      static_cast<unsigned long long>(s.live_allocations), s.ExternalFragmentation());
}

absl::Status Run() {
  Region region(kRegionBytes);
  if (region.base() == nullptr) return absl::ResourceExhaustedError("mmap of the region failed");

  // The allocator knows only the region's size, never its address.
  ASSIGN_OR_RETURN(TlsfAllocator tlsf,
                   TlsfAllocator::Create(TlsfOptions{.capacity_bytes = kRegionBytes}));
  ASSIGN_OR_RETURN(auto kv, KvAllocator<>::Create(std::move(tlsf),
                                                  SizeClassOptions{.class_bytes = {kBlockBytes}}));

  // Three requests: 40, 25 and 57 full blocks, each with a partial last block
  // (an odd size, from the TLSF backing).
  std::vector<std::vector<Block>> requests(3);
  const uint64_t full_blocks[3] = {40, 25, 57};
  uint64_t tag = 1;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (uint64_t b = 0; b <= full_blocks[r]; ++b) {
      const uint64_t size = b < full_blocks[r] ? kBlockBytes : kBlockBytes / 3 + 100 * r;
      std::optional<Allocation> a = kv.allocate(size, kAlignment);
      if (!a.has_value()) return absl::ResourceExhaustedError("region full too early");
      Write(region.base() + a->offset, a->size, tag);
      requests[r].push_back({*a, tag++});
    }
  }
  PrintStats("three requests placed:", kv.stats());

  // Request 1 finished: its blocks go back to the allocator.
  for (const Block& b : requests[1]) kv.free(b.where);
  requests[1].clear();
  PrintStats("request 1 freed:", kv.stats());

  // Fill with full blocks until the allocator says no (std::nullopt, never a crash).
  uint64_t filled = 0;
  while (std::optional<Allocation> a = kv.allocate(kBlockBytes, kAlignment)) {
    Write(region.base() + a->offset, a->size, tag);
    requests[0].push_back({*a, tag++});
    ++filled;
  }
  const AllocatorStats full = kv.stats();
  PrintStats("filled:", full);

  // Every live block still holds its own bytes: no two allocations overlap.
  uint64_t checked = 0;
  for (const auto& req : requests) {
    for (const Block& b : req) {
      if (b.where.offset % kAlignment != 0) {
        return absl::InternalError(absl::StrCat("block at ", b.where.offset, " is misaligned"));
      }
      if (!Check(region.base() + b.where.offset, b.where.size, b.tag)) {
        return absl::DataLossError(absl::StrCat("block ", b.tag, " was overwritten"));
      }
      ++checked;
    }
  }
  std::printf("blocks added while filling: %llu\n", static_cast<unsigned long long>(filled));
  std::printf("verified %llu live blocks at their offsets\n",
              static_cast<unsigned long long>(checked));
  std::printf("utilization at first refusal: %.4f (used / capacity)\n",
              static_cast<double>(full.used_bytes) / static_cast<double>(full.capacity_bytes));

  for (const auto& req : requests) {
    for (const Block& b : req) kv.free(b.where);
  }
  const AllocatorStats empty = kv.stats();
  PrintStats("all freed:", empty);
  if (empty.used_bytes != 0 || empty.live_allocations != 0) {
    return absl::InternalError("allocator not empty after freeing everything");
  }
  return absl::OkStatus();
}

}  // namespace

int main() {
  const absl::Status s = Run();
  if (!s.ok()) {
    std::fprintf(stderr, "alloc_over_region: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
