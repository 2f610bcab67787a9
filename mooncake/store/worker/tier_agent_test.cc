#include "mooncake/store/worker/tier_agent.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/compress/synthetic_kv.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/worker/worker.h"
#include "mooncake/tier/io_faults.h"

namespace mooncake::worker {
namespace {

namespace proto = ::mooncake::store::proto;
using TestWorker = Worker<rpc::InProcessChannel>;
constexpr uint64_t kObject = 64 << 10;
constexpr uint64_t kSegment = 16 * kObject;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, ".", ::getpid());
}

// A real master (fake clock, no ticker) and one worker with an SSD tier, in
// process. Objects are written straight into the worker's segment memory at
// the offsets PutStart hands out, as a client's transport would.
class TierAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    master::MasterOptions mo;
    mo.shard_count = 4;
    mo.membership.heartbeat_timeout_ms = 10'000;
    auto m = master::Master<>::Create(mo, &clock_);
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    service_ = std::make_unique<master::MasterService<master::Master<>>>(
        master_.get(), master::MasterServiceOptions{});
    ASSERT_TRUE(service_->Register(&registry_).ok());
    channel_ = std::make_unique<rpc::InProcessChannel>(&registry_);
    path_ = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::remove(path_.c_str());
    WorkerOptions wo;
    wo.segment_bytes = kSegment;
    wo.serve_shm = false;
    wo.serve_tcp = false;
    wo.heartbeat_thread = false;
    TierAgentOptions t;
    t.tier.paths = {path_};
    t.tier.capacity_bytes_per_file = 64 << 20;
    t.tier.device_read_bytes_per_s = 1e9;  // no probe
    t.tier.device_write_bytes_per_s = 1e9;
    t.tier.faults = faults_;
    t.tier.compression = compression_;
    t.poll_wait_ms = 20;
    wo.tier = t;
    auto w = TestWorker::Start(wo, channel_.get());
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    ASSERT_NE(worker_->tier_agent(), nullptr);
    ASSERT_TRUE(WaitFor([&] { return master_->Tiers().size() == 1; }));
  }

  void TearDown() override {
    master_->StopTierWaits();
    worker_.reset();
    std::remove(path_.c_str());
  }

  static bool WaitFor(const std::function<bool()>& done) {
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while (!done()) {
      if (absl::Now() > until) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  std::byte* SegmentBytes(uint64_t offset) {
    return static_cast<std::byte*>(worker_->segments()[0].data) + offset;
  }

  static std::string Value(int i) {
    std::string v(kObject, '\0');
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>((j * 131 + i * 7) >> 3);
    return v;
  }

  // Put through the master, bytes written into the segment by hand.
  // `format`: the writer's checksum format (the chunked one unless a test
  // plays an older or newer client).
  uint64_t Put(const std::string& key, const std::string& value,
               proto::ChecksumFormat format = proto::CHECKSUM_XXH3_CHUNKED,
               proto::DType dtype = proto::DTYPE_UNSPECIFIED) {
    proto::PutStartRequest req;
    req.set_key(key);
    if (dtype != proto::DTYPE_UNSPECIFIED) req.mutable_tensor()->set_dtype(dtype);
    req.set_size_bytes(value.size());
    req.set_checksum(format == proto::CHECKSUM_XXH3_WHOLE
                         ? StableHash64(value.data(), value.size())
                         : ValueChecksum(value.data(), value.size()));
    req.set_checksum_format(format);
    auto start = master_->PutStart(req);
    EXPECT_TRUE(start.ok()) << start.status();
    if (!start.ok()) return 0;
    std::memcpy(SegmentBytes(start->replicas(0).offset()), value.data(), value.size());
    proto::PutEndRequest end;
    end.set_key(key);
    end.set_put_id(start->put_id());
    auto e = master_->PutEnd(end);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->object().version() : 0;
  }

  // GetReplicas until the object is in DRAM; returns its bytes ("" if gone).
  std::string Get(const std::string& key) {
    proto::GetReplicasRequest req;
    req.set_key(key);
    std::string out;
    EXPECT_TRUE(WaitFor([&] {
      auto r = master_->GetReplicas(req);
      if (absl::IsNotFound(r.status())) return true;
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok() || r->loading()) return false;
      out.assign(reinterpret_cast<const char*>(SegmentBytes(r->replicas(0).offset())),
                 r->replicas(0).length());
      return true;
    }));
    return out;
  }

  tier::Compression compression_ = tier::Compression::kAuto;  // set before SetUp
  // The real SsdTier's device, failing or lying on demand (off unless a test says).
  std::shared_ptr<tier::ScriptedFaults> faults_ = std::make_shared<tier::ScriptedFaults>();
  FakeClock clock_{1'000'000'000};
  std::unique_ptr<master::Master<>> master_;
  std::unique_ptr<master::MasterService<master::Master<>>> service_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::InProcessChannel> channel_;
  std::unique_ptr<TestWorker> worker_;
  std::string path_;
};

TEST_F(TierAgentTest, OffloadsAndLoadsBackExactBytes) {
  for (int i = 0; i < 8; ++i) ASSERT_NE(Put(absl::StrCat("k", i), Value(i)), 0u);
  master_->EvictBytes(8 * kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 8; }));
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  EXPECT_EQ(worker_->tier_agent()->tier_stats().objects, 8u);
  // Scribble over the segment: the loads must bring the real bytes back.
  std::memset(SegmentBytes(0), 0x5a, kSegment);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Get(absl::StrCat("k", i)), Value(i)) << i;
  const TierAgentStats st = worker_->tier_agent()->stats();
  EXPECT_EQ(st.offloads, 8u);
  EXPECT_EQ(st.loads, 8u);
  EXPECT_EQ(st.offload_failures + st.load_failures, 0u);
}

// The writer's dtype reaches the tier with each record (the tier compresses
// float types by it): bf16 and fp16 objects are stored as such, one without a
// TensorMeta as bytes.
TEST_F(TierAgentTest, TheObjectsDTypeReachesTheTier) {
  ASSERT_NE(Put("bf16", Value(1), proto::CHECKSUM_XXH3_CHUNKED, proto::DTYPE_BF16), 0u);
  ASSERT_NE(Put("fp16", Value(2), proto::CHECKSUM_XXH3_CHUNKED, proto::DTYPE_FP16), 0u);
  ASSERT_NE(Put("bytes", Value(3)), 0u);
  master_->EvictBytes(3 * kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 3; }));
  std::vector<compress::DType> dtypes;
  worker_->tier_agent()->tier().ForEach(
      [&](const tier::ObjectInfo& o) { dtypes.push_back(o.meta.dtype); });
  std::sort(dtypes.begin(), dtypes.end());
  EXPECT_EQ(dtypes,
            (std::vector<compress::DType>{compress::DType::kBytes, compress::DType::kBFloat16,
                                          compress::DType::kFloat16}));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(Get(i == 1 ? "bf16" : i == 2 ? "fp16" : "bytes"), Value(i)) << i;
  }
}

class TierAgentCompressingTest : public TierAgentTest {
 protected:
  void SetUp() override {
    compression_ = tier::Compression::kAlways;
    TierAgentTest::SetUp();
  }
};

// The master charges the tier what each record takes (the worker reports it
// with the offload's result), so compressed copies leave room for more.
TEST_F(TierAgentCompressingTest, TheMasterChargesWhatTheRecordsTake) {
  std::vector<std::string> values;
  for (int i = 0; i < 4; ++i) {
    const std::vector<std::byte> kv = compress::SyntheticKvBytes(
        kObject, compress::DType::kBFloat16, static_cast<uint64_t>(i) + 1);
    values.emplace_back(reinterpret_cast<const char*>(kv.data()), kv.size());
    ASSERT_NE(
        Put(absl::StrCat("kv", i), values.back(), proto::CHECKSUM_XXH3_CHUNKED, proto::DTYPE_BF16),
        0u);
  }
  master_->EvictBytes(4 * kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 4; }));
  ASSERT_TRUE(WaitFor([&] {  // the count is published after the charge
    return master_->Tiers()[0].reserved_bytes == worker_->tier_agent()->tier_stats().used_bytes;
  }));
  const tier::TierStats t = worker_->tier_agent()->tier_stats();
  EXPECT_EQ(t.compressed_writes, 4u);
  ASSERT_EQ(master_->Tiers().size(), 1u);
  EXPECT_EQ(master_->Tiers()[0].reserved_bytes, t.used_bytes);
  EXPECT_LT(master_->Tiers()[0].reserved_bytes, 4 * (kObject + 4096));  // < 4 raw records
  std::memset(SegmentBytes(0), 0x5a, kSegment);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Get(absl::StrCat("kv", i)), values[i]) << i;
}

// Objects an older client put (whole-value XXH3) offload and load like any;
// a format this worker does not know is refused, never stored unverified.
TEST_F(TierAgentTest, EachChecksumFormatIsVerifiedAsWritten) {
  ASSERT_NE(Put("old", Value(1), proto::CHECKSUM_XXH3_WHOLE), 0u);
  ASSERT_NE(Put("new", Value(2)), 0u);
  master_->EvictBytes(2 * kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 2; }));
  std::memset(SegmentBytes(0), 0x5a, kSegment);
  EXPECT_EQ(Get("old"), Value(1));
  EXPECT_EQ(Get("new"), Value(2));
  EXPECT_EQ(worker_->tier_agent()->stats().offload_failures, 0u);
  ASSERT_NE(Put("future", Value(3), static_cast<proto::ChecksumFormat>(7)), 0u);
  master_->EvictBytes(3 * kObject);
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->stats().offload_failures == 1; }));
  EXPECT_EQ(worker_->tier_agent()->tier_stats().objects, 2u);
}

TEST_F(TierAgentTest, SegmentBytesThatDoNotMatchTheChecksumAreNeverStored) {
  ASSERT_NE(Put("k", Value(1)), 0u);
  auto r = master_->GetReplicas([] {
    proto::GetReplicasRequest q;
    q.set_key("k");
    return q;
  }());
  ASSERT_TRUE(r.ok());
  *SegmentBytes(r->replicas(0).offset()) ^= std::byte{1};  // a stray write
  proto::ReleaseLeasesRequest rel;
  rel.add_lease_ids(r->lease().lease_id());
  ASSERT_TRUE(master_->ReleaseLeases(rel).ok());
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->stats().offload_failures == 1; }));
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().objects == 0; }));  // the report landed
  EXPECT_EQ(worker_->tier_agent()->tier_stats().objects, 0u);
  EXPECT_EQ(Get("k"), "");  // dropped as without a tier, never a wrong copy
}

// The device lies on the way back: the record fails its checksum, the LOAD
// fails with DataLoss, the master forgets the copy, and the object (which had
// nothing else) is gone: never a wrong byte.
TEST_F(TierAgentTest, ACorruptRecordIsNeverLoaded) {
  ASSERT_NE(Put("k", Value(6)), 0u);
  ASSERT_NE(Put("other", Value(7)), 0u);
  master_->EvictBytes(2 * kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 2; }));
  std::memset(SegmentBytes(0), 0x5a, kSegment);
  faults_->corrupt_reads = true;
  EXPECT_EQ(Get("k"), "");
  EXPECT_EQ(worker_->tier_agent()->stats().load_failures, 1u);
  EXPECT_EQ(worker_->tier_agent()->tier_stats().corrupt_records, 1u);
  EXPECT_EQ(master_->Stats().ssd_objects, 1);
  // The other record is intact once the device stops lying.
  faults_->corrupt_reads = false;
  EXPECT_EQ(Get("other"), Value(7));
}

// A read error is not a verdict on the record: the LOAD fails, the copy stays,
// and the next read loads it.
TEST_F(TierAgentTest, AReadErrorKeepsTheCopyForTheNextRead) {
  ASSERT_NE(Put("k", Value(8)), 0u);
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 1; }));
  std::memset(SegmentBytes(0), 0x5a, kSegment);
  faults_->fail_reads_after = 0;
  proto::GetReplicasRequest req;
  req.set_key("k");
  auto r = master_->GetReplicas(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->loading());
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->stats().load_failures == 1; }));
  faults_->fail_reads_after = -1;
  EXPECT_EQ(master_->Stats().ssd_objects, 1);
  EXPECT_EQ(Get("k"), Value(8));
  EXPECT_EQ(worker_->tier_agent()->stats().loads, 1u);
}

// A write error: the OFFLOAD fails, nothing is acknowledged or stored, the
// object is evicted as it would be without a tier, and the tier keeps working.
TEST_F(TierAgentTest, AWriteErrorStoresNothingAndTheTierKeepsWorking) {
  ASSERT_NE(Put("k", Value(9)), 0u);
  faults_->fail_writes_after = 0;
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->stats().offload_failures == 1; }));
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().objects == 0; }));  // the report landed
  EXPECT_EQ(worker_->tier_agent()->tier_stats().objects, 0u);
  EXPECT_GE(worker_->tier_agent()->tier_stats().io_errors, 1u);
  EXPECT_EQ(master_->Stats().ssd_objects, 0);
  EXPECT_EQ(Get("k"), "");
  faults_->fail_writes_after = -1;
  ASSERT_NE(Put("k2", Value(10)), 0u);
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 1; }));
  std::memset(SegmentBytes(0), 0x5a, kSegment);
  EXPECT_EQ(Get("k2"), Value(10));
}

TEST_F(TierAgentTest, RemoveDeletesTheRecord) {
  ASSERT_NE(Put("k", Value(2)), 0u);
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->tier_stats().objects == 1; }));
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(master_->Remove(rm).ok());
  // The record leaves the index before the remove's completion runs.
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->stats().drops == 1; }));
  EXPECT_EQ(worker_->tier_agent()->tier_stats().objects, 0u);
}

TEST_F(TierAgentTest, ARemountEmptiesTheTier) {
  ASSERT_NE(Put("k", Value(3)), 0u);
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->tier_stats().objects == 1; }));
  clock_.AdvanceMs(20'000);  // the worker looks dead to the master
  master_->Tick();
  EXPECT_EQ(Get("k"), "");
  ASSERT_TRUE(worker_->HeartbeatOnce().ok());  // remount_required -> Reset
  EXPECT_EQ(worker_->stats().remounts, 1u);
  EXPECT_EQ(worker_->tier_agent()->tier_stats().objects, 0u);
  EXPECT_EQ(worker_->tier_agent()->stats().resets, 2u);  // at start, at the remount
  // The tier works for the new mount.
  ASSERT_TRUE(WaitFor([&] { return master_->Tiers().size() == 1; }));
  ASSERT_NE(Put("k2", Value(4)), 0u);
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return master_->Stats().ssd_objects == 1; }));
  std::memset(SegmentBytes(0), 0, kSegment);
  EXPECT_EQ(Get("k2"), Value(4));
}

TEST_F(TierAgentTest, ARecordLeftFromAnEarlierRunIsRemovedAtStart) {
  // Reopen the same file with a new agent: whatever it held is gone.
  ASSERT_NE(Put("k", Value(5)), 0u);
  master_->EvictBytes(kObject);
  ASSERT_TRUE(WaitFor([&] { return worker_->tier_agent()->tier_stats().objects == 1; }));
  master_->StopTierWaits();
  worker_.reset();
  tier::SsdTierOptions o;
  o.paths = {path_};
  o.device_read_bytes_per_s = 1e9;
  o.device_write_bytes_per_s = 1e9;
  auto reopened = tier::SsdTier::Open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->stats().objects, 1u);  // durable
  reopened->reset();
  TierAgentOptions t;
  t.tier = o;
  auto agent = TierAgent<rpc::InProcessChannel>::Start(
      t, channel_.get(), "w-new", [](uint64_t) { return std::optional<SegmentMemory>(); });
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ((*agent)->tier_stats().objects, 0u);
}

TEST(TierAgentOptionsTest, BadOptionsAreInvalidArgument) {
  rpc::ServiceRegistry registry;
  rpc::InProcessChannel channel(&registry);
  TierAgentOptions t;
  t.max_in_flight = 0;
  auto a = TierAgent<rpc::InProcessChannel>::Start(
      t, &channel, "w", [](uint64_t) { return std::optional<SegmentMemory>(); });
  EXPECT_TRUE(absl::IsInvalidArgument(a.status()));
  t.max_in_flight = 4;  // no paths: the tier says why
  a = TierAgent<rpc::InProcessChannel>::Start(
      t, &channel, "w", [](uint64_t) { return std::optional<SegmentMemory>(); });
  EXPECT_FALSE(a.ok());
}

TEST(TierAgentOptionsTest, DTypesMapToTheCodecs) {
  EXPECT_EQ(TierDType(proto::DTYPE_BF16), compress::DType::kBFloat16);
  EXPECT_EQ(TierDType(proto::DTYPE_FP16), compress::DType::kFloat16);
  EXPECT_EQ(TierDType(proto::DTYPE_FP8_E4M3), compress::DType::kFloat8E4M3);
  EXPECT_EQ(TierDType(proto::DTYPE_INT8), compress::DType::kBytes);
  EXPECT_EQ(TierRecordKey(42), "v42");
}

}  // namespace
}  // namespace mooncake::worker
