// Evictor<P>: a mooncake/index EvictionPolicy over object keys, behind one
// mutex, in the shape the master needs.
//
// The policy orders keys; the master decides what may go. EvictUntil asks the
// policy for victims that `can_evict` accepts and calls `remove(key)`, which
// re-checks the object under its shard lock and returns the bytes it freed,
// or nullopt if the object became unevictable in between (a lease was just
// granted): such a key is admitted again, so the policy keeps tracking it.
//
// The policy may hold keys whose objects are gone (a remove raced a commit's
// Admit); `can_evict` says yes to those and `remove` frees nothing, so they
// drain away. Touch and Admit tolerate untracked and tracked keys alike,
// because policies assert on misuse (Touch of an untracked key, Admit of a
// tracked one) and the master's calls race with removals.
//
// Thread-safety: every method may run concurrently (one mutex). Lock order:
// the evictor's mutex is taken before shard mutexes (remove/can_evict lock a
// shard), never while holding one.
#ifndef MOONCAKE_STORE_MASTER_EVICTOR_H_
#define MOONCAKE_STORE_MASTER_EVICTOR_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "mooncake/index/eviction_policy.h"

namespace mooncake::master {

// The key hash the master's policies use.
struct ObjectKeyHash {
  size_t operator()(const std::string& key) const { return absl::Hash<std::string>()(key); }
};

template <typename P>
concept ObjectEvictionPolicy =
    index::EvictionPolicy<P> && std::same_as<typename P::key_type, std::string>;

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
    absl::MutexLock lock(&mu_);
    bool all = true;
    for (const std::string& k : keys) all = all && policy_.Contains(k);
    if (all) {
      policy_.Touch(keys);
      return;
    }
    for (size_t i = keys.size(); i-- > 0;) {
      if (policy_.Contains(keys[i])) policy_.Touch(keys.subspan(i, 1));
    }
  }

  // A commit of `key` holding `charge` bytes.
  void Admit(const std::string& key, uint64_t charge) {
    absl::MutexLock lock(&mu_);
    AdmitLocked(key, charge);
  }

  void Erase(const std::string& key) {
    absl::MutexLock lock(&mu_);
    policy_.Erase(key);
  }

  // Evicts until `target_bytes` are freed, at most `max_victims` objects, or
  // the policy offers nothing more.
  template <typename CanEvict, typename Remove>
  EvictionResult EvictUntil(uint64_t target_bytes, uint64_t max_victims, CanEvict&& can_evict,
                            Remove&& remove) {
    EvictionResult result;
    absl::MutexLock lock(&mu_);
    // Each failed re-check re-admits a key; bound those rounds too.
    for (uint64_t tries = 0; result.freed_bytes < target_bytes && result.victims < max_victims &&
                             tries < 2 * max_victims;
         ++tries) {
      std::optional<index::Eviction<std::string>> victim = policy_.Evict(can_evict);
      if (!victim.has_value()) break;
      std::optional<uint64_t> freed = remove(victim->key);
      if (!freed.has_value()) {
        AdmitLocked(victim->key, victim->charge);
        continue;
      }
      result.freed_bytes += *freed;
      if (*freed > 0) ++result.victims;
    }
    return result;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return policy_.size();
  }
  bool Contains(const std::string& key) const {
    absl::MutexLock lock(&mu_);
    return policy_.Contains(key);
  }

 private:
  void AdmitLocked(const std::string& key, uint64_t charge) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::span<const std::string> one(&key, 1);
    if (policy_.Contains(key)) {
      policy_.Touch(one);
    } else {
      policy_.Admit(one, 0, charge);
    }
  }

  mutable absl::Mutex mu_;
  P policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_EVICTOR_H_
