// DramTier: a Tier in host memory. One contiguous arena carved by a
// TlsfAllocator (mooncake/alloc), the same way a worker carves its DRAM
// segment; a hash map holds key -> allocation.
//
// Completions run inline, before the call returns. Durability: none (process
// memory). Thread-safety: every call may run concurrently; one mutex guards
// the map and the allocator, and reads copy under it, so a Remove never frees
// bytes a Read is copying. Complexity: O(1) expected plus the copy.
#ifndef MOONCAKE_TIER_DRAM_TIER_H_
#define MOONCAKE_TIER_DRAM_TIER_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/tier/internal/string_map.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

class DramTier {
 public:
  static constexpr uint64_t kGranularityBytes = 64;

  // capacity_bytes: the arena's size, > 0 (rounded up to 64 bytes).
  explicit DramTier(uint64_t capacity_bytes)
      : capacity_((capacity_bytes + kGranularityBytes - 1) / kGranularityBytes * kGranularityBytes),
        arena_(new std::byte[capacity_]),
        alloc_(alloc::TlsfOptions{.capacity_bytes = capacity_,
                                  .granularity_bytes = kGranularityBytes}) {
    MC_ASSERT(capacity_bytes > 0, "DramTier needs a positive capacity");
  }

  DramTier(const DramTier&) = delete;
  DramTier& operator=(const DramTier&) = delete;

  void Write(std::string_view key, std::span<const std::byte> bytes, const ObjectMeta& meta,
             WriteDone done) {
    done(WriteNow(key, bytes, meta));
  }

  void Read(std::string_view key, std::span<std::byte> into, ReadDone done) {
    done(ReadNow(key, into));
  }

  void Remove(std::string_view key, WriteDone done) { done(RemoveNow(key)); }

  std::optional<ObjectInfo> Lookup(std::string_view key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return Info(it->first, it->second);
  }
  bool Contains(std::string_view key) const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.contains(key);
  }
  void ForEach(ObjectVisitor visit) const {
    std::vector<ObjectInfo> snapshot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      snapshot.reserve(map_.size());
      for (const auto& [key, e] : map_) snapshot.push_back(Info(key, e));
    }
    for (const ObjectInfo& info : snapshot) visit(info);
  }
  TierStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    TierStats s = stats_;
    s.capacity_bytes = capacity_;
    s.objects = map_.size();
    return s;
  }
  uint64_t capacity_bytes() const { return capacity_; }

  // Synchronous forms (what the callbacks receive).
  absl::Status WriteNow(std::string_view key, std::span<const std::byte> bytes,
                        const ObjectMeta& meta) {
    if (key.empty() || key.size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("key must be 1 to ", kMaxKeyBytes, " bytes"));
    }
    if (bytes.empty()) return absl::InvalidArgumentError("cannot write an empty object");
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.contains(key)) {
      return absl::AlreadyExistsError(
          absl::StrCat("key '", AbslView(key), "' is already stored; remove it first"));
    }
    std::optional<alloc::Allocation> a = alloc_.allocate(bytes.size(), kGranularityBytes);
    if (!a) {
      ++stats_.write_failures;
      return absl::ResourceExhaustedError(absl::StrCat("DRAM tier full: no room for ", bytes.size(),
                                                       " bytes (", stats_.used_bytes, " of ",
                                                       capacity_, " used)"));
    }
    std::memcpy(arena_.get() + a->offset, bytes.data(), bytes.size());
    map_.emplace(key, Entry{*a, meta});
    ++stats_.writes;
    stats_.bytes_written += bytes.size();
    stats_.used_bytes += bytes.size();
    stats_.raw_bytes += bytes.size();
    return absl::OkStatus();
  }

  absl::StatusOr<ReadResult> ReadNow(std::string_view key, std::span<std::byte> into) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      ++stats_.read_misses;
      return absl::NotFoundError(absl::StrCat("key '", AbslView(key), "' is not in the DRAM tier"));
    }
    const Entry& e = it->second;
    if (into.size() < e.allocation.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "read of '", AbslView(key), "' needs ", e.allocation.size, " bytes, got ", into.size()));
    }
    std::memcpy(into.data(), arena_.get() + e.allocation.offset, e.allocation.size);
    ++stats_.reads;
    stats_.bytes_read += e.allocation.size;
    return ReadResult{e.allocation.size, e.meta};
  }

  absl::Status RemoveNow(std::string_view key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      return absl::NotFoundError(absl::StrCat("key '", AbslView(key), "' is not in the DRAM tier"));
    }
    alloc_.free(it->second.allocation);
    stats_.used_bytes -= it->second.allocation.size;
    stats_.raw_bytes -= it->second.allocation.size;
    ++stats_.removes;
    map_.erase(it);
    return absl::OkStatus();
  }

 private:
  struct Entry {
    alloc::Allocation allocation;
    ObjectMeta meta;
  };
  static ObjectInfo Info(const std::string& key, const Entry& e) {
    return ObjectInfo{key, e.allocation.size, e.allocation.size, e.meta, false};
  }

  const uint64_t capacity_;
  std::unique_ptr<std::byte[]> arena_;
  mutable std::mutex mu_;
  alloc::TlsfAllocator alloc_;           // guarded by mu_
  tier_internal::StringMap<Entry> map_;  // guarded by mu_
  TierStats stats_;                      // guarded by mu_
};

static_assert(Tier<DramTier>);

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_DRAM_TIER_H_
