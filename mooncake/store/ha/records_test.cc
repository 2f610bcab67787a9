#include "mooncake/store/ha/records.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mooncake/base/clock.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/ha/oplog_writer.h"
#include "mooncake/store/master/master.h"

namespace mooncake::ha {
namespace {

namespace sp = ::mooncake::store::proto;

sp::MountSegmentRequest MountReq(const std::string& worker, uint64_t size) {
  sp::MountSegmentRequest r;
  r.mutable_segment()->set_worker_id(worker);
  r.mutable_segment()->set_name(worker + "-seg");
  r.mutable_segment()->set_size_bytes(size);
  r.mutable_segment()->mutable_endpoint()->set_host_id("host-" + worker);
  return r;
}

sp::PutStartRequest PutReq(const std::string& key, uint64_t size, uint32_t replicas = 1) {
  sp::PutStartRequest r;
  r.set_key(key);
  r.set_size_bytes(size);
  r.set_checksum(0x1234);
  r.mutable_options()->set_replica_count(replicas);
  return r;
}

sp::PutEndRequest EndReq(const std::string& key, uint64_t put_id) {
  sp::PutEndRequest r;
  r.set_key(key);
  r.set_put_id(put_id);
  return r;
}

TEST(RecordFraming, RoundTripsAndRefusesEveryCorruption) {
  hproto::OplogBatch b;
  b.set_seq(7);
  b.set_epoch(42);
  b.add_mutations()->set_object_erased("k");
  const std::string bytes = EncodeRecord(RecordKind::kBatch, b);
  hproto::OplogBatch back;
  ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, bytes, &back).ok());
  EXPECT_EQ(back.seq(), 7u);
  EXPECT_EQ(back.mutations(0).object_erased(), "k");

  EXPECT_TRUE(absl::IsDataLoss(DecodeRecord(RecordKind::kSnapshot, bytes, &back)));
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecord(RecordKind::kBatch, bytes.substr(0, 10), &back)));
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeRecord(RecordKind::kBatch, bytes.substr(0, bytes.size() - 1), &back)));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    EXPECT_FALSE(DecodeRecord(RecordKind::kBatch, bad, &back).ok()) << "byte " << i;
  }
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecord(RecordKind::kBatch, bytes + "x", &back)));
}

// A batch of many object records (the same worker and host ids in each) as
// the leader writes one under load.
hproto::OplogBatch ManyObjects(int n) {
  hproto::OplogBatch b;
  b.set_seq(3);
  for (int i = 0; i < n; ++i) {
    hproto::ObjectRecord* o = b.add_mutations()->mutable_object_set();
    o->set_key("bench-" + std::to_string(i));
    o->set_committed(true);
    o->set_size_bytes(4096);
    o->set_version(1000 + i);
    hproto::ReplicaRecord* r = o->add_replicas();
    r->set_segment_id(1);
    r->set_worker_id("10.0.0.21:50051/worker-0123456789abcdef0123456789abcdef");
    r->set_host_id("0123456789abcdef0123456789abcdef");
    r->set_offset(uint64_t{4096} * i);
    r->set_length(4096);
    r->set_complete(true);
  }
  return b;
}

TEST(RecordFraming, LargeRecordsAreStoredCompressedAndRoundTrip) {
  const hproto::OplogBatch b = ManyObjects(200);
  const std::string bytes = EncodeRecord(RecordKind::kBatch, b);
  EXPECT_EQ(static_cast<uint8_t>(bytes[6]), static_cast<uint8_t>(RecordEncoding::kZstdFrame));
  EXPECT_LT(bytes.size(), b.ByteSizeLong() / 3) << "ids repeat: zstd should shrink it";
  hproto::OplogBatch back;
  ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, bytes, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), b.SerializeAsString());

  // Small messages stay as they are.
  hproto::OplogBatch small;
  small.add_mutations()->set_object_erased("k");
  EXPECT_EQ(EncodeRecord(RecordKind::kBatch, small)[6], 0);
}

TEST(RecordFraming, ACorruptCompressedRecordIsRefused) {
  const std::string bytes = EncodeRecord(RecordKind::kBatch, ManyObjects(100));
  ASSERT_EQ(static_cast<uint8_t>(bytes[6]), static_cast<uint8_t>(RecordEncoding::kZstdFrame));
  hproto::OplogBatch back;
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x21);
    const absl::Status s = DecodeRecord(RecordKind::kBatch, bad, &back);
    EXPECT_TRUE(absl::IsDataLoss(s)) << "byte " << i << ": " << s;
  }
  // A frame that passes the record's checksum but not its own checks (the
  // record resealed around a damaged chunk) is refused by the frame.
  std::string payload = bytes.substr(kRecordHeaderBytes);
  payload[payload.size() - 3] = static_cast<char>(payload[payload.size() - 3] ^ 0x40);
  std::string resealed = bytes.substr(0, kRecordHeaderBytes) + payload;
  records_internal::PutLe64(resealed.data() + 16,
                            StableHash64(payload, static_cast<uint64_t>(RecordKind::kBatch)));
  const absl::Status s = DecodeRecord(RecordKind::kBatch, resealed, &back);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("frame"), absl::string_view::npos) << s;
  // An unknown encoding.
  std::string unknown = bytes;
  unknown[6] = 2;
  EXPECT_TRUE(absl::IsDataLoss(DecodeRecord(RecordKind::kBatch, unknown, &back)));
}

// Records written before encodings (byte 6 = 0, the proto as is) still read.
TEST(RecordFraming, RawRecordsOfEveryEarlierBuildStillDecode) {
  const hproto::OplogBatch b = ManyObjects(50);
  const std::string payload = b.SerializeAsString();
  std::string raw(kRecordHeaderBytes, '\0');
  std::memcpy(raw.data(), kRecordMagic, 4);
  raw[4] = static_cast<char>(kRecordVersion);
  raw[5] = static_cast<char>(RecordKind::kBatch);
  records_internal::PutLe64(raw.data() + 8, payload.size());
  records_internal::PutLe64(raw.data() + 16,
                            StableHash64(payload, static_cast<uint64_t>(RecordKind::kBatch)));
  raw += payload;
  hproto::OplogBatch back;
  ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, raw, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), payload);
}

// Regression (tools/chaos, seed 42): a block key (0x00 'b' + raw hash bytes)
// is not UTF-8; as proto `string` fields the oplog wrote it but refused to
// parse it back, so no standby could restore and a restarted master exited
// with DATA_LOSS.
TEST(RecordFraming, BinaryBlockKeysThatAreNotUtf8RoundTrip) {
  const std::string key =
      std::string("\0b\xff\xfe\x80\xc0\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\xfd\xfc", 18);
  const std::string replacement = std::string("\0r", 2) + key;
  hproto::OplogBatch b;
  b.set_seq(1);
  b.add_mutations()->mutable_object_set()->set_key(replacement);
  b.add_mutations()->set_object_erased(key);
  hproto::ObjectReplaced* r = b.add_mutations()->mutable_object_replaced();
  r->mutable_object()->set_key(key);
  r->set_replacement_key(replacement);
  const std::string bytes = EncodeRecord(RecordKind::kBatch, b);
  hproto::OplogBatch back;
  ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, bytes, &back).ok());
  EXPECT_EQ(back.mutations(0).object_set().key(), replacement);
  EXPECT_EQ(back.mutations(1).object_erased(), key);
  EXPECT_EQ(back.mutations(2).object_replaced().object().key(), key);
  EXPECT_EQ(back.mutations(2).object_replaced().replacement_key(), replacement);
}

TEST(ReplayState, AppliesInOrderAndRefusesGaps) {
  ReplayState r;
  hproto::OplogBatch b;
  b.set_seq(2);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.Apply(b)));
  b.set_seq(1);
  hproto::ObjectRecord* o = b.add_mutations()->mutable_object_set();
  o->set_key("a");
  o->set_size_bytes(10);
  ASSERT_TRUE(r.Apply(b).ok());
  EXPECT_EQ(r.objects(), 1u);
  EXPECT_EQ(r.next_seq(), 2u);
  hproto::Snapshot s = r.ToSnapshot(1);
  ReplayState r2;
  r2.Load(s);
  EXPECT_EQ(r2.next_seq(), 2u);
  ASSERT_NE(r2.Find("a"), nullptr);
}

hproto::ObjectRecord TenantObject(const std::string& key, const std::string& tenant,
                                  uint64_t offset) {
  hproto::ObjectRecord o;
  o.set_key(key);
  o.set_committed(true);
  o.set_size_bytes(4096);
  o.set_tenant(tenant);
  hproto::ReplicaRecord* r = o.add_replicas();
  r->set_segment_id(7);
  r->set_offset(offset);
  r->set_length(4096);
  r->set_complete(true);
  return o;
}

// A record names its value's checksum format; one no master knows is refused,
// not restored into an object whose bytes no reader could verify.
TEST(RecordFields, AnUnknownChecksumFormatIsRefused) {
  hproto::ObjectRecord o = TenantObject("k", "", 0);
  o.set_checksum_format(store::proto::CHECKSUM_XXH3_CHUNKED);
  absl::StatusOr<master::RestoredObject> ok = FromRecord(o, ClockPair{});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->meta.checksum_format, store::proto::CHECKSUM_XXH3_CHUNKED);
  o.set_checksum_format(257);
  absl::StatusOr<master::RestoredObject> bad = FromRecord(o, ClockPair{});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("checksum_format 257"), std::string::npos) << bad.status();
}

// The ranges tenants' objects leave are kept for the hold window from their
// batch's time (a live write capability may still reach them), carried by
// snapshots, handed to Restore with their ends on the restoring clock, and
// forgotten once over; the default tenant's are not held.
TEST(ReplayState, RangesTenantsObjectsLeaveAreHeldForTheWindow) {
  constexpr int64_t kSec = 1'000'000'000;
  constexpr int64_t kWindow = 3 * kSec;
  ReplayState r(kWindow, "default");
  uint64_t seq = 1;
  const auto apply = [&](int64_t unix_ns, auto&& fill) {
    hproto::OplogBatch b;
    b.set_seq(seq++);
    b.set_unix_ns(unix_ns);
    fill(b);
    ASSERT_TRUE(r.Apply(b).ok());
  };
  apply(100 * kSec, [](hproto::OplogBatch& b) {
    *b.add_mutations()->mutable_object_set() = TenantObject("a", "alice", 0);
    *b.add_mutations()->mutable_object_set() = TenantObject("d", "default", 4096);
    *b.add_mutations()->mutable_object_set() = TenantObject("m", "alice", 8192);
  });
  EXPECT_TRUE(r.held().empty());
  apply(101 * kSec, [](hproto::OplogBatch& b) {
    b.add_mutations()->set_object_erased("a");
    b.add_mutations()->set_object_erased("d");
    // "m" moves to another range: its old one is left.
    *b.add_mutations()->mutable_object_set() = TenantObject("m", "alice", 65536);
    // Committing again with the same range leaves nothing.
    *b.add_mutations()->mutable_object_set() = TenantObject("m", "alice", 65536);
  });
  ASSERT_EQ(r.held().size(), 2u);
  EXPECT_EQ(r.held()[0].offset(), 0u);
  EXPECT_EQ(r.held()[1].offset(), 8192u);
  EXPECT_EQ(r.held()[0].until_unix_ns(), 104 * kSec);

  // A snapshot carries them; one taken after their end does not.
  ReplayState loaded(kWindow, "default");
  loaded.Load(r.ToSnapshot(102 * kSec));
  EXPECT_EQ(loaded.held().size(), 2u);
  ReplayState late(kWindow, "default");
  late.Load(r.ToSnapshot(104 * kSec));
  EXPECT_TRUE(late.held().empty());

  // Restore gets them on its own clock: unix 102 s is mono 5 s here.
  std::vector<master::RestoredSegment> segs;
  std::vector<master::RestoredObject> objs;
  std::vector<master::RestoredHold> holds;
  uint64_t bad = 0;
  r.ToRestore(ClockPair{5 * kSec, 102 * kSec}, &segs, &objs, &bad, &holds);
  ASSERT_EQ(holds.size(), 2u);
  EXPECT_EQ(holds[0].segment_id, 7u);
  EXPECT_EQ(holds[0].length, 4096u);
  EXPECT_EQ(holds[0].until_ns, 7 * kSec);
  holds.clear();
  r.ToRestore(ClockPair{5 * kSec, 104 * kSec}, &segs, &objs, &bad, &holds);
  EXPECT_TRUE(holds.empty());

  // A later batch drops what ended before it.
  apply(105 * kSec, [](hproto::OplogBatch&) {});
  EXPECT_TRUE(r.held().empty());

  // Without a window nothing is kept.
  ReplayState off;
  hproto::OplogBatch b;
  b.set_seq(1);
  b.set_unix_ns(100 * kSec);
  *b.add_mutations()->mutable_object_set() = TenantObject("a", "alice", 0);
  b.add_mutations()->set_object_erased("a");
  ASSERT_TRUE(off.Apply(b).ok());
  EXPECT_TRUE(off.held().empty());
}

// A leader master logs through an OplogWriter into a fake store; a second
// master restored from the replayed log serves the same objects.
class ReplayToRestore : public ::testing::Test {
 protected:
  using M = master::Master<>;

  void SetUp() override {
    master::MasterOptions o;
    o.put_timeout_ms = 60'000;
    leader_ = *M::Create(o, &clock_);
    writer_ = std::make_unique<OplogWriter>(
        /*epoch=*/5, /*first_seq=*/1, &clock_,
        [this](uint64_t seq, std::string_view bytes) {
          MutexLock lock(&mu_);
          stored_.emplace_back(seq, std::string(bytes));
          return absl::OkStatus();
        },
        nullptr, nullptr, [this] { return leader_->NextId(); });
    leader_->SetMutationLog(writer_.get());
    writer_->Start();
  }

  void Flush() {
    Mutex done_mu;
    bool done = false;
    writer_->WhenDurable(writer_->appended(), [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      MutexLock lock(&done_mu);
      done = true;
    });
    MutexLock lock(&done_mu);
    done_mu.Await(Condition(&done));
  }

  ReplayState Replay() {
    Flush();
    ReplayState r;
    MutexLock lock(&mu_);
    for (const auto& [seq, bytes] : stored_) {
      hproto::OplogBatch b;
      EXPECT_TRUE(DecodeRecord(RecordKind::kBatch, bytes, &b).ok());
      EXPECT_EQ(b.seq(), seq);
      EXPECT_TRUE(r.Apply(b).ok());
    }
    return r;
  }

  std::unique_ptr<M> Restored(const ReplayState& r, master::RestoreReport* report) {
    master::MasterOptions o;
    o.put_timeout_ms = 60'000;
    auto m = *M::Create(o, &clock_);
    std::vector<master::RestoredSegment> segs;
    std::vector<master::RestoredObject> objs;
    uint64_t bad = 0;
    r.ToRestore(ClockPair{clock_.NowNs(), 1'000'000'000'000}, &segs, &objs, &bad);
    EXPECT_EQ(bad, 0u);
    auto rep = m->Restore(std::move(segs), std::move(objs), r.next_id());
    EXPECT_TRUE(rep.ok()) << rep.status();
    if (rep.ok()) *report = *rep;
    return m;
  }

  FakeClock clock_;
  std::unique_ptr<M> leader_;
  std::unique_ptr<OplogWriter> writer_;
  Mutex mu_;
  std::vector<std::pair<uint64_t, std::string>> stored_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ReplayToRestore, CommittedRemovedAndPendingObjectsComeBack) {
  ASSERT_TRUE(leader_->MountSegment(MountReq("w1", 1 << 20)).ok());
  ASSERT_TRUE(leader_->MountSegment(MountReq("w2", 1 << 20)).ok());
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    const std::string k = "key-" + std::to_string(i);
    auto s = leader_->PutStart(PutReq(k, 1000 + static_cast<uint64_t>(i), 2));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(leader_->PutEnd(EndReq(k, s->put_id())).ok());
    keys.push_back(k);
  }
  for (int i = 0; i < 40; i += 4) {
    sp::RemoveRequest rr;
    rr.set_key(keys[static_cast<size_t>(i)]);
    ASSERT_TRUE(leader_->Remove(rr).ok());
  }
  auto pending = leader_->PutStart(PutReq("pending", 4096));
  ASSERT_TRUE(pending.ok());

  ReplayState r = Replay();
  master::RestoreReport report;
  auto follower = Restored(r, &report);
  EXPECT_EQ(report.segments, 2u);
  EXPECT_EQ(report.objects, 30u);
  EXPECT_EQ(report.pending, 1u);
  EXPECT_EQ(report.dropped_replicas, 0u);
  for (int i = 0; i < 40; ++i) {
    sp::GetReplicasRequest g;
    g.set_key(keys[static_cast<size_t>(i)]);
    auto a = leader_->GetReplicas(g);
    auto b = follower->GetReplicas(g);
    ASSERT_EQ(a.ok(), b.ok()) << keys[static_cast<size_t>(i)];
    if (!a.ok()) {
      EXPECT_EQ(i % 4, 0);
      continue;
    }
    ASSERT_EQ(a->replicas_size(), b->replicas_size());
    for (int j = 0; j < a->replicas_size(); ++j) {
      EXPECT_EQ(a->replicas(j).segment_id(), b->replicas(j).segment_id());
      EXPECT_EQ(a->replicas(j).offset(), b->replicas(j).offset());
      EXPECT_EQ(a->replicas(j).length(), b->replicas(j).length());
    }
    EXPECT_EQ(a->object().version(), b->object().version());
  }
  // The writer's PutEnd, retried at the new leader, commits the pending put.
  auto end = follower->PutEnd(EndReq("pending", pending->put_id()));
  ASSERT_TRUE(end.ok()) << end.status();
  // New puts never land on restored ranges, and ids continue after the old ones.
  EXPECT_GT(follower->NextId(), pending->put_id());
  const master::MasterStats before = follower->Stats();
  for (int i = 0; i < 50; ++i) {
    auto s = follower->PutStart(PutReq("new-" + std::to_string(i), 8192));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(follower->PutEnd(EndReq("new-" + std::to_string(i), s->put_id())).ok());
  }
  EXPECT_EQ(follower->Stats().objects, before.objects + 50);
  EXPECT_EQ(follower->Stats().used_bytes, before.used_bytes + 50 * 8192);
}

TEST_F(ReplayToRestore, APutStartSentAgainGetsTheSamePutEvenAtTheNewLeader) {
  ASSERT_TRUE(leader_->MountSegment(MountReq("w1", 1 << 20)).ok());
  sp::PutStartRequest req = PutReq("k", 3000);
  req.set_request_id(77);
  auto first = leader_->PutStart(req);
  ASSERT_TRUE(first.ok());
  auto again = leader_->PutStart(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->put_id(), first->put_id());
  ASSERT_EQ(again->replicas_size(), 1);
  EXPECT_EQ(again->replicas(0).offset(), first->replicas(0).offset());
  sp::PutStartRequest other = req;
  other.set_request_id(78);
  EXPECT_TRUE(absl::IsAlreadyExists(leader_->PutStart(other).status()));
  EXPECT_EQ(leader_->Stats().pending_puts, 1);

  master::RestoreReport report;
  auto follower = Restored(Replay(), &report);
  auto resent = follower->PutStart(req);  // the channel resends it at the new leader
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_EQ(resent->put_id(), first->put_id());
  EXPECT_EQ(resent->replicas(0).offset(), first->replicas(0).offset());
  ASSERT_TRUE(follower->PutEnd(EndReq("k", first->put_id())).ok());
}

// A leader may die after any batch: every prefix of the log must hold a
// replaced key whole (the old version or the new one, never neither).
// A new leader keeps held ranges out of puts until their end, then frees
// them; a hold already over, or on a segment it does not know, is dropped.
TEST_F(ReplayToRestore, HeldRangesStayOutOfPutsUntilTheirEnd) {
  ASSERT_TRUE(leader_->MountSegment(MountReq("w1", 1 << 20)).ok());
  ReplayState r = Replay();
  master::MasterOptions o;
  o.put_timeout_ms = 60'000;
  o.membership.heartbeat_timeout_ms = 60'000;  // the worker stays without heartbeats
  auto m = *M::Create(o, &clock_);
  std::vector<master::RestoredSegment> segs;
  std::vector<master::RestoredObject> objs;
  uint64_t bad = 0;
  r.ToRestore(ClockPair{clock_.NowNs(), 1'000'000'000'000}, &segs, &objs, &bad);
  ASSERT_EQ(segs.size(), 1u);
  const uint64_t seg = segs[0].id;
  const int64_t now = clock_.NowNs();
  std::vector<master::RestoredHold> holds = {{seg, 0, 1 << 20, now + 5'000'000'000},
                                             {seg, 0, 4096, now},
                                             {seg + 100, 0, 4096, now + 5'000'000'000}};
  auto rep = m->Restore(std::move(segs), std::move(objs), r.next_id(), std::move(holds));
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->held_ranges, 1u);
  EXPECT_EQ(rep->dropped_holds, 2u);
  // The whole segment is held: no room for a put.
  EXPECT_FALSE(m->PutStart(PutReq("x", 4096)).ok());
  clock_.AdvanceMs(4'000);
  m->Tick();
  EXPECT_FALSE(m->PutStart(PutReq("x", 4096)).ok());
  clock_.AdvanceMs(1'001);
  m->Tick();
  auto s = m->PutStart(PutReq("x", 4096));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(m->PutEnd(EndReq("x", s->put_id())).ok());
}

TEST(ReplayPrefixes, AReplaceIsNeverHalfInTheLog) {
  FakeClock clock;
  master::MasterOptions mo;
  auto m = *master::Master<>::Create(mo, &clock);
  Mutex mu;
  std::vector<std::string> stored;
  OplogWriterOptions o;
  o.max_batch_bytes = 1;  // one report per batch: every cut the log can have
  OplogWriter w(
      2, 1, &clock,
      [&](uint64_t, std::string_view bytes) {
        MutexLock lock(&mu);
        stored.emplace_back(bytes);
        return absl::OkStatus();
      },
      nullptr, nullptr, [&] { return m->NextId(); }, o);
  m->SetMutationLog(&w);
  w.Start();
  ASSERT_TRUE(m->MountSegment(MountReq("w1", 1 << 20)).ok());
  auto s1 = m->PutStart(PutReq("a", 1000));
  ASSERT_TRUE(s1.ok());
  ASSERT_TRUE(m->PutEnd(EndReq("a", s1->put_id())).ok());
  const uint64_t committed_at = w.appended();
  sp::PutStartRequest rep = PutReq("a", 2000);
  rep.mutable_options()->set_replace(true);
  auto s2 = m->PutStart(rep);
  ASSERT_TRUE(s2.ok()) << s2.status();
  ASSERT_TRUE(m->PutEnd(EndReq("a", s2->put_id())).ok());
  while (w.durable() < w.appended()) absl::SleepFor(absl::Milliseconds(1));
  MutexLock lock(&mu);
  ASSERT_GT(stored.size(), committed_at);
  for (size_t n = committed_at; n <= stored.size(); ++n) {
    ReplayState r;
    for (size_t i = 0; i < n; ++i) {
      hproto::OplogBatch b;
      ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, stored[i], &b).ok());
      ASSERT_TRUE(r.Apply(b).ok());
    }
    const hproto::ObjectRecord* a = r.Find("a");
    ASSERT_NE(a, nullptr) << "after " << n << " batches";
    EXPECT_TRUE(a->committed());
  }
  ReplayState all;
  for (const std::string& bytes : stored) {
    hproto::OplogBatch b;
    ASSERT_TRUE(DecodeRecord(RecordKind::kBatch, bytes, &b).ok());
    ASSERT_TRUE(all.Apply(b).ok());
  }
  EXPECT_EQ(all.Find("a")->size_bytes(), 2000u);
  EXPECT_EQ(all.objects(), 1u);  // the pending replacement left with the commit
}

TEST_F(ReplayToRestore, UnmountedSegmentAndReplaceAreReplayed) {
  ASSERT_TRUE(leader_->MountSegment(MountReq("w1", 1 << 20)).ok());
  auto m2 = leader_->MountSegment(MountReq("w2", 1 << 20));
  ASSERT_TRUE(m2.ok());
  auto s = leader_->PutStart(PutReq("a", 5000, 2));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(leader_->PutEnd(EndReq("a", s->put_id())).ok());
  // Replace "a" with a new version.
  sp::PutStartRequest rep = PutReq("a", 7000, 1);
  rep.mutable_options()->set_replace(true);
  auto s2 = leader_->PutStart(rep);
  ASSERT_TRUE(s2.ok()) << s2.status();
  ASSERT_TRUE(leader_->PutEnd(EndReq("a", s2->put_id())).ok());
  sp::UnmountSegmentRequest u;
  u.set_worker_id("w2");
  u.set_segment_id(m2->segment_id());
  ASSERT_TRUE(leader_->UnmountSegment(u).ok());

  ReplayState r = Replay();
  EXPECT_EQ(r.segments(), 1u);
  master::RestoreReport report;
  auto follower = Restored(r, &report);
  sp::GetReplicasRequest g;
  g.set_key("a");
  auto a = leader_->GetReplicas(g);
  auto b = follower->GetReplicas(g);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->object().size_bytes(), 7000u);
  EXPECT_EQ(a->object().version(), b->object().version());
  EXPECT_EQ(a->replicas_size(), b->replicas_size());
}

TEST(OplogWriterOrder, BatchesLandingOutOfOrderAreAcknowledgedInOrder) {
  FakeClock clock;
  Mutex mu;
  bool release_first = false;
  std::vector<uint64_t> delivered;
  OplogWriterOptions o;
  o.batches_in_flight = 3;
  OplogWriter w(
      3, 1, &clock,
      [&](uint64_t seq, std::string_view) {
        if (seq == 1) {  // the first batch is stored last
          MutexLock lock(&mu);
          mu.Await(Condition(&release_first));
        }
        return absl::OkStatus();
      },
      [&](hproto::OplogBatch&& b) {
        MutexLock lock(&mu);
        delivered.push_back(b.seq());
      },
      nullptr, nullptr, o);
  w.Start();
  std::atomic<int> acked{0};
  w.ObjectErased("a");
  w.WhenDurable(1, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    acked.fetch_add(1);
  });
  // Wait until batch 1 is being stored, then queue more: they go in batch 2+.
  while (w.next_seq() < 2) absl::SleepFor(absl::Milliseconds(1));
  w.ObjectErased("b");
  w.WhenDurable(2, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    acked.fetch_add(1);
  });
  while (w.stats().batches < 1) absl::SleepFor(absl::Milliseconds(1));  // batch 2 stored
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(acked.load(), 0);  // batch 2 is stored, but batch 1 is not
  EXPECT_EQ(w.durable(), 0u);
  {
    MutexLock lock(&mu);
    EXPECT_TRUE(delivered.empty());
    release_first = true;
  }
  while (acked.load() < 2) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(w.durable(), 2u);
  MutexLock lock(&mu);
  EXPECT_EQ(delivered, (std::vector<uint64_t>{1, 2}));
}

TEST_F(ReplayToRestore, AFencedWriterFailsItsWaiters) {
  auto fenced = std::make_unique<OplogWriter>(
      9, 1, &clock_,
      [](uint64_t, std::string_view) { return absl::FailedPreconditionError("fenced"); }, nullptr,
      nullptr, nullptr);
  fenced->Start();
  fenced->ObjectErased("x");
  Mutex mu;
  std::optional<absl::Status> got;
  fenced->WhenDurable(fenced->appended(), [&](absl::Status s) {
    MutexLock lock(&mu);
    got = s;
  });
  MutexLock lock(&mu);
  mu.Await(Condition(
      +[](std::optional<absl::Status>* g) { return g->has_value(); }, &got));
  EXPECT_TRUE(absl::IsUnavailable(*got)) << *got;
}

}  // namespace
}  // namespace mooncake::ha

namespace mooncake::ha {
namespace {

// Regression (records_fuzz, 2026-12-06): a record's far deadline overflowed
// the clock shift (signed overflow, UBSan). Shifts now saturate, and a
// deadline stays "some time" (>= 1), never "none" (0).
TEST(ClockPairTest, ShiftsSaturateInsteadOfOverflowing) {
  const ClockPair clock{.mono_ns = 5'000'000'000, .unix_ns = 1'700'000'000'000'000'000};
  EXPECT_EQ(clock.ToMono(0), 0);
  EXPECT_EQ(clock.ToUnix(0), 0);
  EXPECT_EQ(clock.ToMono(1'700'000'001'000'000'000), 6'000'000'000);
  EXPECT_EQ(clock.ToUnix(6'000'000'000), 1'700'000'001'000'000'000);
  EXPECT_EQ(clock.ToMono(std::numeric_limits<int64_t>::min()), 1);
  EXPECT_EQ(clock.ToMono(-8'065'929'340'433'461'232), 1);
  EXPECT_EQ(clock.ToUnix(std::numeric_limits<int64_t>::max()), std::numeric_limits<int64_t>::max());
  const ClockPair odd{.mono_ns = std::numeric_limits<int64_t>::min(), .unix_ns = 0};
  EXPECT_EQ(odd.ToMono(std::numeric_limits<int64_t>::max()), 1);
  EXPECT_EQ(odd.ToUnix(1), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace mooncake::ha
