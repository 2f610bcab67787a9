// S3FifoPolicy: S3-FIFO (Yang et al., SOSP '23). New entries enter a small
// FIFO; an entry read again while there moves to the main FIFO on its way out,
// otherwise it leaves and its key goes to a ghost FIFO. A key admitted while
// in the ghost goes straight to main. Main is a FIFO with up to 3 second
// chances (a 2-bit frequency).
//
// The small queue's target is small_ratio of the tracked charge (at steady
// state the cache capacity). An entry can_evict rejects is the prefix of a
// cached block, so it is treated as read: promoted from small, re-queued in
// main.
//
// Thread-safety: none; see eviction_policy.h.
// Invariants: every tracked key is in exactly one of small_/main_ (per its
// Entry::in_main); small_charge_ + main_charge_ == charged(); the ghost holds
// at most as many keys as main.
#ifndef MOONCAKE_INDEX_S3FIFO_POLICY_H_
#define MOONCAKE_INDEX_S3FIFO_POLICY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/block_key.h"
#include "mooncake/index/eviction_policy.h"
#include "mooncake/index/internal/key_hash.h"

namespace mooncake::index {

template <typename K = BlockKey, typename Hash = index_internal::BlockKeyHash>
class S3FifoPolicy {
 public:
  using key_type = K;

  explicit S3FifoPolicy(double small_ratio = 0.1) : small_ratio_(small_ratio) {
    MC_ASSERT(small_ratio > 0.0 && small_ratio < 1.0, "small_ratio must be in (0, 1)");
  }
  // Move-only: map_ holds iterators into the queues, which a copy would
  // share with the original (a move keeps them valid).
  S3FifoPolicy(const S3FifoPolicy&) = delete;
  S3FifoPolicy& operator=(const S3FifoPolicy&) = delete;
  S3FifoPolicy(S3FifoPolicy&&) = default;
  S3FifoPolicy& operator=(S3FifoPolicy&&) = default;

  void Touch(std::span<const K> chain) {
    for (const K& key : chain) {
      auto it = map_.find(key);
      MC_ASSERT(it != map_.end(), "Touch of an untracked key");
      Entry& e = *it->second;
      if (e.freq < kMaxFreq) ++e.freq;
    }
  }

  void Admit(std::span<const K> chain, size_t first_new, uint64_t charge) {
    MC_ASSERT(first_new <= chain.size(), "first_new past the chain");
    // Deepest first, so a FIFO meets a chain's tail before its prefix.
    for (size_t i = chain.size(); i-- > first_new;) {
      const bool was_ghost = ghost_.erase(chain[i]) > 0;
      std::list<Entry>& queue = was_ghost ? main_ : small_;
      queue.push_front(Entry{chain[i], charge, 0, was_ghost});
      const bool fresh = map_.try_emplace(chain[i], queue.begin()).second;
      MC_ASSERT(fresh, "Admit of a key that is already tracked");
      (was_ghost ? main_charge_ : small_charge_) += charge;
    }
  }

  bool Erase(const K& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    Entry& e = *it->second;
    (e.in_main ? main_charge_ : small_charge_) -= e.charge;
    (e.in_main ? main_ : small_).erase(it->second);
    map_.erase(it);
    return true;
  }

  template <typename CanEvict>
  std::optional<Eviction<K>> Evict(CanEvict&& can_evict) {
    // Each step either evicts or spends a frequency unit / promotes once.
    // Main can hold only prefixes whose leaves sit in small (a chain's tail
    // admitted after its prefix was promoted): once main has spent every
    // frequency unit and rejected each entry once, it is stalled and small
    // goes next until it evicts or empties. So main's passes before and after
    // small drains, plus small's entries, bound the scan.
    const size_t budget = (2 * kMaxFreq + 4) * (map_.size() + 1);
    const size_t stall_steps = (kMaxFreq + 1) * (main_.size() + 1);
    size_t main_steps = 0;
    for (size_t step = 0; step < budget && !map_.empty(); ++step) {
      const bool from_small =
          !small_.empty() &&
          (main_.empty() || small_charge_ > small_ratio_ * charged() || main_steps > stall_steps);
      if (!from_small) ++main_steps;
      std::optional<Eviction<K>> victim = from_small ? StepSmall(can_evict) : StepMain(can_evict);
      if (victim) return victim;
    }
    return std::nullopt;
  }

  bool Contains(const K& key) const { return map_.contains(key); }
  size_t size() const { return map_.size(); }
  uint64_t charged() const { return small_charge_ + main_charge_; }
  size_t ghost_size() const { return ghost_.size(); }

 private:
  static constexpr uint8_t kMaxFreq = 3;

  struct Entry {
    K key;
    uint64_t charge;
    uint8_t freq;
    bool in_main;
  };

  template <typename CanEvict>
  std::optional<Eviction<K>> StepSmall(CanEvict& can_evict) {
    auto last = std::prev(small_.end());
    if (last->freq > 0 || !can_evict(last->key)) {
      last->in_main = true;
      small_charge_ -= last->charge;
      main_charge_ += last->charge;
      main_.splice(main_.begin(), small_, last);
      return std::nullopt;
    }
    Remember(last->key);
    return Remove(small_, small_charge_, last);
  }

  template <typename CanEvict>
  std::optional<Eviction<K>> StepMain(CanEvict& can_evict) {
    auto last = std::prev(main_.end());
    if (last->freq > 0 || !can_evict(last->key)) {
      if (last->freq > 0) --last->freq;
      main_.splice(main_.begin(), main_, last);
      return std::nullopt;
    }
    return Remove(main_, main_charge_, last);
  }

  Eviction<K> Remove(std::list<Entry>& queue, uint64_t& queue_charge,
                     typename std::list<Entry>::iterator it) {
    Eviction<K> victim{it->key, it->charge};
    queue_charge -= it->charge;
    map_.erase(it->key);
    queue.erase(it);
    return victim;
  }

  // The ghost is a FIFO of keys bounded by main's entry count; stale deque
  // slots (keys re-admitted since) are skipped by sequence number.
  void Remember(const K& key) {
    const uint64_t seq = ++ghost_seq_;
    ghost_[key] = seq;
    ghost_fifo_.push_back({key, seq});
    const size_t limit = std::max<size_t>(main_.size(), 1);
    while (ghost_.size() > limit || ghost_fifo_.size() > 2 * limit + 16) {
      auto [old, old_seq] = ghost_fifo_.front();
      ghost_fifo_.pop_front();
      auto it = ghost_.find(old);
      if (it != ghost_.end() && it->second == old_seq) ghost_.erase(it);
    }
  }

  double small_ratio_;
  std::list<Entry> small_;
  std::list<Entry> main_;
  uint64_t small_charge_ = 0;
  uint64_t main_charge_ = 0;
  absl::flat_hash_map<K, typename std::list<Entry>::iterator, Hash> map_;
  absl::flat_hash_map<K, uint64_t, Hash> ghost_;
  std::deque<std::pair<K, uint64_t>> ghost_fifo_;
  uint64_t ghost_seq_ = 0;
};

static_assert(EvictionPolicy<S3FifoPolicy<>>);

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_S3FIFO_POLICY_H_
