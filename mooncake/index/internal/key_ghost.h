// KeyGhost: a bounded FIFO memory of keys that left a cache, each with a
// small record (ARC / S3-FIFO "ghosts"). A policy asks whether a key it is
// admitting was seen before and what it knew about it then.
//
// Thread-safety: none; owned by one policy.
// Invariants: map_ holds at most the `limit` passed to the last Remember;
// every live map_ entry has exactly one fifo_ slot with its sequence number
// (stale slots, for keys taken or re-remembered since, are skipped).
#ifndef MOONCAKE_INDEX_INTERNAL_KEY_GHOST_H_
#define MOONCAKE_INDEX_INTERNAL_KEY_GHOST_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"

namespace mooncake::index_internal {

template <typename K, typename V, typename Hash>
class KeyGhost {
 public:
  // Remembers `key` (replacing an older record), then forgets the oldest
  // keys until at most `limit` remain. REQUIRES: limit > 0.
  void Remember(const K& key, const V& value, size_t limit) {
    MC_DASSERT(limit > 0, "a ghost needs room for one key");
    const uint64_t seq = ++seq_;
    map_.insert_or_assign(key, Slot{value, seq});
    fifo_.push_back({key, seq});
    while (map_.size() > limit || fifo_.size() > 2 * limit + 16) {
      auto [old, old_seq] = fifo_.front();
      fifo_.pop_front();
      auto it = map_.find(old);
      if (it != map_.end() && it->second.seq == old_seq) map_.erase(it);
    }
    MC_DASSERT(map_.size() <= limit, "ghost over its bound");
  }

  const V* Find(const K& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second.value;
  }

  // Forgets `key` (it is cached again); returns its record if it had one.
  std::optional<V> Take(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    V value = std::move(it->second.value);
    map_.erase(it);
    return value;
  }

  size_t size() const { return map_.size(); }

 private:
  struct Slot {
    V value;
    uint64_t seq;
  };

  absl::flat_hash_map<K, Slot, Hash> map_;
  std::deque<std::pair<K, uint64_t>> fifo_;
  uint64_t seq_ = 0;
};

}  // namespace mooncake::index_internal

#endif  // MOONCAKE_INDEX_INTERNAL_KEY_GHOST_H_
