// TieredStore: a fast tier (DRAM) over a slow tier (SSD).
//
// New objects go to the fast tier. When it passes its byte budget, the least
// recently used object (index::LruPolicy, charge = raw bytes) is demoted: the
// write-back policy (Options::write_back) decides whether it is written to the
// slow tier or dropped. A read that misses the fast tier and hits the slow one
// counts a hit on the object; at Options::promote_after_hits hits it is copied
// into the fast tier (promotion; the slow copy stays, so demoting it again
// costs no write). When the slow tier is full, its least recently used objects
// are removed to make room; if that does not help, the demoted object is
// dropped (counted in demote_failures).
//
// Correctness under races: objects are immutable, a demotion writes the slow
// copy before it removes the fast one, and a promotion never removes the slow
// copy, so at every instant a stored object is in at least one tier; Get tries
// fast, then slow, then fast again, so a read racing a demotion or promotion
// returns the object's bytes or (after Remove or a drop) NotFound, never wrong
// bytes. An object being written, demoted or promoted is `busy`: Remove waits
// for it, eviction skips it.
//
// The store knows which tier holds each object (Locate), which a master can
// publish per replica.
//
// Thread-safety: every call may run concurrently. Calls block on tier I/O.
// REQUIRES: not called from a completion callback of either tier; the tiers
// outlive the store and are used by no one else.
#ifndef MOONCAKE_TIER_TIERED_STORE_H_
#define MOONCAKE_TIER_TIERED_STORE_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/internal/string_map.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

// Decides, for an object leaving the fast tier, whether it is written back
// to the slow tier (true) or dropped (false).
using WriteBackPolicy = std::function<bool(const ObjectInfo&)>;

struct TieredStoreOptions {
  // Raw bytes the fast tier may hold (<= its capacity; fragmentation is
  // handled by evicting more).
  uint64_t fast_budget_bytes = 0;
  // Slow-tier hits (since the object last entered the slow tier) that
  // promote it to the fast tier; 0 never promotes.
  uint32_t promote_after_hits = 2;
  // Null: write back everything.
  WriteBackPolicy write_back;
  // Slow-tier LRU removals tried per demotion when the slow tier is full.
  uint32_t slow_evictions_max = 16;
};

struct TieredStoreStats {
  TierStats fast, slow;
  uint64_t fast_hits = 0, slow_hits = 0, misses = 0;
  uint64_t demotions = 0;        // written back to the slow tier (or already there)
  uint64_t demote_drops = 0;     // the policy said drop
  uint64_t demote_failures = 0;  // the slow tier could not take it: dropped
  uint64_t promotions = 0;
  uint64_t slow_evictions = 0;
};

enum class Location : uint8_t { kFast, kSlow, kBoth };

template <Tier Fast, Tier Slow>
class TieredStore {
 public:
  TieredStore(Fast& fast, Slow& slow, TieredStoreOptions options)
      : fast_(fast), slow_(slow), options_(std::move(options)) {
    MC_ASSERT(options_.fast_budget_bytes > 0, "TieredStore needs a fast-tier budget");
  }
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // Stores a new object in the fast tier (straight to the slow tier if it is
  // larger than the fast budget). AlreadyExists if the key is present.
  absl::Status Put(std::string_view key, std::span<const std::byte> bytes,
                   const ObjectMeta& meta = {}) {
    if (key.empty() || key.size() > kMaxKeyBytes || bytes.empty()) {
      return absl::InvalidArgumentError("TieredStore::Put needs a 1..1024-byte key and bytes");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto [it, fresh] = entries_.try_emplace(std::string(key));
      if (!fresh) {
        return absl::AlreadyExistsError(absl::StrCat("key '", AbslView(key), "' is present"));
      }
      it->second = Entry{.raw_bytes = bytes.size(), .meta = meta, .busy = true};
    }
    if (bytes.size() > options_.fast_budget_bytes) {
      absl::Status s = WriteSlow(key, bytes, meta);
      Settle(key, s.ok(), /*in_fast=*/false, s.ok());
      return s;
    }
    absl::Status s = WriteFast(key, bytes, meta);
    Settle(key, s.ok(), s.ok(), false);
    return s;
  }

  // Copies the object into `into`. NotFound if absent (a miss);
  // InvalidArgument if `into` is too small; DataLoss if the slow copy failed
  // its checksum (it is dropped).
  absl::StatusOr<ReadResult> Get(std::string_view key, std::span<std::byte> into) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = entries_.find(key);
        if (it == entries_.end() || it->second.removed) break;
      }
      absl::StatusOr<ReadResult> r = ReadBlocking(fast_, key, into);
      if (r.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        ++fast_hits_;
        TouchLocked(fast_lru_, key);
        return r;
      }
      if (!absl::IsNotFound(r.status())) return r;
      r = ReadBlocking(slow_, key, into);
      if (r.ok()) {
        OnSlowHit(key, into.first(r->raw_bytes), r->meta);
        return r;
      }
      if (absl::IsDataLoss(r.status())) {
        std::lock_guard<std::mutex> lock(mu_);
        ForgetSlowLocked(key);
        return r.status();
      }
      if (!absl::IsNotFound(r.status())) return r;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++misses_;
    return absl::NotFoundError(absl::StrCat("key '", AbslView(key), "' is in no tier"));
  }

  // Removes the object from both tiers (waits for a demotion or promotion of
  // it to finish). NotFound if absent.
  absl::Status Remove(std::string_view key) {
    Entry e;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = entries_.find(key);
      if (it == entries_.end() || it->second.removed) {
        return absl::NotFoundError(absl::StrCat("key '", AbslView(key), "' is in no tier"));
      }
      it->second.removed = true;  // reads now miss; Put of the key is AlreadyExists until done
      idle_cv_.wait(lock, [&] { return !entries_.find(key)->second.busy; });
      e = entries_.find(key)->second;
      fast_lru_.Erase(std::string(key));
      slow_lru_.Erase(std::string(key));
    }
    absl::Status status = absl::OkStatus();
    if (e.in_fast) status.Update(IgnoreNotFound(RemoveBlocking(fast_, key)));
    if (e.in_slow) status.Update(IgnoreNotFound(RemoveBlocking(slow_, key)));
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(entries_.find(key));
    return status;
  }

  std::optional<Location> Locate(std::string_view key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.removed) return std::nullopt;
    const Entry& e = it->second;
    if (e.in_fast && e.in_slow) return Location::kBoth;
    if (e.in_fast) return Location::kFast;
    if (e.in_slow) return Location::kSlow;
    return std::nullopt;
  }

  TieredStoreStats stats() const {
    TieredStoreStats s;
    s.fast = fast_.stats();
    s.slow = slow_.stats();
    std::lock_guard<std::mutex> lock(mu_);
    s.fast_hits = fast_hits_;
    s.slow_hits = slow_hits_;
    s.misses = misses_;
    s.demotions = demotions_;
    s.demote_drops = demote_drops_;
    s.demote_failures = demote_failures_;
    s.promotions = promotions_;
    s.slow_evictions = slow_evictions_;
    return s;
  }

  uint64_t fast_charged_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fast_lru_.charged();
  }

 private:
  using Lru = index::LruPolicy<std::string, tier_internal::StringKeyHash>;
  struct Entry {
    uint64_t raw_bytes = 0;
    ObjectMeta meta;
    uint32_t slow_hits = 0;
    bool in_fast = false;
    bool in_slow = false;
    bool busy = false;     // being written, demoted or promoted
    bool removed = false;  // a Remove is under way
  };

  static absl::Status IgnoreNotFound(absl::Status s) {
    return absl::IsNotFound(s) ? absl::OkStatus() : s;
  }

  static void TouchLocked(Lru& lru, std::string_view key) {
    const std::string k(key);
    if (lru.Contains(k)) lru.Touch(std::span<const std::string>(&k, 1));
  }
  static void AdmitLocked(Lru& lru, std::string_view key, uint64_t charge) {
    const std::string k(key);
    if (!lru.Contains(k)) lru.Admit(std::span<const std::string>(&k, 1), 0, charge);
  }

  // Ends the busy state of a Put; a failed Put leaves no entry.
  void Settle(std::string_view key, bool ok, bool in_fast, bool in_slow) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    MC_ASSERT(it != entries_.end() && it->second.busy, "Settle of an idle entry");
    if (!ok) {
      entries_.erase(it);
    } else {
      it->second.busy = false;
      it->second.in_fast = in_fast;
      it->second.in_slow = in_slow;
      if (in_fast) AdmitLocked(fast_lru_, key, it->second.raw_bytes);
      if (in_slow) AdmitLocked(slow_lru_, key, it->second.raw_bytes);
    }
    idle_cv_.notify_all();
  }

  // Makes room (demoting LRU objects), then writes to the fast tier.
  absl::Status WriteFast(std::string_view key, std::span<const std::byte> bytes,
                         const ObjectMeta& meta) {
    for (int attempt = 0;; ++attempt) {
      absl::Status room = MakeFastRoom(bytes.size());
      if (!room.ok()) return room;
      absl::Status s = WriteBlocking(fast_, key, bytes, meta);
      {
        std::lock_guard<std::mutex> lock(mu_);
        fast_reserved_ -= bytes.size();
      }
      // A fragmented arena: evict one more and retry, boundedly.
      if (!absl::IsResourceExhausted(s) || attempt == 8 || !DemoteOne()) return s;
    }
  }

  // Reserves `bytes` of the fast budget, demoting LRU objects as needed.
  absl::Status MakeFastRoom(uint64_t bytes) {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (fast_lru_.charged() + fast_reserved_ + bytes <= options_.fast_budget_bytes) {
          fast_reserved_ += bytes;
          return absl::OkStatus();
        }
      }
      if (!DemoteOne()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("fast tier: no room for ", bytes, " bytes and nothing to demote"));
      }
    }
  }

  // Demotes the fast tier's LRU object; false if there is none.
  bool DemoteOne() {
    std::string key;
    ObjectInfo info;
    bool write_back = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto victim = fast_lru_.Evict([&](const std::string& k) {
        const Entry& e = entries_.find(k)->second;
        return !e.busy && !e.removed;
      });
      if (!victim) return false;
      key = std::move(victim->key);
      Entry& e = entries_.find(key)->second;
      e.busy = true;
      info = ObjectInfo{.key = key, .raw_bytes = e.raw_bytes, .meta = e.meta};
      write_back = !e.in_slow && (!options_.write_back || options_.write_back(info));
      if (e.in_slow) ++demotions_;
      if (!e.in_slow && !write_back) ++demote_drops_;
    }
    bool in_slow_now = false;
    if (write_back) {
      std::vector<std::byte> buf(info.raw_bytes);
      absl::StatusOr<ReadResult> r = ReadBlocking(fast_, key, buf);
      MC_ASSERT(r.ok(), "a busy fast-tier object vanished");
      in_slow_now = WriteSlow(key, buf, info.meta).ok();
      std::lock_guard<std::mutex> lock(mu_);
      ++(in_slow_now ? demotions_ : demote_failures_);
    }
    // The slow copy (if any) is durable before the fast one goes.
    absl::Status removed = RemoveBlocking(fast_, key);
    MC_ASSERT(removed.ok(), "removing a busy fast-tier object failed");
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_.find(key)->second;
    e.in_fast = false;
    e.busy = false;
    if (in_slow_now) {
      e.in_slow = true;
      e.slow_hits = 0;
      AdmitLocked(slow_lru_, key, e.raw_bytes);
    }
    if (!e.in_slow && !e.removed) entries_.erase(entries_.find(key));
    idle_cv_.notify_all();
    return true;
  }

  // Writes to the slow tier, removing its LRU objects while it is full.
  absl::Status WriteSlow(std::string_view key, std::span<const std::byte> bytes,
                         const ObjectMeta& meta) {
    absl::Status s = WriteBlocking(slow_, key, bytes, meta);
    for (uint32_t i = 0; i < options_.slow_evictions_max && absl::IsResourceExhausted(s); ++i) {
      if (!EvictSlowOne()) break;
      s = WriteBlocking(slow_, key, bytes, meta);
    }
    return s;
  }

  bool EvictSlowOne() {
    std::string key;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto victim = slow_lru_.Evict([&](const std::string& k) {
        const Entry& e = entries_.find(k)->second;
        return !e.busy && !e.removed;
      });
      if (!victim) return false;
      key = std::move(victim->key);
      entries_.find(key)->second.busy = true;
      ++slow_evictions_;
    }
    const absl::Status s = RemoveBlocking(slow_, key);
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_.find(key)->second;
    e.busy = false;
    if (s.ok() || absl::IsNotFound(s)) e.in_slow = false;
    if (!e.in_fast && !e.in_slow && !e.removed) entries_.erase(entries_.find(key));
    idle_cv_.notify_all();
    return true;
  }

  void ForgetSlowLocked(std::string_view key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    slow_lru_.Erase(std::string(key));
    it->second.in_slow = false;
    if (!it->second.in_fast && !it->second.busy && !it->second.removed) entries_.erase(it);
  }

  void OnSlowHit(std::string_view key, std::span<const std::byte> bytes, const ObjectMeta& meta) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++slow_hits_;
      TouchLocked(slow_lru_, key);
      auto it = entries_.find(key);
      if (it == entries_.end()) return;
      Entry& e = it->second;
      ++e.slow_hits;
      if (options_.promote_after_hits == 0 || e.slow_hits < options_.promote_after_hits ||
          e.in_fast || e.busy || e.removed || bytes.size() > options_.fast_budget_bytes) {
        return;
      }
      e.busy = true;
    }
    const bool ok = WriteFast(key, bytes, meta).ok();
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_.find(key)->second;
    e.busy = false;
    if (ok) {
      e.in_fast = true;
      ++promotions_;
      AdmitLocked(fast_lru_, key, e.raw_bytes);
    }
    idle_cv_.notify_all();
  }

  Fast& fast_;
  Slow& slow_;
  const TieredStoreOptions options_;

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;          // an entry stopped being busy
  tier_internal::StringMap<Entry> entries_;  // guarded by mu_
  Lru fast_lru_;                             // guarded by mu_, charge = raw bytes
  Lru slow_lru_;                             // guarded by mu_
  uint64_t fast_reserved_ = 0;               // guarded by mu_: writes in flight
  uint64_t fast_hits_ = 0, slow_hits_ = 0, misses_ = 0, demotions_ = 0, demote_drops_ = 0,
           demote_failures_ = 0, promotions_ = 0, slow_evictions_ = 0;  // guarded by mu_
};

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_TIERED_STORE_H_
