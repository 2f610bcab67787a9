#include "mooncake/tier/internal/ssd_lane.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/mutex.h"
#include "mooncake/tier/internal/ssd_file_set.h"

namespace mooncake::tier_internal {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/lane_" + name;
}

// Records what the reaper hands over; writes wait for a sync (kPowerLoss), or are marked
// dirty (kProcessCrash) when `background` is set.
class FakeTier : public SsdLaneClient {
 public:
  // Runs on the reaper, as do OnSynced calls: a sync completes after this returns.
  void OnIosDone(SsdOp* op) override {
    if (op->type == OpType::kWrite && background_) {
      lane_->MarkDirty(op->record->file);
    } else if (op->type == OpType::kWrite) {
      lane_->WaitForSync(op);
    }
    MutexLock lock(&mu_);
    done_.push_back(op);
    cv_.SignalAll();
  }
  void OnSynced(uint32_t, int res, const std::vector<SsdOp*>& batch) override {
    MutexLock lock(&mu_);
    ++syncs_done_;
    sync_ok_ = sync_ok_ && res == 0;
    synced_.insert(synced_.end(), batch.begin(), batch.end());
    cv_.SignalAll();
  }
  void OnSyncIssued() override { issued_.fetch_add(1); }

  // Waits (up to 10 s) until pred() holds under the lock.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, std::chrono::seconds(10), [&] {
      mu_.AssertHeld();
      return pred();
    });
  }

  SsdLane* lane_ = nullptr;
  bool background_ = false;
  std::atomic<int> issued_{0};
  Mutex mu_;
  CondVar cv_;
  std::vector<SsdOp*> done_ ABSL_GUARDED_BY(mu_);
  std::vector<SsdOp*> synced_ ABSL_GUARDED_BY(mu_);
  int syncs_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool sync_ok_ ABSL_GUARDED_BY(mu_) = true;
};

class SsdLaneTest : public ::testing::Test {
 protected:
  void Start(uint32_t background_sync_ms) {
    SsdFileSetOptions o{{TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name())},
                        false,
                        256 * kBlockBytes,
                        true};
    ::unlink(o.paths[0].c_str());
    ASSERT_TRUE(files_.Open(o).ok());
    lane_ = std::make_unique<SsdLane>(SsdLaneOptions{.index = 0,
                                                     .files = 1,
                                                     .ring_entries = 16,
                                                     .bounce_arena_bytes = 64 * kBlockBytes,
                                                     .background_sync_ms = background_sync_ms},
                                      codec_, ops_, nullptr, tier_);
    tier_.lane_ = lane_.get();
    ASSERT_TRUE(lane_->Init(files_.fds()).ok());
    ASSERT_TRUE(lane_->RegisterFiles().ok());
    lane_->Start();
  }
  void TearDown() override {
    if (lane_) {
      ops_.WaitIdle();
      lane_->Stop();
    }
  }
  // An op of `type` over one block at `offset` in the file, through the lane's arena.
  std::unique_ptr<SsdOp> MakeOp(OpType type, uint64_t offset, std::byte fill) {
    auto op = std::make_unique<SsdOp>();
    op->type = type;
    op->record = std::make_shared<SsdRecord>();
    op->record->header.codec = kCodecRaw;
    op->staging = lane_->arena().Acquire(kBlockBytes);
    std::memset(op->staging.data, static_cast<int>(fill), kBlockBytes);
    op->ios.push_back(SsdIo{.op = op.get(),
                            .data = op->staging.data,
                            .bytes = static_cast<uint32_t>(kBlockBytes),
                            .payload = static_cast<uint32_t>(kBlockBytes),
                            .offset = offset,
                            .fixed = op->staging.in_arena()});
    op->pending = 1;
    op->piece_done.assign(1, 0);
    return op;
  }

  SsdFileSet files_;
  RecordCodec codec_{RecordCodecOptions{}};
  OpTracker ops_;
  FakeTier tier_;
  std::unique_ptr<SsdLane> lane_;
};

TEST_F(SsdLaneTest, WriteCompletesThenItsSyncThenAReadHashesWhatItWrote) {
  Start(100);
  std::unique_ptr<SsdOp> w = MakeOp(OpType::kWrite, 8 * kBlockBytes, std::byte{0x77});
  lane_->Submit(/*is_write=*/true, w->ios.data(), 1);
  ASSERT_TRUE(tier_.WaitFor([&] {
    tier_.mu_.AssertHeld();
    return tier_.synced_.size() == 1;
  }));
  {
    MutexLock lock(&tier_.mu_);
    EXPECT_EQ(tier_.done_, std::vector<SsdOp*>({w.get()}));
    EXPECT_EQ(tier_.synced_, std::vector<SsdOp*>({w.get()}));
    EXPECT_TRUE(tier_.sync_ok_);
  }
  EXPECT_EQ(w->error, 0);
  EXPECT_EQ(tier_.issued_.load(), 1);

  std::unique_ptr<SsdOp> r = MakeOp(OpType::kRead, 8 * kBlockBytes, std::byte{0});
  lane_->Submit(/*is_write=*/false, r->ios.data(), 1);
  ASSERT_TRUE(tier_.WaitFor([&] {
    tier_.mu_.AssertHeld();
    return tier_.done_.size() == 2;
  }));
  EXPECT_EQ(r->error, 0);
  EXPECT_EQ(r->arrived, kBlockBytes);
  const std::vector<std::byte> expected(kBlockBytes, std::byte{0x77});
  EXPECT_EQ(r->hash.Digest(), FastStableHash64(expected.data(), expected.size()));
  EXPECT_EQ(r->staging.data[100], std::byte{0x77});
  lane_->arena().Release(w->staging);
  lane_->arena().Release(r->staging);
}

TEST_F(SsdLaneTest, DirtyFileIsSyncedInTheBackgroundAndHurryEndsTheWait) {
  Start(60000);  // a timer that would outlast the test
  std::unique_ptr<SsdOp> w = MakeOp(OpType::kWrite, 4 * kBlockBytes, std::byte{1});
  tier_.background_ = true;
  lane_->Submit(/*is_write=*/true, w->ios.data(), 1);
  ASSERT_TRUE(tier_.WaitFor([&] {
    tier_.mu_.AssertHeld();
    return tier_.done_.size() == 1;
  }));
  EXPECT_EQ(tier_.issued_.load(), 0);  // the timer is armed, no sync yet
  EXPECT_EQ(ops_.in_flight(), 1u);     // the timer counts
  lane_->Hurry();
  ASSERT_TRUE(tier_.WaitFor([&] {
    tier_.mu_.AssertHeld();
    return tier_.syncs_done_ == 1;
  }));
  EXPECT_EQ(tier_.issued_.load(), 1);
  ops_.WaitIdle();
  lane_->arena().Release(w->staging);
}

}  // namespace
}  // namespace mooncake::tier_internal
