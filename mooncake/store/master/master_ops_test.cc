// Master: replace (upsert), pins with a TTL, preferred segments by name,
// Remove of leased objects and RemoveAll.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {

// Only the helpers of master_testing.h are used here.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

namespace {

using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::MountReq;
using testing_internal::PutReq;

class MasterOpsTest : public MasterFixture {
 protected:
  static proto::PutStartRequest Replace(const std::string& key, uint64_t size) {
    proto::PutStartRequest r = PutReq(key, size);
    r.mutable_options()->set_replace(true);
    return r;
  }
  uint64_t SizeOf(const std::string& key) {
    auto g = master_->GetReplicas(GetReq(key));
    if (!g.ok()) return 0;
    Release(g->lease().lease_id());
    return g->object().size_bytes();
  }
};

// ---- Replace ---------------------------------------------------------------

TEST_F(MasterOpsTest, ReplaceKeepsTheOldVersionReadableUntilItsPutEnd) {
  Mount("w1");
  const uint64_t v1 = Put(PutReq("k", 100));
  ASSERT_NE(v1, 0u);
  auto start = master_->PutStart(Replace("k", 200));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(SizeOf("k"), 100u) << "readers see the committed version while the replace is pending";
  EXPECT_TRUE(Exists("k"));
  EXPECT_EQ(master_->Stats().objects, 1);
  EXPECT_EQ(master_->Stats().pending_puts, 1);
  auto end = master_->PutEnd(EndReq("k", start->put_id()));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_GT(end->object().version(), v1);
  EXPECT_EQ(SizeOf("k"), 200u);
  EXPECT_EQ(master_->Stats().objects, 1);
  EXPECT_EQ(master_->Stats().pending_puts, 0);
  EXPECT_EQ(master_->Stats().used_bytes, 200u) << "the old version's space was freed";
  // A retried PutEnd gets the same answer; the key still refuses a plain put.
  auto again = master_->PutEnd(EndReq("k", start->put_id()));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->object().version(), end->object().version());
  EXPECT_TRUE(absl::IsAlreadyExists(master_->PutStart(PutReq("k", 100)).status()));
}

TEST_F(MasterOpsTest, ReplaceOfAMissingKeyIsAPlainPut) {
  Mount("w1");
  ASSERT_NE(Put(Replace("k", 100)), 0u);
  EXPECT_EQ(SizeOf("k"), 100u);
  EXPECT_EQ(master_->Stats().objects, 1);
}

TEST_F(MasterOpsTest, ReplacedLeasedVersionIsFreedWhenItsLeaseEnds) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 4096)), 0u);
  auto get = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(get.ok());
  auto start = master_->PutStart(Replace("k", 4096));
  ASSERT_TRUE(start.ok());
  EXPECT_NE(start->replicas(0).offset(), get->replicas(0).offset());
  ASSERT_TRUE(master_->PutEnd(EndReq("k", start->put_id())).ok());
  EXPECT_EQ(master_->Stats().used_bytes, 2 * 4096u) << "the leased old version waits";
  EXPECT_EQ(master_->Stats().deferred_frees, 1u);
  Release(get->lease().lease_id());
  EXPECT_EQ(master_->Stats().used_bytes, 4096u);
  EXPECT_EQ(master_->Stats().deferred_frees, 0u);
}

TEST_F(MasterOpsTest, SecondPutStartOfAKeyBeingReplacedIsAlreadyExists) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  auto first = master_->PutStart(Replace("k", 200));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(master_->PutStart(Replace("k", 300)).status()));
  EXPECT_TRUE(absl::IsAlreadyExists(master_->PutStart(PutReq("k", 300)).status()));
  // Removed meanwhile: the key is free, but the replace still holds it.
  ASSERT_TRUE(Remove("k").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(master_->PutStart(PutReq("k", 300)).status()));
  proto::PutRevokeRequest rv;
  rv.set_key("k");
  rv.set_put_id(first->put_id());
  ASSERT_TRUE(master_->PutRevoke(rv).ok());
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  EXPECT_EQ(master_->Stats().pending_puts, 0);
  ASSERT_NE(Put(Replace("k", 300)), 0u);
  EXPECT_EQ(SizeOf("k"), 300u);
}

TEST_F(MasterOpsTest, ReplaceWaitsForAPendingPlainPut) {
  Mount("w1");
  auto plain = master_->PutStart(PutReq("k", 100));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(master_->PutStart(Replace("k", 200)).status()));
}

TEST_F(MasterOpsTest, ReplaceDoesNotCrossTenants) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  proto::PutStartRequest r = Replace("k", 200);
  r.mutable_options()->set_tenant("other");
  EXPECT_TRUE(absl::IsAlreadyExists(master_->PutStart(r).status()));
  EXPECT_EQ(SizeOf("k"), 100u);
}

TEST_F(MasterOpsTest, AbandonedReplaceTimesOutAndLeavesTheOldVersion) {
  MasterOptions o;
  o.put_timeout_ms = 1000;
  o.timed_out_put_hold_ms = 0;
  Make(o);
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  auto start = master_->PutStart(Replace("k", 200));
  ASSERT_TRUE(start.ok());
  clock_.AdvanceMs(1001);
  EXPECT_EQ(master_->Tick().puts_timed_out, 1u);
  // The key's committed version is another put's: stale.
  EXPECT_TRUE(absl::IsFailedPrecondition(master_->PutEnd(EndReq("k", start->put_id())).status()));
  EXPECT_EQ(SizeOf("k"), 100u);
  EXPECT_EQ(master_->Stats().pending_puts, 0);
  EXPECT_EQ(master_->Stats().used_bytes, 100u);
}

TEST_F(MasterOpsTest, ReplaceWhoseWorkerLeftAbortsAndKeepsTheOldVersion) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  const uint64_t w2 = Mount("w2");
  proto::PutStartRequest r = Replace("k", 200);
  r.mutable_options()->set_preferred_segment_id(w2);
  auto start = master_->PutStart(r);
  ASSERT_TRUE(start.ok());
  ASSERT_EQ(start->replicas(0).segment_id(), w2);
  proto::UnmountSegmentRequest un;
  un.set_worker_id("w2");
  un.set_segment_id(w2);
  ASSERT_TRUE(master_->UnmountSegment(un).ok());
  EXPECT_TRUE(absl::IsAborted(master_->PutEnd(EndReq("k", start->put_id())).status()));
  EXPECT_EQ(SizeOf("k"), 100u);
  EXPECT_EQ(master_->Stats().pending_puts, 0);
}

// ---- Pins with a TTL ---------------------------------------------------------

TEST_F(MasterOpsTest, SoftPinLapsesAfterItsTtl) {
  Mount("w1", "seg0", 4 * 4096);
  proto::PutStartRequest soft = PutReq("soft", 4096);
  soft.mutable_options()->set_pin(proto::PIN_SOFT);
  soft.mutable_options()->set_pin_ttl_ms(1000);
  ASSERT_NE(Put(soft), 0u);
  ASSERT_NE(Put(PutReq("u0", 4096)), 0u);
  proto::PutStartRequest hard = PutReq("h0", 4096);
  hard.mutable_options()->set_pin(proto::PIN_HARD);
  ASSERT_NE(Put(hard), 0u);
  hard.set_key("h1");
  ASSERT_NE(Put(hard), 0u);
  // Full. While pinned, the older soft-pinned object is passed over for u0.
  ASSERT_NE(Put(PutReq("n0", 4096)), 0u);
  EXPECT_TRUE(Exists("soft"));
  EXPECT_FALSE(Exists("u0"));
  clock_.AdvanceMs(1000);
  // Lapsed: it goes before the newer unpinned n0.
  hard.set_key("n1");
  ASSERT_NE(Put(hard), 0u);
  EXPECT_FALSE(Exists("soft"));
  EXPECT_TRUE(Exists("n0"));
}

TEST_F(MasterOpsTest, LapsedSoftPinNeedsNoForceToRemove) {
  Mount("w1");
  proto::PutStartRequest soft = PutReq("soft", 100);
  soft.mutable_options()->set_pin(proto::PIN_SOFT);
  soft.mutable_options()->set_pin_ttl_ms(1000);
  ASSERT_NE(Put(soft), 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(Remove("soft")));
  clock_.AdvanceMs(1000);
  EXPECT_TRUE(Remove("soft").ok());
}

TEST_F(MasterOpsTest, HardPinWithATtlIsInvalid) {
  Mount("w1");
  proto::PutStartRequest hard = PutReq("hard", 100);
  hard.mutable_options()->set_pin(proto::PIN_HARD);
  hard.mutable_options()->set_pin_ttl_ms(1000);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->PutStart(hard).status()));
}

TEST_F(MasterOpsTest, KeepPinCarriesThePinAndItsExpiryToTheNewVersion) {
  Mount("w1", "seg0", 4 * 4096);
  proto::PutStartRequest soft = PutReq("k", 4096);
  soft.mutable_options()->set_pin(proto::PIN_SOFT);
  soft.mutable_options()->set_pin_ttl_ms(1000);
  ASSERT_NE(Put(soft), 0u);
  clock_.AdvanceMs(600);
  proto::PutStartRequest keep = Replace("k", 4096);
  keep.mutable_options()->set_keep_pin(true);
  keep.mutable_options()->set_pin(proto::PIN_HARD);  // ignored: keep_pin
  ASSERT_NE(Put(keep), 0u);
  EXPECT_TRUE(absl::IsFailedPrecondition(Remove("k"))) << "still soft-pinned";
  for (int i = 0; i < 3; ++i) ASSERT_NE(Put(PutReq("u" + std::to_string(i), 4096)), 0u);
  ASSERT_NE(Put(PutReq("n0", 4096)), 0u);
  EXPECT_TRUE(Exists("k"));
  clock_.AdvanceMs(400);  // the first version's pin expiry, not 1000 ms after the replace
  EXPECT_TRUE(Remove("k").ok());
}

TEST_F(MasterOpsTest, KeepPinOnAnUnpinnedOrNewKeyPinsNothing) {
  Mount("w1");
  proto::PutStartRequest keep = Replace("new", 100);
  keep.mutable_options()->set_keep_pin(true);
  keep.mutable_options()->set_pin(proto::PIN_HARD);
  ASSERT_NE(Put(keep), 0u);
  EXPECT_TRUE(Remove("new").ok()) << "a new key takes no pin";
  ASSERT_NE(Put(PutReq("plain", 100)), 0u);
  keep.set_key("plain");
  ASSERT_NE(Put(keep), 0u);
  EXPECT_TRUE(Remove("plain").ok());
}

TEST_F(MasterOpsTest, ReplaceOfAHardPinnedObjectMovesItsPinnedCharge) {
  MasterOptions o;
  o.tenants.push_back({"t", 1 << 20, 2 * 4096});
  Make(o);
  Mount("w1");
  proto::PutStartRequest hard = PutReq("k", 4096);
  hard.mutable_options()->set_pin(proto::PIN_HARD);
  hard.mutable_options()->set_tenant("t");
  ASSERT_NE(Put(hard), 0u);
  proto::PutStartRequest keep = Replace("k", 4096);
  keep.mutable_options()->set_keep_pin(true);
  keep.mutable_options()->set_tenant("t");
  ASSERT_NE(Put(keep), 0u);
  ASSERT_NE(Put(keep), 0u);  // would exceed the pinned quota if the old charge stayed
  EXPECT_EQ(master_->TenantUsage("t")->used_bytes, 4096u);
}

// ---- Remove of leased objects ------------------------------------------------

TEST_F(MasterOpsTest, RemoveRefusingLeasedObjectsIsAbortedUntilTheLeaseEnds) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  proto::GetReplicasRequest g = GetReq("k");
  g.set_lease_ms(1000);
  auto get = master_->GetReplicas(g);
  ASSERT_TRUE(get.ok());
  const absl::Status refused = Remove("k", /*force=*/false, /*refuse_if_leased=*/true);
  EXPECT_TRUE(absl::IsAborted(refused)) << refused;
  EXPECT_NE(refused.message().find("has a live read lease"), std::string_view::npos);
  EXPECT_TRUE(Exists("k"));
  clock_.AdvanceMs(1000);  // the lease ran out (not yet swept)
  EXPECT_TRUE(Remove("k", false, true).ok());
  EXPECT_FALSE(Exists("k"));
}

TEST_F(MasterOpsTest, RemoveRefusingLeasedObjectsWithForceDefersTheFree) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  auto get = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(get.ok());
  ASSERT_TRUE(Remove("k", /*force=*/true, /*refuse_if_leased=*/true).ok());
  EXPECT_EQ(master_->Stats().deferred_frees, 1u);
  Release(get->lease().lease_id());
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
}

TEST_F(MasterOpsTest, RemoveRefusingLeasedObjectsRemovesAReleasedOne) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  auto get = master_->GetReplicas(GetReq("k"));
  ASSERT_TRUE(get.ok());
  Release(get->lease().lease_id());
  EXPECT_TRUE(Remove("k", false, true).ok());
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
}

// ---- Preferred segments by name ------------------------------------------------

TEST_F(MasterOpsTest, FirstReplicaGoesToTheFirstNamedSegmentThatFits) {
  const uint64_t a = Mount("w1", "alpha");
  const uint64_t b = Mount("w2", "beta", 2 * 4096);
  const uint64_t b2 = Mount("w3", "beta");  // names may repeat across workers
  (void)a;
  proto::PutStartRequest r = PutReq("k1", 4096);
  r.mutable_options()->add_preferred_segment_names("missing");
  r.mutable_options()->add_preferred_segment_names("beta");
  r.mutable_options()->add_preferred_segment_names("alpha");
  auto first = master_->PutStart(r);
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t got = first->replicas(0).segment_id();
  EXPECT_TRUE(got == b || got == b2) << got;
  // Two replicas: the first on a "beta", the second where placement puts it.
  r.set_key("k2");
  r.mutable_options()->set_replica_count(2);
  auto two = master_->PutStart(r);
  ASSERT_TRUE(two.ok()) << two.status();
  const uint64_t s0 = two->replicas(0).segment_id();
  EXPECT_TRUE(s0 == b || s0 == b2) << s0;
}

TEST_F(MasterOpsTest, NamedSegmentWithoutRoomFallsBackToTheNextNameThenPlacement) {
  const uint64_t small = Mount("w1", "small", 4096);
  const uint64_t big = Mount("w2", "big");
  Mount("w3", "other");
  proto::PutStartRequest r = PutReq("k1", 4096);
  r.mutable_options()->add_preferred_segment_names("small");
  r.mutable_options()->add_preferred_segment_names("big");
  ASSERT_EQ(master_->PutStart(r)->replicas(0).segment_id(), small);
  r.set_key("k2");  // "small" is full now
  ASSERT_EQ(master_->PutStart(r)->replicas(0).segment_id(), big);
  r.set_key("k3");
  r.set_size_bytes(2 * kSegmentBytes);  // fits nowhere named: usual placement, which fails
  EXPECT_FALSE(master_->PutStart(r).ok());
  proto::PutStartRequest none = PutReq("k4", 4096);
  none.mutable_options()->add_preferred_segment_names("nowhere");
  EXPECT_TRUE(master_->PutStart(none).ok());
}

TEST_F(MasterOpsTest, TooManyPreferredSegmentNamesIsInvalid) {
  Mount("w1");
  proto::PutStartRequest r = PutReq("k", 100);
  for (size_t i = 0; i <= rpc::kMaxPreferredSegmentNames; ++i) {
    r.mutable_options()->add_preferred_segment_names("n" + std::to_string(i));
  }
  EXPECT_TRUE(absl::IsInvalidArgument(master_->PutStart(r).status()));
}

// ---- RemoveAll -------------------------------------------------------------------

TEST_F(MasterOpsTest, RemoveAllTakesTheTenantsMatchingUnleasedObjects) {
  Mount("w1");
  for (const char* k : {"a/1", "a/2", "b/1", "leased", "pinned"}) {
    proto::PutStartRequest r = PutReq(k, 100);
    if (std::string(k) == "pinned") r.mutable_options()->set_pin(proto::PIN_HARD);
    ASSERT_NE(Put(r), 0u) << k;
  }
  proto::PutStartRequest theirs = PutReq("a/3", 100);
  theirs.mutable_options()->set_tenant("other");
  ASSERT_NE(Put(theirs), 0u);
  auto pending = master_->PutStart(PutReq("a/4", 100));
  ASSERT_TRUE(pending.ok());
  auto get = master_->GetReplicas(GetReq("leased"));
  ASSERT_TRUE(get.ok());

  proto::RemoveAllRequest r;
  r.set_key_regex("a/.*");
  auto some = master_->RemoveAll(r);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->removed(), 2u);
  EXPECT_FALSE(some->more());
  EXPECT_FALSE(Exists("a/1"));
  EXPECT_TRUE(Exists("b/1"));
  EXPECT_TRUE(Exists("a/3", "other")) << "another tenant's";
  r.set_key_regex("a");  // a full match is needed
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 0u);

  r.set_key_regex("");
  r.set_force(false);
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 1u) << "b/1; not leased, pinned or pending";
  EXPECT_TRUE(Exists("leased"));
  EXPECT_TRUE(Exists("pinned"));
  r.set_force(true);
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 1u) << "pinned";
  Release(get->lease().lease_id());
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 1u) << "leased no more";
  EXPECT_TRUE(master_->PutEnd(EndReq("a/4", pending->put_id())).ok());
  EXPECT_EQ(master_->Stats().objects, 2) << "a/3 (other) and a/4";
}

TEST_F(MasterOpsTest, RemoveAllRegexNeverMatchesBlockObjectsButEmptyRemovesThem) {
  Mount("w1");
  const std::string block = rpc::BlockObjectKey({1, 2});
  ASSERT_NE(Put(PutReq(block, 100)), 0u);
  ASSERT_NE(Put(PutReq("user", 100)), 0u);
  proto::RemoveAllRequest r;
  r.set_key_regex(".*");
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 1u);
  EXPECT_TRUE(Exists(block));
  r.set_key_regex("");
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 1u);
  EXPECT_FALSE(Exists(block));
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
}

TEST_F(MasterOpsTest, RemoveAllRefusesABadRegexAndAnUnknownTenant) {
  proto::RemoveAllRequest r;
  r.set_key_regex("(unclosed");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->RemoveAll(r).status()));
  r.set_key_regex("");
  r.set_tenant("nobody");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->RemoveAll(r).status()));
  r.set_tenant("");
  r.set_start_shard(8);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->RemoveAll(r).status()));
}

TEST_F(MasterOpsTest, RemoveAllLeavesAPendingReplaceAndItsOldVersionAlone) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 100)), 0u);
  auto start = master_->PutStart(Replace("k", 200));
  ASSERT_TRUE(start.ok());
  proto::RemoveAllRequest r;
  EXPECT_EQ(master_->RemoveAll(r)->removed(), 1u) << "the old version only";
  ASSERT_TRUE(master_->PutEnd(EndReq("k", start->put_id())).ok());
  EXPECT_EQ(SizeOf("k"), 200u);
}

TEST_F(MasterOpsTest, RemoveAllStopsAfterItsBudgetAndResumesFromNextShard) {
  Mount("w1", "seg0", uint64_t{64} << 20);
  const size_t n = 2 * rpc::kRemoveAllObjectsPerCall;
  for (size_t i = 0; i < n; ++i) ASSERT_NE(Put(PutReq("k" + std::to_string(i), 64)), 0u) << i;
  proto::RemoveAllRequest r;
  uint64_t removed = 0;
  int calls = 0;
  for (;;) {
    auto got = master_->RemoveAll(r);
    ASSERT_TRUE(got.ok()) << got.status();
    removed += got->removed();
    ++calls;
    if (!got->more()) break;
    ASSERT_GT(got->next_shard(), r.start_shard());
    r.set_start_shard(got->next_shard());
  }
  EXPECT_EQ(removed, n);
  EXPECT_GT(calls, 1);
  EXPECT_EQ(master_->Stats().objects, 0);
}

// ---- Size without reading ------------------------------------------------------

TEST_F(MasterOpsTest, ExistsAnswersTheSizeWithoutALease) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("k", 1234)), 0u);
  proto::ExistsRequest e;
  e.set_key("k");
  auto got = master_->Exists(e);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->exists());
  EXPECT_EQ(got->size_bytes(), 1234u);
  EXPECT_EQ(master_->Stats().leases, 0u);
  e.set_key("missing");
  EXPECT_EQ(master_->Exists(e)->size_bytes(), 0u);
  e.set_key("k");
  e.set_tenant("other");
  EXPECT_FALSE(master_->Exists(e)->exists());
}

// ---- Write windows (MasterOptions::hold_write_windows) ----------------------

// A tenant's write capability lives until its put's deadline (+1 s), so the
// space of its object removed before then is not handed to another put until
// the window ends; the default tenant's space (no capabilities) is reused at
// once. A master that starts holds every tenant's freed space for a window.
TEST_F(MasterOpsTest, ATenantsRemovedObjectKeepsItsSpaceUntilItsWriteWindowEnds) {
  MasterOptions o;
  o.hold_write_windows = true;
  o.put_timeout_ms = 2'000;                       // windows of 2 s + 1 s
  o.membership.heartbeat_timeout_ms = 1'000'000;  // the worker never heartbeats here
  Make(o);
  Mount("w1");
  const auto put = [&](const std::string& key, const std::string& tenant) -> uint64_t {
    proto::PutStartRequest r = PutReq(key, 4096);
    r.mutable_options()->set_tenant(tenant);
    auto start = master_->PutStart(r);
    EXPECT_TRUE(start.ok()) << start.status();
    if (!start.ok()) return ~uint64_t{0};
    proto::PutEndRequest e = EndReq(key, start->put_id());
    e.set_tenant(tenant);
    EXPECT_TRUE(master_->PutEnd(e).ok());
    return start->replicas(0).offset();
  };
  const auto remove = [&](const std::string& key, const std::string& tenant) {
    proto::RemoveRequest r;
    r.set_key(key);
    r.set_tenant(tenant);
    ASSERT_TRUE(master_->Remove(r).ok());
  };

  // Within the start window every tenant object's space is held.
  put("early", "other");
  remove("early", "other");
  EXPECT_EQ(master_->Stats().deferred_frees, 1u) << "held from the master's start";
  clock_.AdvanceMs(3'001);
  master_->Tick();
  EXPECT_EQ(master_->Stats().deferred_frees, 0u);

  // Past it: the object's own window holds its space, and a new put is
  // given other bytes.
  const uint64_t a = put("a", "other");
  remove("a", "other");
  EXPECT_EQ(master_->Stats().deferred_frees, 1u);
  const uint64_t b = put("b", "other");
  EXPECT_NE(b, a) << "a range still writable by a's writer went to another put";
  clock_.AdvanceMs(2'000);
  master_->Tick();
  EXPECT_EQ(master_->Stats().deferred_frees, 1u) << "a's window is 3 s";
  clock_.AdvanceMs(1'001);
  master_->Tick();
  EXPECT_EQ(master_->Stats().deferred_frees, 0u);
  // Windows end on their own: a removal long after the put holds nothing.
  remove("b", "other");
  EXPECT_EQ(master_->Stats().deferred_frees, 0u);

  // The default tenant gets no capabilities: its space is reused at once.
  const uint64_t d = put("d", "");
  remove("d", "");
  EXPECT_EQ(master_->Stats().deferred_frees, 0u);
  EXPECT_EQ(put("e", ""), d);
}

// Off (the default, a master without tenants' capabilities): freed at once.
TEST_F(MasterOpsTest, WithoutWriteWindowsATenantsSpaceIsReusedAtOnce) {
  Mount("w1");
  proto::PutStartRequest r = PutReq("a", 4096);
  r.mutable_options()->set_tenant("other");
  auto start = master_->PutStart(r);
  ASSERT_TRUE(start.ok());
  proto::PutEndRequest e = EndReq("a", start->put_id());
  e.set_tenant("other");
  ASSERT_TRUE(master_->PutEnd(e).ok());
  proto::RemoveRequest rm;
  rm.set_key("a");
  rm.set_tenant("other");
  ASSERT_TRUE(master_->Remove(rm).ok());
  EXPECT_EQ(master_->Stats().deferred_frees, 0u);
}

}  // namespace
}  // namespace mooncake::master
