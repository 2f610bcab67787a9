// GroupCommit: when one I/O lane issues an fdatasync of each file, and which
// writes and removes each one covers. It decides; the caller does the I/O
// (IoLane) and reports back, so the rules are testable without a device.
//
// Per file: at most one fdatasync in flight; a waiter (a write or remove that
// is acknowledged only once a sync issued after it landed has completed) that
// arrives meanwhile joins the next one, which is issued as soon as the one in
// flight completes. So a waiter is covered at most two sync durations after
// it lands, and there are at most as many syncs as waiters.
// Background syncs (Durability::kProcessCrash): a write acknowledged without
// a sync marks its file dirty; a dirty file gets a sync background_sync_ms
// after that (a timer, which the caller arms), or once the sync in flight
// completes, or at once when background_sync_ms is 0 or after Hurry(). A sync
// covers everything acknowledged before it was issued, so it cleans the file.
//
// Every call returns the next step, which the caller must take exactly once:
//   kSync      issue an fdatasync of the file now, then call OnSync when it completes;
//   kArmTimer  arm a background_sync_ms timer, then call OnTimer when it fires (or is
//              cancelled);
//   kNone      nothing.
//
// Thread-safety: every call may run concurrently (the tier calls it from its
// lane's reaper only); one lock (mu_). It calls nothing while holding it, so
// the caller takes its steps outside it: a leaf in SsdTier's lock order
// (ssd_tier.h).
//
// Complexity: O(1) amortized per call; OnSync O(waiters it returns), Hurry O(files).
#ifndef MOONCAKE_TIER_INTERNAL_GROUP_COMMIT_H_
#define MOONCAKE_TIER_INTERNAL_GROUP_COMMIT_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::tier_internal {

enum class SyncStep : uint8_t { kNone, kSync, kArmTimer };

template <typename Waiter>
class GroupCommit {
 public:
  GroupCommit(uint32_t files, uint32_t background_sync_ms)
      : background_sync_ms_(background_sync_ms), files_(files) {}
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  uint32_t background_sync_ms() const { return background_sync_ms_; }

  // `w` landed in `file` and waits for a sync issued after now. kSync or kNone.
  SyncStep Wait(uint32_t file, Waiter w) {
    MutexLock lock(&mu_);
    File& f = At(file);
    f.waiting.push_back(w);
    return f.in_flight ? SyncStep::kNone : StartSync(f);
  }
  // A write to `file` was acknowledged before any sync covers it.
  SyncStep MarkDirty(uint32_t file) {
    MutexLock lock(&mu_);
    File& f = At(file);
    f.dirty = true;
    return Schedule(f);
  }
  // The timer a kArmTimer asked for fired (or was cancelled). kSync or kNone.
  SyncStep OnTimer(uint32_t file) {
    MutexLock lock(&mu_);
    File& f = At(file);
    MC_ASSERT(f.timer_armed, "OnTimer without a timer");
    f.timer_armed = false;
    return !f.in_flight && f.dirty ? StartSync(f) : SyncStep::kNone;
  }
  // The sync a kSync asked for completed: returns the waiters it covers (in arrival
  // order), and in `next` the step to take now.
  std::vector<Waiter> OnSync(uint32_t file, SyncStep& next) {
    MutexLock lock(&mu_);
    File& f = At(file);
    MC_ASSERT(f.in_flight, "OnSync without a sync in flight");
    std::vector<Waiter> batch;
    batch.swap(f.batch);
    f.in_flight = false;
    next = f.waiting.empty() ? Schedule(f) : StartSync(f);
    return batch;
  }
  // From now on no timer is armed (background syncs are issued at once); returns the
  // files whose timer is armed now, which the caller cancels to hurry them.
  std::vector<uint32_t> Hurry() {
    MutexLock lock(&mu_);
    hurry_ = true;
    std::vector<uint32_t> armed;
    for (uint32_t i = 0; i < files_.size(); ++i) {
      if (files_[i].timer_armed) armed.push_back(i);
    }
    return armed;
  }
  // Waiters not yet covered by a completed sync, of every file (tests, diagnostics).
  size_t pending() const {
    MutexLock lock(&mu_);
    size_t n = 0;
    for (const File& f : files_) n += f.waiting.size() + f.batch.size();
    return n;
  }

 private:
  struct File {
    bool in_flight = false;
    bool dirty = false;           // acknowledged writes not covered by a sync issued since
    bool timer_armed = false;     // a background_sync_ms timer is pending
    std::vector<Waiter> waiting;  // landed, waiting for the next sync
    std::vector<Waiter> batch;    // covered by the sync in flight
  };

  File& At(uint32_t file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    MC_ASSERT(file < files_.size(), "file index");
    return files_[file];
  }
  SyncStep StartSync(File& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    MC_DASSERT(!f.in_flight && f.batch.empty(), "one fdatasync in flight per file");
    f.batch.swap(f.waiting);
    f.in_flight = true;
    f.dirty = false;  // what was acknowledged so far landed before this sync is issued
    return SyncStep::kSync;
  }
  // A sync in flight covers nothing acknowledged after it began, so a dirty file gets its
  // next sync background_sync_ms after the first write it has to cover was acknowledged,
  // or after the sync in flight then completed.
  SyncStep Schedule(File& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (f.in_flight || f.timer_armed || !f.dirty) return SyncStep::kNone;
    if (background_sync_ms_ == 0 || hurry_) return StartSync(f);
    f.timer_armed = true;
    return SyncStep::kArmTimer;
  }

  const uint32_t background_sync_ms_;
  mutable Mutex mu_;
  std::vector<File> files_ ABSL_GUARDED_BY(mu_);
  bool hurry_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_GROUP_COMMIT_H_
