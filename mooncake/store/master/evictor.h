// Evictor<P>: a mooncake/index EvictionPolicy over object keys, behind one
// mutex, in the shape the master needs.
//
// The policy orders keys; the master decides what may go. EvictUntil asks the
// policy for victims that `can_evict` accepts and calls `remove(key)`, which
// re-checks the object under its shard lock and returns the bytes it freed,
// or nullopt if the object became unevictable in between (a lease was just
// granted): such a key is admitted again, so the policy keeps tracking it.
//
// EvictUntil holds the mutex only while it takes a batch of at most
// kEvictionBatchMax victims out of the policy; `remove` runs with the mutex
// released, so Touch and Admit (every read and commit) wait for one batch's
// policy work, not for a whole round of removals. A victim is out of the
// policy while it is being removed: a Touch of it meanwhile is a no-op, an
// Admit of it (a new version committed) tracks it again. Nothing is freed
// twice, because `remove` decides under the shard lock and the object leaves
// the table there.
//
// The policy may hold keys whose objects are gone (a remove raced a commit's
// Admit); `can_evict` says yes to those and `remove` frees nothing, so they
// drain away. Touch and Admit tolerate untracked and tracked keys alike,
// because policies assert on misuse (Touch of an untracked key, Admit of a
// tracked one) and the master's calls race with removals.
//
// Keys: the policy holds ObjectKeys (InlineString: a key of up to 23 bytes,
// a block key among them, needs no heap block of its own). The methods take
// std::strings; lookups (Touch, Erase, Contains) hand the policy borrowed
// keys (InlineString::Borrow: no copy), and what the policy stores it copies.
//
// Thread-safety: every method may run concurrently (one mutex). Lock order:
// the evictor's mutex is taken before shard mutexes (can_evict locks a
// shard under it), never while holding one. `remove` is called without it.
#ifndef MOONCAKE_STORE_MASTER_EVICTOR_H_
#define MOONCAKE_STORE_MASTER_EVICTOR_H_

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "mooncake/base/inline_string.h"
#include "mooncake/base/mutex.h"
#include "mooncake/index/eviction_policy.h"

namespace mooncake::master {

// The key type and hash of the master's policies: index::LruPolicy<ObjectKey,
// ObjectKeyHash> and the like.
using ObjectKey = InlineString;
using ObjectKeyHash = InlineStringHash;

template <typename P>
concept ObjectEvictionPolicy =
    index::EvictionPolicy<P> && std::same_as<typename P::key_type, ObjectKey>;

// Victims EvictUntil takes out of the policy per hold of the evictor's mutex.
inline constexpr uint64_t kEvictionBatchMax = 64;

struct EvictionResult {
  uint64_t freed_bytes = 0;
  uint64_t victims = 0;
};

template <ObjectEvictionPolicy P>
class Evictor {
 public:
  explicit Evictor(P policy = P()) : policy_(std::move(policy)) {}

  // A read of `keys` (a prefix chain root first, or one key).
  void Touch(std::span<const std::string> keys) {
    absl::InlinedVector<ObjectKey, 8> k;
    k.reserve(keys.size());
    for (const std::string& key : keys) k.push_back(ObjectKey::Borrow(key));
    const std::span<const ObjectKey> chain(k.data(), k.size());
    MutexLock lock(&mu_);
    bool all = true;
    for (const ObjectKey& key : chain) all = all && policy_.Contains(key);
    if (all) {
      policy_.Touch(chain);
      return;
    }
    for (size_t i = chain.size(); i-- > 0;) {
      if (policy_.Contains(chain[i])) policy_.Touch(chain.subspan(i, 1));
    }
  }

  // A commit of `key` holding `charge` bytes.
  void Admit(std::string_view key, uint64_t charge) {
    const ObjectKey k = ObjectKey::Borrow(key);  // the policy copies what it keeps
    MutexLock lock(&mu_);
    AdmitLocked(k, charge);
  }

  void Erase(std::string_view key) {
    const ObjectKey k = ObjectKey::Borrow(key);
    MutexLock lock(&mu_);
    policy_.Erase(k);
  }

  // Evicts until `target_bytes` are freed, at most `max_victims` objects, or
  // the policy offers nothing more. Victims are taken kEvictionBatchMax at a
  // time under the mutex (a batch stops once its charges cover what is still
  // wanted) and removed with it released.
  template <typename CanEvict, typename Remove>
  EvictionResult EvictUntil(uint64_t target_bytes, uint64_t max_victims, CanEvict&& can_evict,
                            Remove&& remove) {
    EvictionResult result;
    // Each failed re-check re-admits a key; bound those rounds too.
    const uint64_t tries_max = 2 * max_victims;
    uint64_t tries = 0;
    std::vector<index::Eviction<ObjectKey>> batch;
    std::vector<index::Eviction<ObjectKey>> busy;
    while (result.freed_bytes < target_bytes && result.victims < max_victims && tries < tries_max) {
      const uint64_t want_bytes = target_bytes - result.freed_bytes;
      const uint64_t n_max =
          std::min({kEvictionBatchMax, max_victims - result.victims, tries_max - tries});
      TakeBatch(want_bytes, n_max, can_evict, batch);
      if (batch.empty()) break;
      tries += batch.size();
      busy.clear();
      for (index::Eviction<ObjectKey>& victim : batch) {
        std::optional<uint64_t> freed = remove(victim.key);
        if (!freed.has_value()) {
          busy.push_back(std::move(victim));
          continue;
        }
        result.freed_bytes += *freed;
        if (*freed > 0) ++result.victims;
      }
      if (!busy.empty()) {
        MutexLock lock(&mu_);
        for (const index::Eviction<ObjectKey>& v : busy) AdmitLocked(v.key, v.charge);
      }
    }
    return result;
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return policy_.size();
  }
  bool Contains(std::string_view key) const {
    const ObjectKey k = ObjectKey::Borrow(key);
    MutexLock lock(&mu_);
    return policy_.Contains(k);
  }

 private:
  // Takes up to `n_max` victims out of the policy, fewer once their charges
  // cover `want_bytes`.
  template <typename CanEvict>
  void TakeBatch(uint64_t want_bytes, uint64_t n_max, CanEvict& can_evict,
                 std::vector<index::Eviction<ObjectKey>>& batch) {
    batch.clear();
    uint64_t charged = 0;
    MutexLock lock(&mu_);
    while (batch.size() < n_max && charged < want_bytes) {
      std::optional<index::Eviction<ObjectKey>> victim = policy_.Evict(can_evict);
      if (!victim.has_value()) break;
      charged += victim->charge;
      batch.push_back(std::move(*victim));
    }
  }

  void AdmitLocked(const ObjectKey& key, uint64_t charge) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::span<const ObjectKey> one(&key, 1);
    if (policy_.Contains(key)) {
      policy_.Touch(one);
    } else {
      policy_.Admit(one, 0, charge);
    }
  }

  mutable Mutex mu_;
  P policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_EVICTOR_H_
