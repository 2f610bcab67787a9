// The master's side of the SSD tier (internal/tier_path.h, tier_registry.h):
// a scripted worker answers TierSync by hand; time is a FakeClock.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/index/variant_policy.h"
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

constexpr uint64_t kObject = 4096;
constexpr uint64_t kSegment = 16 * kObject;

// LRU (the default) or S3-FIFO, as the store binary offers them.
using S3Fifo = index::S3FifoPolicy<ObjectKey, ObjectKeyHash>;
using TestPolicy = index::VariantPolicy<index::LruPolicy<ObjectKey, ObjectKeyHash>, S3Fifo>;
using TestMaster = Master<alloc::TlsfAllocator, TestPolicy>;

class MasterTierTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(MasterOptions{}); }

  void Make(MasterOptions o, TestPolicy policy = TestPolicy()) {
    o.shard_count = 4;
    auto m = TestMaster::Create(o, &clock_, nullptr, nullptr, std::move(policy));
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    auto seg = master_->MountSegment(MountReq("w1", "seg0", kSegment, "host-a"));
    ASSERT_TRUE(seg.ok()) << seg.status();
    segment_ = seg->segment_id();
  }

  // The worker's TierSync: reports `results`, takes up to 64 tasks.
  // `stored_bytes`: what each OK result says its record takes (0: not said).
  std::vector<proto::TierTask> Sync(const std::vector<std::pair<uint64_t, absl::Status>>& results,
                                    const std::string& worker = "w1", uint64_t stored_bytes = 0) {
    proto::TierSyncRequest req;
    req.set_worker_id(worker);
    req.set_capacity_bytes(tier_capacity_);
    req.set_used_bytes(tier_used_);
    req.set_max_tasks(64);
    for (const auto& [id, st] : results) {
      proto::TierTaskResult* r = req.add_results();
      r->set_task_id(id);
      r->set_code(static_cast<uint32_t>(st.code()));
      r->set_message(std::string(st.message()));
      if (st.ok()) r->set_stored_bytes(stored_bytes);
    }
    auto resp = master_->TierSync(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return {};
    EXPECT_FALSE(resp->remount_required());
    return {resp->tasks().begin(), resp->tasks().end()};
  }

  uint64_t Put(const std::string& key, uint64_t size = kObject) {
    proto::PutStartRequest req = PutReq(key, size);
    req.mutable_tensor()->set_dtype(proto::DTYPE_BF16);
    auto start = master_->PutStart(req);
    EXPECT_TRUE(start.ok()) << start.status();
    if (!start.ok()) return 0;
    auto end = master_->PutEnd(EndReq(key, start->put_id()));
    EXPECT_TRUE(end.ok()) << end.status();
    return end.ok() ? end->object().version() : 0;
  }

  void Release(uint64_t lease_id) {
    proto::ReleaseLeasesRequest r;
    r.add_lease_ids(lease_id);
    auto got = master_->ReleaseLeases(r);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->released(), 1u);
  }

  // Puts `key`, evicts it to SSD and acknowledges the offload.
  uint64_t PutOnSsdOnly(const std::string& key) {
    const uint64_t v = Put(key);
    master_->EvictBytes(kObject);
    auto tasks = Sync({});
    EXPECT_EQ(tasks.size(), 1u);
    if (tasks.size() != 1) return 0;
    EXPECT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD);
    EXPECT_TRUE(Sync({{tasks[0].task_id(), absl::OkStatus()}}).empty());
    return v;
  }

  FakeClock clock_{1'000'000'000};
  std::unique_ptr<TestMaster> master_;
  uint64_t segment_ = 0;
  uint64_t tier_capacity_ = 64 * kObject;  // what Sync reports
  uint64_t tier_used_ = 0;                 // and the tier's own use
};

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

TEST_F(MasterTierTest, TierSyncFromAnUnknownWorkerAsksForARemount) {
  proto::TierSyncRequest req;
  req.set_worker_id("ghost");
  req.set_capacity_bytes(kObject);
  auto resp = master_->TierSync(req);
  ASSERT_TRUE(resp.ok());
  EXPECT_TRUE(resp->remount_required());
  EXPECT_TRUE(master_->Tiers().empty());
  req.set_worker_id("");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TierSync(req).status()));
  req.set_worker_id("w1");
  req.set_max_tasks(rpc::kMaxTierTasks + 1);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TierSync(req).status()));
}

TEST_F(MasterTierTest, WithoutATierEvictionDrops) {
  Put("k");
  EXPECT_EQ(master_->EvictBytes(kObject).victims, 1u);
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
}

TEST_F(MasterTierTest, EvictionOffloadsThenAReadLoadsBack) {
  EXPECT_TRUE(Sync({}).empty());  // registers the tier
  const uint64_t v = Put("k");
  auto first = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(first.ok());
  const uint64_t dram_offset = first->replicas(0).offset();
  Release(first->lease().lease_id());

  EXPECT_EQ(master_->EvictBytes(kObject).freed_bytes, kObject);
  EXPECT_EQ(master_->Stats().offloading_bytes, kObject);
  // Still in DRAM (readable) until the tier acknowledges.
  EXPECT_EQ(master_->Stats().used_bytes, kObject);
  auto during = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(during.ok());
  EXPECT_EQ(during->replicas_size(), 1);
  EXPECT_FALSE(during->loading());
  Release(during->lease().lease_id());

  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  const proto::TierTask off = tasks[0];
  EXPECT_EQ(off.kind(), proto::TIER_OFFLOAD);
  EXPECT_EQ(off.version(), v);
  EXPECT_EQ(off.segment_id(), segment_);
  EXPECT_EQ(off.offset(), dram_offset);
  EXPECT_EQ(off.length(), kObject);
  EXPECT_EQ(off.checksum(), 0x1234u);
  EXPECT_EQ(off.dtype(), proto::DTYPE_BF16);

  EXPECT_TRUE(Sync({{off.task_id(), absl::OkStatus()}}).empty());
  MasterStats st = master_->Stats();
  EXPECT_EQ(st.used_bytes, 0u);
  EXPECT_EQ(st.ssd_objects, 1);
  EXPECT_EQ(st.offloading_bytes, 0u);
  EXPECT_EQ(st.objects, 1);

  // On SSD only: the first read starts one LOAD into w1's segment.
  auto get = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_TRUE(get->loading());
  EXPECT_EQ(get->replicas_size(), 0);
  EXPECT_EQ(get->lease().lease_id(), 0u);
  EXPECT_EQ(get->object().ssd_worker_id(), "w1");
  EXPECT_EQ(get->object().version(), v);
  EXPECT_TRUE(master_->GetReplicas(GetReq("k"))->loading());  // no second load
  tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  const proto::TierTask load = tasks[0];
  EXPECT_EQ(load.kind(), proto::TIER_LOAD);
  EXPECT_EQ(load.version(), v);
  EXPECT_EQ(load.segment_id(), segment_);
  EXPECT_EQ(load.length(), kObject);
  EXPECT_EQ(master_->Stats().used_bytes, kObject);  // the range is reserved
  // Busy while loading: not evictable.
  EXPECT_EQ(master_->EvictBytes(kObject).victims, 0u);

  EXPECT_TRUE(Sync({{load.task_id(), absl::OkStatus()}}).empty());
  get = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(get.ok());
  EXPECT_FALSE(get->loading());
  ASSERT_EQ(get->replicas_size(), 1);
  EXPECT_EQ(get->replicas(0).offset(), load.offset());
  EXPECT_EQ(get->replicas(0).state(), proto::REPLICA_COMPLETE);
  EXPECT_NE(get->lease().lease_id(), 0u);
  EXPECT_EQ(get->object().ssd_worker_id(), "w1");  // the copy stays (inclusive)

  // Evicted again: DRAM goes at once, no second write.
  Release(get->lease().lease_id());
  EXPECT_EQ(master_->EvictBytes(kObject).freed_bytes, kObject);
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  EXPECT_TRUE(Sync({}).empty());
  EXPECT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
}

// Under S3-FIFO a loaded object enters DRAM as a new entry; the client's read
// once it is loaded (the ask that finds it no longer loading) counts, so new
// objects nobody read leave before it, and it is not loaded again next time.
TEST_F(MasterTierTest, AnObjectStoredCompressedIsOffloadedAsBytes) {
  EXPECT_TRUE(Sync({}).empty());  // registers the tier
  proto::PutStartRequest req = PutReq("zipped", kObject);
  req.mutable_tensor()->set_dtype(proto::DTYPE_BF16);
  req.mutable_tensor()->set_codec(2);  // the network codec's frame
  auto start = master_->PutStart(req);
  ASSERT_TRUE(start.ok()) << start.status();
  ASSERT_TRUE(master_->PutEnd(EndReq("zipped", start->put_id())).ok());
  EXPECT_EQ(master_->EvictBytes(kObject).freed_bytes, kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD);
  EXPECT_EQ(tasks[0].dtype(), proto::DTYPE_UNSPECIFIED) << "the tier must not compress a frame";
}

TEST_F(MasterTierTest, UnderS3FifoALoadedObjectReadOnceOutlivesOneShotObjects) {
  Make(MasterOptions{}, TestPolicy(S3Fifo()));
  EXPECT_TRUE(Sync({}).empty());
  PutOnSsdOnly("a");
  PutOnSsdOnly("b");  // S3-FIFO's ghost now remembers b, not a: a comes back as new
  ASSERT_TRUE(master_->GetReplicas(GetReq("a"))->loading());
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  ASSERT_EQ(tasks[0].kind(), proto::TIER_LOAD);
  EXPECT_TRUE(Sync({{tasks[0].task_id(), absl::OkStatus()}}).empty());
  auto read = master_->GetReplicas(GetReq("a"));  // the client asks again: loaded
  ASSERT_TRUE(read.ok());
  ASSERT_FALSE(read->loading());
  Release(read->lease().lease_id());
  std::vector<uint64_t> fresh;
  for (int i = 0; i < 4; ++i) fresh.push_back(Put(absl::StrCat("new", i)));

  EXPECT_EQ(master_->EvictBytes(kObject).victims, 1u);
  tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u) << "the loaded object went (it has an SSD copy: no write)";
  EXPECT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD);
  EXPECT_EQ(tasks[0].version(), fresh[0]);
  auto a = master_->GetReplicas(GetReq("a"));
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->loading());
  EXPECT_EQ(a->replicas_size(), 1);
}

TEST_F(MasterTierTest, AFailedOffloadEvictsAsWithoutATier) {
  Sync({});
  Put("k");
  master_->EvictBytes(kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  Sync({{tasks[0].task_id(), absl::ResourceExhaustedError("tier full")}});
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  ASSERT_EQ(master_->Tiers().size(), 1u);
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, 0u);
}

TEST_F(MasterTierTest, ObjectsBelowTheOffloadMinimumAreDroppedNotWrittenBack) {
  MasterOptions o;
  o.tier.offload_min_bytes = kObject + 1;
  Make(o);
  Sync({});
  Put("k");
  EXPECT_EQ(master_->EvictBytes(kObject).freed_bytes, kObject);  // at once, as without a tier
  EXPECT_TRUE(Sync({}).empty());                                 // no OFFLOAD
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
  EXPECT_EQ(master_->Stats().ssd_objects, 0);
  // At the minimum itself, the object is written back.
  o.tier.offload_min_bytes = kObject;
  Make(o);
  Sync({});
  Put("k");
  master_->EvictBytes(kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD);
}

TEST_F(MasterTierTest, RemoveDropsTheSsdCopy) {
  Sync({});
  const uint64_t v = PutOnSsdOnly("k");
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(master_->Remove(rm).ok());
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_DROP);
  EXPECT_EQ(tasks[0].version(), v);
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, 0u);
  EXPECT_EQ(master_->Stats().ssd_objects, 0);
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
}

TEST_F(MasterTierTest, AnOffloadThatOutlivesItsObjectDropsTheRecord) {
  Sync({});
  const uint64_t v = Put("k");
  master_->EvictBytes(kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(master_->Remove(rm).ok());
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  auto drop = Sync({{tasks[0].task_id(), absl::OkStatus()}});
  ASSERT_EQ(drop.size(), 1u);
  EXPECT_EQ(drop[0].kind(), proto::TIER_DROP);
  EXPECT_EQ(drop[0].version(), v);
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, 0u);
  EXPECT_EQ(master_->Stats().offloading_bytes, 0u);
}

TEST_F(MasterTierTest, ARemoveDuringALoadFreesTheRangeOnlyWhenTheLoadEnds) {
  Sync({});
  PutOnSsdOnly("k");
  ASSERT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(master_->Remove(rm).ok());
  // The worker may be writing the range: it stays allocated.
  EXPECT_EQ(master_->Stats().used_bytes, kObject);
  auto more = Sync({{tasks[0].task_id(), absl::OkStatus()}});
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  ASSERT_EQ(more.size(), 1u);  // the record's DROP (queued at the remove)
  EXPECT_EQ(more[0].kind(), proto::TIER_DROP);
}

TEST_F(MasterTierTest, ACorruptRecordIsNeverServedAndTheObjectGoes) {
  Sync({});
  PutOnSsdOnly("k");
  ASSERT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  auto after = Sync({{tasks[0].task_id(), absl::DataLossError("checksum mismatch")}});
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  EXPECT_EQ(master_->Stats().objects, 0);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].kind(), proto::TIER_DROP);
}

// A compressing tier reports each record's real size; the master charges that
// (at most the raw record size it reserved), so more copies fit: three
// compressed records where two raw ones would (an offload still reserves the
// raw size until the tier answers). A remove gives back exactly the charge; a
// size over the reservation, or under the smallest record there is (a wrong
// report), is not believed.
TEST_F(MasterTierTest, ARecordIsChargedTheSizeTheTierReports) {
  constexpr uint64_t kSize = 4 * kObject;
  constexpr uint64_t kRaw = kSize + 4096;           // record size raw (header block)
  constexpr uint64_t kStored = 2 * kObject + 4096;  // what the tier says it took
  tier_capacity_ = 2 * kStored + kRaw;              // < 3 raw records
  Sync({});
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_NE(Put(key, kSize), 0u);
    master_->EvictBytes(kSize);
    auto tasks = Sync({});
    ASSERT_EQ(tasks.size(), 1u) << key;
    ASSERT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD) << key;  // no DROP: it fits
    EXPECT_TRUE(Sync({{tasks[0].task_id(), absl::OkStatus()}}, "w1", kStored).empty());
  }
  EXPECT_EQ(master_->Stats().ssd_objects, 3);
  ASSERT_EQ(master_->Tiers().size(), 1u);
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, 3 * kStored);
  for (const char* key : {"a", "b", "c"}) {
    EXPECT_TRUE(master_->GetReplicas(GetReq(key))->loading()) << key;  // on SSD, loading
  }
  proto::RemoveRequest rm;
  for (const char* key : {"a", "b"}) {
    rm.set_key(key);
    ASSERT_TRUE(master_->Remove(rm).ok());
  }
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, kStored);
  rm.set_key("c");
  ASSERT_TRUE(master_->Remove(rm).ok());
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, 0u);
  // Reports larger than the raw record, or smaller than one block and a
  // header, are charged the raw record and one block and a header.
  uint64_t want = 0;
  for (const auto& [key, report, charge] :
       {std::tuple<const char*, uint64_t, uint64_t>{"d", uint64_t{1} << 30, kRaw},
        std::tuple<const char*, uint64_t, uint64_t>{"e", 1, 2 * 4096}}) {
    ASSERT_NE(Put(key, kSize), 0u);
    master_->EvictBytes(kSize);
    uint64_t offload = 0;  // (the reads above started LOADs, the removes DROPs)
    for (const proto::TierTask& t : Sync({})) {
      if (t.kind() == proto::TIER_OFFLOAD) offload = t.task_id();
    }
    ASSERT_NE(offload, 0u) << key;
    Sync({{offload, absl::OkStatus()}}, "w1", report);
    want += charge;
    EXPECT_EQ(master_->Tiers()[0].reserved_bytes, want) << key;
  }
}

// A tier that refuses, for space its own report says it has, a record the
// charges said fits (its free space is fragmented) is counted on for that much
// less: the next offload drops the least recently used copy first instead of
// failing as well. A refusal from a tier that reported itself full is not
// fragmentation, and every offload the tier takes eases the shortfall.
TEST_F(MasterTierTest, ATierThatRefusesForSpaceIsCountedOnForLess) {
  constexpr uint64_t kRaw = kObject + 4096;
  ASSERT_EQ(tier_capacity_ % kRaw, 0u);
  const uint64_t fit = tier_capacity_ / kRaw;
  Sync({});
  for (uint64_t i = 0; i + 1 < fit; ++i) ASSERT_NE(PutOnSsdOnly(absl::StrCat("k", i)), 0u);
  // Room for one more record by the charges; the tier says no, twice.
  for (const bool reported_full : {true, false}) {
    tier_used_ = reported_full ? tier_capacity_ : (fit - 1) * kRaw;
    const std::string key = reported_full ? "x" : "x2";
    ASSERT_NE(Put(key), 0u);
    master_->EvictBytes(kObject);
    auto tasks = Sync({});
    ASSERT_EQ(tasks.size(), 1u) << key;
    ASSERT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD) << key;
    EXPECT_TRUE(
        Sync({{tasks[0].task_id(), absl::ResourceExhaustedError("no free extent")}}).empty());
    EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq(key)).status()));  // as without a tier
    ASSERT_EQ(master_->Tiers().size(), 1u);
    EXPECT_EQ(master_->Tiers()[0].shortfall_bytes, reported_full ? 0 : kRaw) << key;
    EXPECT_EQ(master_->Tiers()[0].reserved_bytes, (fit - 1) * kRaw) << key;
  }
  // The next offload makes room first: the least recently used copy goes.
  ASSERT_NE(Put("y"), 0u);
  master_->EvictBytes(kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_DROP);
  EXPECT_EQ(tasks[1].kind(), proto::TIER_OFFLOAD);
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k0")).status()));
  master_->RefreshMetrics();
  auto g = master_->metrics()->GetGauge("mooncake_master_tier_shortfall_bytes", "", {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->Value(), static_cast<double>(kRaw));
  // The tier takes it: the shortfall eases by 1/32 of a record.
  EXPECT_TRUE(Sync({{tasks[1].task_id(), absl::OkStatus()}}).empty());
  EXPECT_EQ(master_->Tiers()[0].shortfall_bytes, kRaw - kRaw / 32);
  // Other failures are not about space: no more shortfall.
  ASSERT_NE(Put("z"), 0u);
  master_->EvictBytes(kObject);
  uint64_t offload = 0;
  for (const proto::TierTask& t : Sync({})) {
    if (t.kind() == proto::TIER_OFFLOAD) offload = t.task_id();
  }
  ASSERT_NE(offload, 0u);
  EXPECT_TRUE(Sync({{offload, absl::UnavailableError("I/O error")}}).empty());
  EXPECT_EQ(master_->Tiers()[0].shortfall_bytes, kRaw - kRaw / 32);
}

TEST_F(MasterTierTest, AFullTierDropsItsLeastRecentlyUsedCopy) {
  tier_capacity_ = 2 * (kObject + 4096);  // two records (header block each)
  Sync({});
  const uint64_t va = PutOnSsdOnly("a");
  ASSERT_NE(va, 0u);
  ASSERT_NE(PutOnSsdOnly("b"), 0u);
  Put("c");
  master_->EvictBytes(kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_DROP);
  EXPECT_EQ(tasks[0].version(), va);
  EXPECT_EQ(tasks[1].kind(), proto::TIER_OFFLOAD);
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("a")).status()));
  EXPECT_TRUE(master_->GetReplicas(GetReq("b"))->loading());
}

TEST_F(MasterTierTest, AWorkerThatExpiresTakesItsSsdOnlyObjects) {
  Sync({});
  PutOnSsdOnly("k");
  clock_.AdvanceMs(60'000);  // no heartbeats
  master_->Tick();
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
  EXPECT_TRUE(master_->Tiers().empty());
  EXPECT_EQ(master_->Stats().ssd_objects, 0);
}

TEST_F(MasterTierTest, ATimedOutLoadQuarantinesItsRangeAndAReadStartsAnother) {
  MasterOptions o;
  o.tier.task_timeout_ms = 100;
  Make(o);
  Sync({});
  PutOnSsdOnly("k");
  ASSERT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  clock_.AdvanceMs(200);
  proto::HeartbeatRequest hb;
  hb.set_worker_id("w1");
  ASSERT_TRUE(master_->Heartbeat(hb).ok());
  EXPECT_EQ(master_->Tick().tier_tasks_timed_out, 1u);
  EXPECT_EQ(master_->Stats().used_bytes, kObject);  // quarantined, not reused
  ASSERT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
  auto again = Sync({{tasks[0].task_id(), absl::OkStatus()}});  // the late result: ignored
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind(), proto::TIER_LOAD);
  EXPECT_NE(again[0].offset(), tasks[0].offset());
  Sync({{again[0].task_id(), absl::OkStatus()}});
  auto get = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(get.ok());
  ASSERT_EQ(get->replicas_size(), 1);
  EXPECT_EQ(get->replicas(0).offset(), again[0].offset());
}

TEST_F(MasterTierTest, PrefixQueryCountsSsdBlocksAndLoadsThem) {
  Sync({});
  const Hash128 b0{1, 2}, b1{3, 4};
  Put(rpc::BlockObjectKey(b0));
  PutOnSsdOnly(rpc::BlockObjectKey(b1));  // evicts the older one (b0): one of each
  proto::PrefixQueryRequest q;
  rpc::ToProto(b0, q.add_chain());
  rpc::ToProto(b1, q.add_chain());
  rpc::ToProto(Hash128{5, 6}, q.add_chain());
  q.set_with_replicas(true);
  auto r = master_->PrefixQuery(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->matched(), 2u);
  ASSERT_EQ(r->blocks_size(), 2);
  int loading = 0;
  for (const auto& b : r->blocks()) loading += b.loading() ? 1 : 0;
  EXPECT_EQ(loading, 1);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_LOAD);
}

TEST_F(MasterTierTest, APrefixEndsAtABlockItsTenantHasNoQuotaToLoad) {
  MasterOptions o;
  o.tenants.push_back({.name = "t", .capacity_bytes = 2 * kObject});
  Make(o);
  Sync({});
  const Hash128 b0{1, 2}, b1{3, 4};
  auto put = [&](const std::string& key) {
    proto::PutStartRequest req = PutReq(key, kObject);
    req.mutable_options()->set_tenant("t");
    auto start = master_->PutStart(req);
    ASSERT_TRUE(start.ok()) << start.status();
    ASSERT_TRUE(master_->PutEnd(EndReq(key, start->put_id())).ok());
  };
  put(rpc::BlockObjectKey(b0));
  put(rpc::BlockObjectKey(b1));
  master_->EvictBytes(kObject);  // b0 (the older) to SSD
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  Sync({{tasks[0].task_id(), absl::OkStatus()}});
  put("x");  // the tenant's DRAM quota is full again
  proto::PrefixQueryRequest q;
  q.set_tenant("t");
  q.set_with_replicas(true);
  rpc::ToProto(b0, q.add_chain());
  rpc::ToProto(b1, q.add_chain());
  auto r = master_->PrefixQuery(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->matched(), 0u);  // not "loading" forever
  EXPECT_EQ(r->blocks_size(), 0);
}

TEST_F(MasterTierTest, TickDoesNotOffloadTwiceWhileOffloadsAreInFlight) {
  MasterOptions o;
  o.high_watermark = 0.9;
  o.low_watermark = 0.8;
  Make(o);
  Sync({});
  for (int i = 0; i < 16; ++i) Put("k" + std::to_string(i));
  master_->Tick();
  const size_t first = Sync({}).size();
  EXPECT_GE(first, 3u);  // 16 -> 12.8 objects' worth
  EXPECT_LE(first, 4u);
  master_->Tick();
  EXPECT_TRUE(Sync({}).empty());
}

TEST_F(MasterTierTest, APutShortOfRoomIsToldToRetryWhileOffloadsAreInFlight) {
  Sync({});
  for (int i = 0; i < 16; ++i) ASSERT_NE(Put("k" + std::to_string(i)), 0u);  // DRAM full
  // The put evicts k0 to SSD; its DRAM is free only once the tier has it.
  auto start = master_->PutStart(PutReq("new", kObject));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_TRUE(start->retry());
  EXPECT_EQ(start->put_id(), 0u);
  EXPECT_EQ(start->replicas_size(), 0);
  EXPECT_EQ(master_->Stats().pending_puts, 0);  // nothing left behind
  // Asking again while the offload is in flight evicts nothing more.
  EXPECT_TRUE(master_->PutStart(PutReq("new", kObject))->retry());
  EXPECT_EQ(master_->Stats().offloading_bytes, kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD);
  Sync({{tasks[0].task_id(), absl::OkStatus()}});
  start = master_->PutStart(PutReq("new", kObject));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_FALSE(start->retry());
  ASSERT_EQ(start->replicas_size(), 1);
  ASSERT_TRUE(master_->PutEnd(EndReq("new", start->put_id())).ok());
  EXPECT_TRUE(master_->GetReplicas(GetReq("k0"))->loading());  // on SSD now
  EXPECT_EQ(master_->Stats().objects, 17);
}

TEST_F(MasterTierTest, AFullTaskQueueEvictsAsWithoutATier) {
  MasterOptions o;
  o.tier.max_queued_tasks = 1;
  Make(o);
  Sync({});
  Put("a");
  Put("b");
  // a's OFFLOAD takes the one queue slot; b is dropped (nothing reserved for it).
  EXPECT_EQ(master_->EvictBytes(2 * kObject).victims, 2u);
  EXPECT_TRUE(master_->GetReplicas(GetReq("a")).ok());  // in DRAM while offloading
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("b")).status()));
  EXPECT_EQ(master_->Stats().offloading_bytes, kObject);
  ASSERT_EQ(master_->Tiers().size(), 1u);
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, kObject + 4096);
}

TEST_F(MasterTierTest, ReadsThatWaitForRoomDoNotEvictOncePerAsk) {
  Sync({});
  PutOnSsdOnly("cold");
  for (int i = 0; i < 16; ++i) ASSERT_NE(Put("k" + std::to_string(i)), 0u);  // DRAM full
  for (int ask = 0; ask < 10; ++ask) {
    auto r = master_->GetReplicas(GetReq("cold"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->loading());
  }
  // One offload makes the room; the other asks wait for it.
  EXPECT_EQ(master_->Stats().offloading_bytes, kObject);
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_OFFLOAD);
  Sync({{tasks[0].task_id(), absl::OkStatus()}});
  ASSERT_TRUE(master_->GetReplicas(GetReq("cold"))->loading());  // now the load starts
  tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind(), proto::TIER_LOAD);
}

TEST_F(MasterTierTest, ALoadThatFailsForAnotherReasonKeepsTheCopy) {
  Sync({});
  PutOnSsdOnly("k");
  ASSERT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
  auto tasks = Sync({});
  ASSERT_EQ(tasks.size(), 1u);
  Sync({{tasks[0].task_id(), absl::FailedPreconditionError("segment not on this worker")}});
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  EXPECT_TRUE(master_->GetReplicas(GetReq("k"))->loading());  // a new load, same copy
  EXPECT_EQ(Sync({}).size(), 1u);
}

TEST_F(MasterTierTest, ATierThatGoesQuarantinesTheRangesItMayStillBeLoading) {
  Sync({});
  PutOnSsdOnly("k");
  ASSERT_TRUE(master_->GetReplicas(GetReq("k"))->loading());
  ASSERT_EQ(Sync({}).size(), 1u);  // the LOAD is out
  tier_capacity_ = 0;              // the worker says it has no tier any more
  Sync({});
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
  EXPECT_EQ(master_->Stats().used_bytes, kObject);  // never reused: the worker may write it
}

TEST_F(MasterTierTest, OffloadsAStuckWorkerNeverTakesEndAndPutsProceed) {
  MasterOptions o;
  o.tier.task_timeout_ms = 100;
  Make(o);
  Sync({});
  for (int i = 0; i < 16; ++i) ASSERT_NE(Put("k" + std::to_string(i)), 0u);
  EXPECT_TRUE(master_->PutStart(PutReq("new", kObject))->retry());  // k0's offload queued
  master_->Tick();                                                  // sees it queued
  clock_.AdvanceMs(200);
  EXPECT_EQ(master_->Tick().tier_tasks_timed_out, 1u);
  EXPECT_EQ(master_->Stats().offloading_bytes, 0u);
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k0")).status()));  // dropped
  auto start = master_->PutStart(PutReq("new", kObject));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_FALSE(start->retry());
  EXPECT_EQ(start->replicas_size(), 1);
}

TEST_F(MasterTierTest, TierReportHandsOutQueuedTasks) {
  Sync({});
  Put("a");
  Put("b");
  master_->EvictBytes(2 * kObject);  // two OFFLOADs queued
  proto::TierReportRequest report;
  report.set_worker_id("w1");
  report.set_capacity_bytes(tier_capacity_);
  report.set_max_tasks(1);
  auto first = master_->TierReport(report);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->tasks_size(), 1);
  report.add_results()->set_task_id(first->tasks(0).task_id());
  report.set_max_tasks(8);
  auto second = master_->TierReport(report);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->tasks_size(), 1);  // the other one; the first is done
  EXPECT_NE(second->tasks(0).task_id(), first->tasks(0).task_id());
  EXPECT_EQ(master_->Stats().ssd_objects, 1);
  report.set_max_tasks(rpc::kMaxTierTasks + 1);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TierReport(report).status()));
}

TEST_F(MasterTierTest, TierReportFromAnUnknownWorkerAsksForARemount) {
  proto::TierReportRequest report;
  report.set_worker_id("ghost");
  report.set_capacity_bytes(kObject);
  auto answer = master_->TierReport(report);
  ASSERT_TRUE(answer.ok());
  EXPECT_TRUE(answer->remount_required());
  report.set_worker_id("");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TierReport(report).status()));
}

TEST_F(MasterTierTest, AWorkerThatSaysItHasNoTierLosesItsCopies) {
  Sync({});
  PutOnSsdOnly("k");
  tier_capacity_ = 0;
  EXPECT_TRUE(Sync({}).empty());
  EXPECT_TRUE(master_->Tiers().empty());
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("k")).status()));
}

}  // namespace
}  // namespace mooncake::master
