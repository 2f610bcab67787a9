// RecordIndex: the SSD tier's key -> record map, the keys being written, and
// the tier-wide sequence number records are stamped with.
//
// A record (SsdRecord) is shared: the index holds one reference, and every
// operation on it another, so a record removed from the index stays valid
// until the last read of it ends. What happens to its extent then is the
// deleter's business (SsdTier frees or quarantines it; see SsdRecord::reclaim).
//
// Thread-safety: every call may run concurrently; one lock (mu_), held only
// for the map operation itself. Never calls out while holding it, so it is a
// leaf in SsdTier's lock order (ssd_tier.h). Record deleters run outside it
// when the caller drops the references it got (Clear() is the exception: it
// destroys the references under the lock, and the tier calls it only after
// every operation has ended).
//
// Complexity: O(1) expected per call but Snapshot (O(n)).
#ifndef MOONCAKE_TIER_INTERNAL_RECORD_INDEX_H_
#define MOONCAKE_TIER_INTERNAL_RECORD_INDEX_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/internal/string_map.h"

namespace mooncake::tier_internal {

// One object on disk: where its record lies and its header's fields.
struct SsdRecord {
  std::string key;
  uint32_t file = 0;
  alloc::Allocation extent;
  RecordHeader header;
  // Set once the record's header is durably gone (or was never written):
  // only then may its extent be reused.
  std::atomic<bool> reclaim{false};
  uint64_t DiskOffset() const { return kBlockBytes + extent.offset; }
};

class RecordIndex {
 public:
  using RecordPtr = std::shared_ptr<SsdRecord>;

  RecordIndex() = default;
  RecordIndex(const RecordIndex&) = delete;
  RecordIndex& operator=(const RecordIndex&) = delete;

  // Reserves `key` for a write: its sequence number, or nullopt when the key
  // is stored or being written, or when the sequence numbers are exhausted
  // (SequencesExhausted). Every reservation ends with EndWrite.
  std::optional<uint64_t> BeginWrite(std::string_view key) {
    MutexLock lock(&mu_);
    if (next_sequence_ > kMaxSequence) return std::nullopt;
    if (index_.contains(key) || writing_.contains(key)) return std::nullopt;
    writing_.emplace(key);
    return next_sequence_++;
  }
  // Ends BeginWrite's reservation; a non-null record becomes visible under `key`.
  void EndWrite(std::string_view key, RecordPtr record) {
    MutexLock lock(&mu_);
    const size_t erased = writing_.erase(key);
    MC_ASSERT(erased == 1, "EndWrite without BeginWrite");
    if (record) index_.emplace(key, std::move(record));
  }
  // Recovery: a record found on disk (no reservation).
  void Insert(RecordPtr record) {
    MutexLock lock(&mu_);
    std::string key = record->key;
    const bool fresh = index_.emplace(std::move(key), std::move(record)).second;
    MC_ASSERT(fresh, "recovery inserted a key twice");
  }
  // Recovery: sequence numbers go on above every record on disk.
  // REQUIRES: next <= kMaxSequence + 1 (recovery's largest valid sequence + 1).
  void SetNextSequence(uint64_t next) {
    MutexLock lock(&mu_);
    MC_ASSERT(next >= next_sequence_, "sequence numbers never go back");
    MC_ASSERT(next <= kMaxSequence + 1, "a sequence past kMaxSequence is never valid");
    next_sequence_ = next;
  }
  // True once every sequence number up to kMaxSequence is taken: only after
  // recovering a file whose records claim numbers near it (a tier counts from 1).
  bool SequencesExhausted() const {
    MutexLock lock(&mu_);
    return next_sequence_ > kMaxSequence;
  }

  RecordPtr Find(std::string_view key) const {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : it->second;
  }
  // Removes and returns the key's record (null when absent).
  RecordPtr Take(std::string_view key) {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    RecordPtr r = std::move(it->second);
    index_.erase(it);
    return r;
  }
  // Removes `record` if it is still its key's; true if it was.
  bool Drop(const RecordPtr& record) {
    MutexLock lock(&mu_);
    auto it = index_.find(record->key);
    if (it == index_.end() || it->second != record) return false;
    index_.erase(it);
    return true;
  }
  bool Contains(std::string_view key) const {
    MutexLock lock(&mu_);
    return index_.contains(key);
  }
  size_t size() const {
    MutexLock lock(&mu_);
    return index_.size();
  }
  std::vector<RecordPtr> Snapshot() const {
    std::vector<RecordPtr> out;
    MutexLock lock(&mu_);
    out.reserve(index_.size());
    for (const auto& [key, rec] : index_) out.push_back(rec);
    return out;
  }
  void Clear() {
    MutexLock lock(&mu_);
    index_.clear();
  }

 private:
  mutable Mutex mu_;
  StringMap<RecordPtr> index_ ABSL_GUARDED_BY(mu_);
  StringSet writing_ ABSL_GUARDED_BY(mu_);  // writes in flight
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_RECORD_INDEX_H_
