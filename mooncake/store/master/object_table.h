// ObjectTable: key -> ObjectMeta, sharded so that requests for different keys
// rarely meet on one lock.
//
// A key's shard is chosen by StableHash64 of ShardKey(key), so a pending
// replacement shares its key's shard (object_meta.h); that hash is
// independent of the SwissTable's own, so the shard bits do not thin out the
// table's buckets. Each shard holds its objects and the DeferredFree records of
// objects that left it while leased, keyed by version (or put id).
//
// The objects are in a node_hash_map: an empty slot costs 8 bytes rather than
// a whole (key, ObjectMeta) pair, which at the SwissTable's load factors
// (7/16..7/8) halves the table's memory per object (docs/master_scale.md),
// and a rehash moves pointers. The price is one more pointer a lookup follows.
// Keys are InlineStrings: a key of up to 23 bytes (a block key is 18) sits in
// the node, with no heap block of its own and no second pointer to follow.
//
//   table.With(key, [&](ObjectTable::Shard& s) { ... s.objects.find(...) ... });
//
// Thread-safety: With/ForEach run the callback under the shard's mutex; the
// callback must not call back into the table (no shard lock nests another)
// and should be short. Lock order in the master: evictor -> shard -> segment.
#ifndef MOONCAKE_STORE_MASTER_OBJECT_TABLE_H_
#define MOONCAKE_STORE_MASTER_OBJECT_TABLE_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/inline_string.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/master/object_meta.h"

namespace mooncake::master {

class ObjectTable {
 public:
  struct Shard {
    Mutex mu;
    absl::node_hash_map<InlineString, ObjectMeta, InlineStringHash, InlineStringEq> objects
        ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<uint64_t, DeferredFree> deferred ABSL_GUARDED_BY(mu);

    // Lookup without building a std::string (block keys are built on the stack).
    ObjectMeta* Find(std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      auto it = objects.find(AbslView(key));
      return it == objects.end() ? nullptr : &it->second;
    }
  };

  // REQUIRES: shard_count is a power of two, 1..4096.
  explicit ObjectTable(size_t shard_count = 64)
      : mask_(shard_count - 1), shards_(new Shard[shard_count]) {
    MC_ASSERT(shard_count >= 1 && shard_count <= 4096 && std::has_single_bit(shard_count),
              "shard_count must be a power of two in [1, 4096]");
  }
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  size_t shard_count() const { return mask_ + 1; }
  size_t ShardIndex(std::string_view key) const { return StableHash64(ShardKey(key)) & mask_; }

  // Runs f(Shard&) under the key's shard lock; returns what f returns.
  template <typename F>
  decltype(auto) With(std::string_view key, F&& f) {
    Shard& shard = shards_[ShardIndex(key)];
    MutexLock lock(&shard.mu);
    return f(shard);
  }

  // Runs f(Shard&) under the lock of shard `index` (< shard_count()).
  template <typename F>
  decltype(auto) WithShard(size_t index, F&& f) {
    MC_DASSERT(index <= mask_, "shard index out of range");
    MutexLock lock(&shards_[index].mu);
    return f(shards_[index]);
  }

  // Runs f(Shard&) on every shard in turn, each under its own lock.
  template <typename F>
  void ForEach(F&& f) {
    for (size_t i = 0; i <= mask_; ++i) {
      MutexLock lock(&shards_[i].mu);
      f(shards_[i]);
    }
  }

  // O(shards); a snapshot that may be stale by the time it returns.
  size_t ObjectCount() {
    size_t n = 0;
    ForEach([&](Shard& s) ABSL_NO_THREAD_SAFETY_ANALYSIS { n += s.objects.size(); });
    return n;
  }

 private:
  const size_t mask_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_OBJECT_TABLE_H_
