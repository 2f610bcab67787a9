// Object groups: objects of one tenant that become visible together, and
// leave together (docs/agents.md).
//
//   kOpen    members are being put; none is visible; not evictable
//   kVisible CommitGroup made every member visible at once
//   kGone    a member left (remove, eviction, TTL, a lost worker, the open
//            group's deadline): every member is invisible at once, and the
//            master retires the rest (MasterState::ReapDeadGroups)
//
// A group goes kOpen -> kVisible -> kGone or kOpen -> kGone, never back.
// `gen` counts those changes (GroupObservations uses it to answer a batch
// read with each group whole or not at all).
//
// Thread-safety: `phase` and `gen` are atomics; members and counts are under
// `mu`, taken under a shard lock (lock order: shard -> group) or alone.
// GroupTable's mutex is a leaf (taken after a group's, never before).
#ifndef MOONCAKE_STORE_MASTER_OBJECT_GROUP_H_
#define MOONCAKE_STORE_MASTER_OBJECT_GROUP_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/mutex.h"

namespace mooncake::master {

enum class GroupPhase : uint8_t { kOpen, kVisible, kGone };

struct ObjectGroup {
  ObjectGroup(std::string i, std::string t, uint8_t p)
      : id(std::move(i)), tenant(std::move(t)), pin(p) {}

  const std::string id;
  const std::string tenant;
  const uint8_t pin;  // every member's PinLevel (the first member's)
  std::atomic<GroupPhase> phase{GroupPhase::kOpen};
  std::atomic<uint64_t> gen{0};

  GroupPhase Phase() const { return phase.load(std::memory_order_acquire); }
  uint64_t Gen() const { return gen.load(std::memory_order_acquire); }

  mutable Mutex mu;
  absl::flat_hash_set<std::string> members ABSL_GUARDED_BY(mu);  // table keys
  uint32_t pending ABSL_GUARDED_BY(mu) = 0;                      // members not committed yet
  int64_t deadline_ns ABSL_GUARDED_BY(mu) = 0;  // kOpen: gone if not committed by then
};

// The groups of every tenant by (tenant, id), and the ones that died and
// still have members to retire.
class GroupTable {
 public:
  static std::string Name(std::string_view tenant, std::string_view id) {
    std::string out = absl::StrCat(tenant.size(), ":");
    out.append(tenant);
    out.append(id);
    return out;
  }

  // The open group (created when absent). nullptr when the group exists and
  // is no longer open (committed, or dying).
  std::shared_ptr<ObjectGroup> OpenOrCreate(std::string_view tenant, std::string_view id,
                                            uint8_t pin, bool* created) {
    MutexLock lock(&mu_);
    auto [it, fresh] = groups_.try_emplace(Name(tenant, id));
    *created = fresh;
    if (fresh) {
      it->second = std::make_shared<ObjectGroup>(std::string(id), std::string(tenant), pin);
    }
    return it->second;
  }

  std::shared_ptr<ObjectGroup> Find(std::string_view tenant, std::string_view id) const {
    MutexLock lock(&mu_);
    auto it = groups_.find(Name(tenant, id));
    return it == groups_.end() ? nullptr : it->second;
  }

  // Moves `g` forward to `to`; false if it is there or past it already.
  // `g->gen` is odd while the phase changes (a seqlock: see
  // GroupObservations).
  bool AdvanceLocked(ObjectGroup& g, GroupPhase to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g.mu) {
    if (static_cast<uint8_t>(g.phase.load(std::memory_order_relaxed)) >= static_cast<uint8_t>(to)) {
      return false;
    }
    g.gen.fetch_add(1, std::memory_order_acq_rel);
    g.phase.store(to, std::memory_order_release);
    g.gen.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }

  // Marks `g` gone and queues it for ReapDeadGroups; false if it was already.
  // Takes g->mu (lock order: shard -> group -> table).
  bool Kill(const std::shared_ptr<ObjectGroup>& g) {
    {
      MutexLock glock(&g->mu);
      if (!AdvanceLocked(*g, GroupPhase::kGone)) return false;
    }
    MutexLock lock(&mu_);
    dead_.push_back(g);
    dead_count_.store(dead_.size(), std::memory_order_release);
    return true;
  }

  std::vector<std::shared_ptr<ObjectGroup>> TakeDead() {
    if (dead_count_.load(std::memory_order_acquire) == 0) return {};
    MutexLock lock(&mu_);
    std::vector<std::shared_ptr<ObjectGroup>> out = std::move(dead_);
    dead_.clear();
    dead_count_.store(0, std::memory_order_release);
    for (const auto& g : out) {
      auto it = groups_.find(Name(g->tenant, g->id));
      if (it != groups_.end() && it->second == g) groups_.erase(it);
    }
    return out;
  }

  // Open groups past their deadline (Tick kills them).
  std::vector<std::shared_ptr<ObjectGroup>> OpenPast(int64_t now_ns) const {
    std::vector<std::shared_ptr<ObjectGroup>> open, out;
    {
      MutexLock lock(&mu_);
      for (const auto& [name, g] : groups_) {
        if (g->Phase() == GroupPhase::kOpen) open.push_back(g);
      }
    }
    for (std::shared_ptr<ObjectGroup>& g : open) {
      MutexLock glock(&g->mu);
      if (g->deadline_ns != 0 && now_ns > g->deadline_ns) out.push_back(std::move(g));
    }
    return out;
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return groups_.size();
  }

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ObjectGroup>> groups_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ObjectGroup>> dead_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> dead_count_{0};
};

// What a batch read saw of the groups it met, to answer each group whole or
// not at all. A group is unsettled for the batch when it changed phase while
// the batch read it (a gen that was odd or moved), or when a key the batch
// found absent is one of its members (read before the member was put, while
// the group was not visible yet).
class GroupObservations {
 public:
  // Key `index` of the batch was found in group `g` (gen read before phase).
  void Saw(size_t index, const std::shared_ptr<ObjectGroup>& g, uint64_t gen) {
    if (g != nullptr) seen_.push_back({index, g, gen});
  }
  // The batch indexes of found keys whose group is unsettled (empty: every
  // group met is whole in the answer). `absent`: the keys not found.
  std::vector<size_t> Unsettled(const std::vector<const std::string*>& absent) const {
    std::vector<size_t> out;
    if (seen_.empty()) return out;
    std::vector<const ObjectGroup*> bad;
    for (const Seen& a : seen_) {
      if ((a.gen & 1) != 0 || a.group->Gen() != a.gen) bad.push_back(a.group.get());
    }
    for (const Seen& a : seen_) {
      if (std::find(bad.begin(), bad.end(), a.group.get()) != bad.end()) continue;
      MutexLock lock(&a.group->mu);
      for (const std::string* key : absent) {
        if (a.group->members.contains(*key)) {
          bad.push_back(a.group.get());
          break;
        }
      }
    }
    for (const Seen& a : seen_) {
      if (std::find(bad.begin(), bad.end(), a.group.get()) != bad.end()) out.push_back(a.index);
    }
    return out;
  }

 private:
  struct Seen {
    size_t index;
    std::shared_ptr<ObjectGroup> group;
    uint64_t gen;
  };
  std::vector<Seen> seen_;
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_OBJECT_GROUP_H_
