// The master's compaction of fragmented segments (internal/relocation_path.h):
// a scripted worker answers CopySync by moving bytes within a byte buffer
// that stands for its segment, so every test checks the bytes each object
// reads back; time is a FakeClock.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/master/internal/relocation_path.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {
namespace {

namespace proto = ::mooncake::store::proto;
using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::MountReq;
using testing_internal::PutReq;

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

constexpr uint64_t kObject = 4096;
constexpr uint64_t kSlots = 16;
constexpr uint64_t kSegment = kSlots * kObject;

uint8_t Pattern(const std::string& key, uint64_t i) {
  return static_cast<uint8_t>(std::hash<std::string>{}(key)*131 + i * 7);
}

class MasterRelocationTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(true); }

  void Make(bool relocation) {
    MasterOptions o;
    o.shard_count = 4;
    o.relocation.enabled = relocation;
    o.relocation.min_interval_ms = 1'000;
    o.membership.heartbeat_timeout_ms = 3'600'000;  // the scripted worker never beats
    master_.reset();                                // before the registry it reports to
    metrics_ = std::make_unique<MetricsRegistry>();
    auto m = Master<>::Create(o, &clock_, metrics_.get());
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    proto::MountSegmentRequest req = MountReq("w0", "seg0", kSegment);
    req.mutable_segment()->mutable_endpoint()->set_router_endpoint("router://w0");
    req.mutable_segment()->mutable_endpoint()->set_router_segment_id(7);
    auto r = master_->MountSegment(req);
    ASSERT_TRUE(r.ok()) << r.status();
    segment_ = r->segment_id();
    bytes_.assign(kSegment, 0);
  }

  // PutStart; on success writes the key's pattern where the replica is and
  // commits. Returns the response (retry or error as the master said).
  absl::StatusOr<proto::PutStartResponse> PutBytes(const std::string& key, uint64_t size) {
    auto start = master_->PutStart(PutReq(key, size));
    if (!start.ok() || start->retry()) return start;
    EXPECT_EQ(start->replicas_size(), 1);
    const uint64_t off = start->replicas(0).offset();
    for (uint64_t i = 0; i < size; ++i) bytes_[off + i] = Pattern(key, i);
    auto end = master_->PutEnd(EndReq(key, start->put_id()));
    EXPECT_TRUE(end.ok()) << end.status();
    return start;
  }

  // Where `key` reads now, checking every byte; UINT64_MAX if it is gone.
  // `keep_lease`: the read's lease is not released.
  uint64_t ReadBack(const std::string& key, bool keep_lease = false) {
    auto r = master_->GetReplicas(GetReq(key));
    if (!r.ok()) return UINT64_MAX;
    EXPECT_EQ(r->replicas_size(), 1);
    const uint64_t off = r->replicas(0).offset();
    const uint64_t len = r->replicas(0).length();
    for (uint64_t i = 0; i < len; ++i) {
      if (bytes_[off + i] != Pattern(key, i)) {
        ADD_FAILURE() << key << " byte " << i << " at offset " << off << " is wrong";
        break;
      }
    }
    if (!keep_lease) Release(r->lease().lease_id());
    return off;
  }

  void Release(uint64_t lease) {
    proto::ReleaseLeasesRequest rel;
    rel.add_lease_ids(lease);
    ASSERT_TRUE(master_->ReleaseLeases(rel).ok());
  }

  std::vector<proto::CopyTask> Sync(const std::vector<std::pair<uint64_t, absl::Status>>& done) {
    proto::CopySyncRequest req;
    req.set_worker_id("w0");
    req.set_max_tasks(64);
    for (const auto& [id, st] : done) {
      proto::CopyTaskResult* r = req.add_results();
      r->set_task_id(id);
      r->set_code(static_cast<uint32_t>(st.code()));
      r->set_message(std::string(st.message()));
    }
    auto resp = master_->CopySync(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? std::vector<proto::CopyTask>(resp->tasks().begin(), resp->tasks().end())
                     : std::vector<proto::CopyTask>{};
  }

  // The worker: runs `tasks` (copying within its segment when `st` is OK)
  // and reports `st` for each.
  void Run(const std::vector<proto::CopyTask>& tasks, absl::Status st = absl::OkStatus()) {
    std::vector<std::pair<uint64_t, absl::Status>> done;
    for (const proto::CopyTask& t : tasks) {
      EXPECT_EQ(t.src_segment_id(), segment_);
      EXPECT_EQ(t.dst_segment_id(), segment_);
      EXPECT_EQ(t.dst_router_endpoint(), "router://w0");
      const bool overlap = t.src_offset() < t.dst_offset() + t.length() &&
                           t.dst_offset() < t.src_offset() + t.length();
      EXPECT_FALSE(overlap) << "a move's ranges overlap";
      if (st.ok()) std::memcpy(&bytes_[t.dst_offset()], &bytes_[t.src_offset()], t.length());
      done.emplace_back(t.task_id(), st);
    }
    EXPECT_TRUE(Sync(done).empty());
  }

  uint64_t Counter(const std::string& name, const MetricLabels& labels = {}) {
    auto c = metrics_->GetCounter("mooncake_master_" + name, "", labels);
    return c.ok() ? (*c)->Value() : 0;
  }
  uint64_t Compactions(const std::string& outcome) {
    return Counter("compactions_total", {{"outcome", outcome}});
  }

  // Fills the segment with kSlots objects and removes every other one: half
  // the bytes free, no two free slots adjacent. Returns the kept keys.
  std::vector<std::string> Fragment() {
    std::vector<std::string> kept;
    for (uint64_t i = 0; i < kSlots; ++i) {
      const std::string key = absl::StrCat("k", i);
      auto p = PutBytes(key, kObject);
      EXPECT_TRUE(p.ok() && !p->retry()) << key;
    }
    for (uint64_t i = 0; i < kSlots; ++i) {
      const std::string key = absl::StrCat("k", i);
      if (i % 2 == 1) {
        proto::RemoveRequest r;
        r.set_key(key);
        EXPECT_TRUE(master_->Remove(r).ok());
      } else {
        kept.push_back(key);
      }
    }
    auto st = master_->SegmentAllocatorStats(segment_);
    EXPECT_EQ(st->free_bytes, kSegment / 2);
    EXPECT_LT(st->largest_free_bytes, 2 * kObject) << "the walk did not fragment the segment";
    return kept;
  }

  void RemoveAll(const std::vector<std::string>& keys) {
    for (const std::string& k : keys) {
      proto::RemoveRequest r;
      r.set_key(k);
      r.set_force(true);
      static_cast<void>(master_->Remove(r));
    }
    master_->Tick();
  }

  FakeClock clock_{1'000'000'000};
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<Master<>> master_;
  uint64_t segment_ = 0;
  std::vector<uint8_t> bytes_;  // the worker's segment
};

TEST_F(MasterRelocationTest, AFragmentedPutIsServedAfterCompactionWithoutEvicting) {
  const std::vector<std::string> kept = Fragment();
  std::map<std::string, uint64_t> before;
  for (const std::string& k : kept) before[k] = ReadBack(k);

  auto first = PutBytes("big", 2 * kObject);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->retry()) << "a fragmented put comes back while the segment is compacted";
  master_->Tick();
  EXPECT_EQ(Compactions("started"), 1u);
  std::vector<proto::CopyTask> tasks = Sync({});
  ASSERT_FALSE(tasks.empty());
  EXPECT_LE(tasks.size(), 2u) << "moves at most max_moved_factor x the request";
  // Until the copies are done, moved objects still read their old offsets.
  for (const std::string& k : kept) EXPECT_EQ(ReadBack(k), before[k]);
  auto early = PutBytes("big", 2 * kObject);
  ASSERT_TRUE(early.ok());
  EXPECT_TRUE(early->retry()) << "the old extents are held while the copies run";

  Run(tasks);
  EXPECT_EQ(Compactions("done"), 1u);
  EXPECT_EQ(Counter("relocations_total"), tasks.size());
  size_t moved = 0;
  for (const std::string& k : kept) moved += ReadBack(k) != before[k];
  EXPECT_EQ(moved, tasks.size()) << "each moved object reads its new offset, with its bytes";

  auto big = PutBytes("big", 2 * kObject);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_FALSE(big->retry());
  EXPECT_NE(ReadBack("big"), UINT64_MAX);
  EXPECT_EQ(Counter("evictions_total"), 0u);
  for (const std::string& k : kept) EXPECT_NE(ReadBack(k), UINT64_MAX) << k;

  std::vector<std::string> all = kept;
  all.push_back("big");
  RemoveAll(all);
  auto st = master_->SegmentAllocatorStats(segment_);
  EXPECT_EQ(st->used_bytes, 0u);
  EXPECT_EQ(st->live_allocations, 0u);
}

TEST_F(MasterRelocationTest, LeasedObjectsAreNotMoved) {
  const std::vector<std::string> kept = Fragment();
  std::map<std::string, uint64_t> before;
  // Every object but k2 is read and keeps its lease.
  for (const std::string& k : kept) before[k] = ReadBack(k, /*keep_lease=*/k != "k2");
  ASSERT_TRUE(PutBytes("big", 2 * kObject)->retry());
  master_->Tick();
  std::vector<proto::CopyTask> tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u) << "only k2 may move";
  EXPECT_EQ(tasks[0].key(), "k2");
  EXPECT_EQ(tasks[0].src_offset(), before["k2"]);
  Run(tasks);
  EXPECT_NE(ReadBack("k2"), before["k2"]);
  for (const std::string& k : kept) {
    if (k != "k2") {
      EXPECT_EQ(ReadBack(k), before[k]) << k;
    }
  }
  ASSERT_FALSE(PutBytes("big", 2 * kObject)->retry());
}

TEST_F(MasterRelocationTest, NothingMovesWhenEveryObjectIsLeased) {
  const std::vector<std::string> kept = Fragment();
  for (const std::string& k : kept) ReadBack(k, /*keep_lease=*/true);
  ASSERT_TRUE(PutBytes("big", 2 * kObject)->retry());
  master_->Tick();
  EXPECT_TRUE(Sync({}).empty());
  EXPECT_EQ(Compactions("no_window"), 1u);
  // Within min_interval_ms the put is not sent back again: it fails (all leased).
  auto again = PutBytes("big", 2 * kObject);
  EXPECT_TRUE(absl::IsResourceExhausted(again.status())) << again.status();
}

TEST_F(MasterRelocationTest, ARemovalDuringCompactionFreesTheRightRange) {
  const std::vector<std::string> kept = Fragment();
  ASSERT_TRUE(PutBytes("big", 2 * kObject)->retry());
  master_->Tick();
  std::vector<proto::CopyTask> tasks = Sync({});
  ASSERT_FALSE(tasks.empty());
  const std::string gone = tasks[0].key();
  proto::RemoveRequest r;
  r.set_key(gone);
  ASSERT_TRUE(master_->Remove(r).ok());
  Run(tasks);  // the removed object's copy still lands (in a range freed now)
  EXPECT_EQ(ReadBack(gone), UINT64_MAX);
  for (const std::string& k : kept) {
    if (k != gone) {
      EXPECT_NE(ReadBack(k), UINT64_MAX) << k;
    }
  }
  ASSERT_FALSE(PutBytes("big", 2 * kObject)->retry());
  std::vector<std::string> all = kept;
  all.push_back("big");
  RemoveAll(all);
  auto st = master_->SegmentAllocatorStats(segment_);
  EXPECT_EQ(st->used_bytes, 0u);
  EXPECT_EQ(st->live_allocations, 0u);
}

TEST_F(MasterRelocationTest, ALeasedObjectRemovedDuringCompactionHoldsTheOldExtent) {
  const std::vector<std::string> kept = Fragment();
  ASSERT_TRUE(PutBytes("big", 2 * kObject)->retry());
  master_->Tick();
  std::vector<proto::CopyTask> tasks = Sync({});
  ASSERT_FALSE(tasks.empty());
  const std::string gone = tasks[0].key();
  auto lease = master_->GetReplicas(GetReq(gone));  // a reader of the old offset
  ASSERT_TRUE(lease.ok());
  proto::RemoveRequest r;
  r.set_key(gone);
  r.set_force(true);
  ASSERT_TRUE(master_->Remove(r).ok());
  Run(tasks);
  EXPECT_EQ(Compactions("done"), 0u) << "the placeholder waits for the reader";
  EXPECT_TRUE(PutBytes("big", 2 * kObject)->retry() || !PutBytes("big", 2 * kObject).ok());
  Release(lease->lease().lease_id());
  clock_.AdvanceNs((MasterOptions{}.default_lease_ms + 1) * 1'000'000);
  master_->Tick();
  EXPECT_EQ(Compactions("done"), 1u);
  ASSERT_FALSE(PutBytes("big", 2 * kObject)->retry());
  std::vector<std::string> all = kept;
  all.push_back("big");
  RemoveAll(all);
  EXPECT_EQ(master_->SegmentAllocatorStats(segment_)->used_bytes, 0u);
}

TEST_F(MasterRelocationTest, AFailedMoveDropsItsObjectAsIfEvicted) {
  const std::vector<std::string> kept = Fragment();
  ASSERT_TRUE(PutBytes("big", 2 * kObject)->retry());
  master_->Tick();
  std::vector<proto::CopyTask> tasks = Sync({});
  ASSERT_FALSE(tasks.empty());
  Run(tasks, absl::UnavailableError("router down"));
  EXPECT_EQ(Compactions("failed"), 1u);
  EXPECT_EQ(Counter("relocations_failed_total"), tasks.size());
  for (const proto::CopyTask& t : tasks) EXPECT_EQ(ReadBack(t.key()), UINT64_MAX) << t.key();
  size_t alive = 0;
  for (const std::string& k : kept) alive += ReadBack(k) != UINT64_MAX;
  EXPECT_EQ(alive, kept.size() - tasks.size());
  ASSERT_FALSE(PutBytes("big", 2 * kObject)->retry());
  std::vector<std::string> all = kept;
  all.push_back("big");
  RemoveAll(all);
  EXPECT_EQ(master_->SegmentAllocatorStats(segment_)->used_bytes, 0u);
}

TEST_F(MasterRelocationTest, ATimedOutMoveNeverReusesTheRangeTheWorkerMayWrite) {
  const std::vector<std::string> kept = Fragment();
  ASSERT_TRUE(PutBytes("big", 2 * kObject)->retry());
  master_->Tick();
  std::vector<proto::CopyTask> tasks = Sync({});  // taken, never answered
  ASSERT_FALSE(tasks.empty());
  clock_.AdvanceNs((ReplicationOptions{}.task_timeout_ms + 1) * 1'000'000);
  master_->Tick();
  EXPECT_EQ(Compactions("failed"), 1u);
  uint64_t quarantined = 0;
  for (const proto::CopyTask& t : tasks) {
    EXPECT_EQ(ReadBack(t.key()), UINT64_MAX);
    quarantined += t.length();
  }
  RemoveAll(kept);
  EXPECT_EQ(master_->SegmentAllocatorStats(segment_)->used_bytes, quarantined)
      << "only the ranges a late worker may still write stay taken";
}

TEST_F(MasterRelocationTest, OffByDefaultAFragmentedPutEvicts) {
  ASSERT_FALSE(MasterOptions{}.relocation.enabled);
  Make(false);
  Fragment();
  auto big = PutBytes("big", 2 * kObject);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_FALSE(big->retry());
  EXPECT_GT(Counter("evictions_total"), 0u);
  EXPECT_EQ(Compactions("started"), 0u);
}

}  // namespace
}  // namespace mooncake::master
