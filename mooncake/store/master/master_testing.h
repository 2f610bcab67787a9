// The conformance kit of Master<A, P>: a typed suite every instantiation runs
// (master_test.cc instantiates the reference TLSF + LRU and a KvAllocator +
// S3-FIFO combination).
//
//   struct MyConfig {
//     using MasterT = Master<MyAllocator, MyPolicy>;
//     static MasterT::AllocatorFactory Factory();  // may return nullptr
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(Mine, MasterConformance, ::testing::Types<MyConfig>);
//
// Every test drives time with a FakeClock and Tick(); nothing sleeps.
#ifndef MOONCAKE_STORE_MASTER_MASTER_TESTING_H_
#define MOONCAKE_STORE_MASTER_MASTER_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {

namespace testing_internal {

inline proto::MountSegmentRequest MountReq(const std::string& worker, const std::string& name,
                                           uint64_t size, const std::string& host = "host-a") {
  proto::MountSegmentRequest r;
  r.mutable_segment()->set_worker_id(worker);
  r.mutable_segment()->set_name(name);
  r.mutable_segment()->set_size_bytes(size);
  r.mutable_segment()->mutable_endpoint()->set_host_id(host);
  return r;
}

inline proto::PutStartRequest PutReq(const std::string& key, uint64_t size, uint32_t replicas = 1) {
  proto::PutStartRequest r;
  r.set_key(key);
  r.set_size_bytes(size);
  r.set_checksum(0x1234);
  r.mutable_options()->set_replica_count(replicas);
  return r;
}

inline proto::PutEndRequest EndReq(const std::string& key, uint64_t put_id) {
  proto::PutEndRequest r;
  r.set_key(key);
  r.set_put_id(put_id);
  return r;
}

inline proto::GetReplicasRequest GetReq(const std::string& key) {
  proto::GetReplicasRequest r;
  r.set_key(key);
  return r;
}

}  // namespace testing_internal

// A reference Master<> on a FakeClock, with the helpers most tests need. It
// has a tenant "other" besides the default one, and a metrics registry.
class MasterFixture : public ::testing::Test {
 protected:
  static constexpr uint64_t kSegmentBytes = 64 * 4096;

  void SetUp() override { Make(MasterOptions{}); }

  void Make(MasterOptions o) {
    o.shard_count = 8;
    o.tenants.push_back({"other", uint64_t{1} << 40, 0});
    auto m = Master<>::Create(o, &clock_, &metrics_);
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
  }

  uint64_t Mount(const std::string& worker, const std::string& name = "seg0",
                 uint64_t size = kSegmentBytes) {
    auto r = master_->MountSegment(testing_internal::MountReq(worker, name, size));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->segment_id() : 0;
  }

  // PutStart + PutEnd; returns the committed version (0 on failure).
  uint64_t Put(const proto::PutStartRequest& req) {
    auto start = master_->PutStart(req);
    EXPECT_TRUE(start.ok()) << start.status();
    if (!start.ok()) return 0;
    auto end = master_->PutEnd(testing_internal::EndReq(req.key(), start->put_id()));
    EXPECT_TRUE(end.ok()) << end.status();
    return end.ok() ? end->object().version() : 0;
  }

  bool Exists(const std::string& key, const std::string& tenant = "") {
    proto::ExistsRequest e;
    e.set_key(key);
    e.set_tenant(tenant);
    return master_->Exists(e)->exists();
  }

  absl::Status Remove(const std::string& key, bool force = false, bool refuse_if_leased = false) {
    proto::RemoveRequest r;
    r.set_key(key);
    r.set_force(force);
    r.set_refuse_if_leased(refuse_if_leased);
    return master_->Remove(r).status();
  }

  void Release(uint64_t lease_id) {
    proto::ReleaseLeasesRequest r;
    r.add_lease_ids(lease_id);
    ASSERT_TRUE(master_->ReleaseLeases(r).ok());
  }

  MetricsRegistry metrics_;
  FakeClock clock_{1'000'000'000};
  std::unique_ptr<Master<>> master_;
};

template <typename Config>
class MasterConformance : public ::testing::Test {
 protected:
  using MasterT = typename Config::MasterT;
  static constexpr uint64_t kSegmentBytes = 64 * 4096;
  static constexpr uint64_t kObjectBytes = 4096;

  void SetUp() override { Make(MasterOptions{}); }

  void Make(MasterOptions options) {
    options.shard_count = 8;
    auto m = MasterT::Create(options, &clock_, nullptr, Config::Factory());
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
  }

  uint64_t Mount(const std::string& worker, uint64_t size = kSegmentBytes,
                 const std::string& host = "host-a") {
    auto r = master_->MountSegment(testing_internal::MountReq(worker, "seg0", size, host));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->segment_id() : 0;
  }

  // PutStart + PutEnd; returns the committed version (0 on failure).
  uint64_t Put(const std::string& key, uint64_t size = kObjectBytes, uint32_t replicas = 1,
               proto::PinLevel pin = proto::PIN_NONE) {
    proto::PutStartRequest req = testing_internal::PutReq(key, size, replicas);
    req.mutable_options()->set_pin(pin);
    auto start = master_->PutStart(req);
    if (!start.ok()) return 0;
    auto end = master_->PutEnd(testing_internal::EndReq(key, start->put_id()));
    return end.ok() ? end->object().version() : 0;
  }

  FakeClock clock_{1'000'000'000};
  std::unique_ptr<MasterT> master_;
};

TYPED_TEST_SUITE_P(MasterConformance);

TYPED_TEST_P(MasterConformance, ObjectIsVisibleOnlyAfterPutEnd) {
  this->Mount("w1");
  auto start = this->master_->PutStart(testing_internal::PutReq("k", this->kObjectBytes));
  ASSERT_TRUE(start.ok()) << start.status();
  ASSERT_EQ(start->replicas_size(), 1);
  EXPECT_EQ(start->replicas(0).state(), proto::REPLICA_ALLOCATED);
  EXPECT_EQ(start->replicas(0).length(), this->kObjectBytes);
  EXPECT_TRUE(absl::IsNotFound(this->master_->GetReplicas(testing_internal::GetReq("k")).status()));
  proto::ExistsRequest ex;
  ex.set_key("k");
  EXPECT_FALSE(this->master_->Exists(ex)->exists());

  auto end = this->master_->PutEnd(testing_internal::EndReq("k", start->put_id()));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_GT(end->object().version(), 0u);
  EXPECT_EQ(end->object().checksum(), 0x1234u);
  auto get = this->master_->GetReplicas(testing_internal::GetReq("k"));
  ASSERT_TRUE(get.ok()) << get.status();
  ASSERT_EQ(get->replicas_size(), 1);
  EXPECT_EQ(get->replicas(0).state(), proto::REPLICA_COMPLETE);
  EXPECT_EQ(get->replicas(0).offset(), start->replicas(0).offset());
  EXPECT_NE(get->lease().lease_id(), 0u);
  EXPECT_TRUE(this->master_->Exists(ex)->exists());
  // A retried PutEnd (lost response) gets the same answer.
  auto again = this->master_->PutEnd(testing_internal::EndReq("k", start->put_id()));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->object().version(), end->object().version());
}

TYPED_TEST_P(MasterConformance, FirstPutStartOfAKeyWins) {
  this->Mount("w1");
  auto first = this->master_->PutStart(testing_internal::PutReq("k", 100));
  ASSERT_TRUE(first.ok());
  auto second = this->master_->PutStart(testing_internal::PutReq("k", 200));
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  // PutEnd with a foreign put id: stale.
  auto wrong = this->master_->PutEnd(testing_internal::EndReq("k", first->put_id() + 1000));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  proto::PutRevokeRequest rv;
  rv.set_key("k");
  rv.set_put_id(first->put_id());
  ASSERT_TRUE(this->master_->PutRevoke(rv).ok());
  EXPECT_EQ(this->master_->Stats().used_bytes, 0u);
  // After the revoke the next PutStart wins; after its commit, no overwrite.
  auto third = this->master_->PutStart(testing_internal::PutReq("k", 300));
  ASSERT_TRUE(third.ok()) << third.status();
  ASSERT_TRUE(this->master_->PutEnd(testing_internal::EndReq("k", third->put_id())).ok());
  EXPECT_TRUE(
      absl::IsAlreadyExists(this->master_->PutStart(testing_internal::PutReq("k", 300)).status()));
  EXPECT_EQ(this->master_->GetReplicas(testing_internal::GetReq("k"))->object().size_bytes(), 300u);
  EXPECT_TRUE(absl::IsNotFound(this->master_->PutRevoke(rv).status()) ||
              absl::IsFailedPrecondition(this->master_->PutRevoke(rv).status()));
}

TYPED_TEST_P(MasterConformance, AbandonedPutIsRevokedAtItsDeadline) {
  MasterOptions o;
  o.put_timeout_ms = 1000;
  o.timed_out_put_hold_ms = 500;
  this->Make(o);
  this->Mount("w1");
  auto start = this->master_->PutStart(testing_internal::PutReq("k", this->kObjectBytes));
  ASSERT_TRUE(start.ok());
  this->clock_.AdvanceMs(1001);
  EXPECT_EQ(this->master_->Tick().puts_timed_out, 1u);
  EXPECT_TRUE(absl::IsNotFound(
      this->master_->PutEnd(testing_internal::EndReq("k", start->put_id())).status()));
  // The late writer may still be writing: the space is held a while more.
  EXPECT_EQ(this->master_->Stats().used_bytes, this->kObjectBytes);
  this->clock_.AdvanceMs(501);
  this->master_->Tick();
  EXPECT_EQ(this->master_->Stats().used_bytes, 0u);
  EXPECT_EQ(this->master_->Stats().pending_puts, 0);
  EXPECT_NE(this->Put("k"), 0u);  // the key is free again
}

TYPED_TEST_P(MasterConformance, LeasedObjectSpaceOutlivesRemove) {
  this->Mount("w1");
  ASSERT_NE(this->Put("k"), 0u);
  auto get = this->master_->GetReplicas(testing_internal::GetReq("k"));
  ASSERT_TRUE(get.ok());
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(this->master_->Remove(rm).ok());
  EXPECT_TRUE(absl::IsNotFound(this->master_->GetReplicas(testing_internal::GetReq("k")).status()));
  EXPECT_EQ(this->master_->Stats().used_bytes, this->kObjectBytes) << "freed under a lease";
  // A new put of the same size must not get the leased range.
  auto other = this->master_->PutStart(testing_internal::PutReq("k2", this->kObjectBytes));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->replicas(0).offset(), get->replicas(0).offset());
  proto::ReleaseLeasesRequest rel;
  rel.add_lease_ids(get->lease().lease_id());
  rel.add_lease_ids(999999);  // unknown ids are not errors
  EXPECT_EQ(this->master_->ReleaseLeases(rel)->released(), 1u);
  EXPECT_EQ(this->master_->Stats().used_bytes, this->kObjectBytes);  // only k2's
  EXPECT_EQ(this->master_->Stats().deferred_frees, 0u);
}

TYPED_TEST_P(MasterConformance, ExpiredLeaseStopsDeferringTheFree) {
  this->Mount("w1");
  ASSERT_NE(this->Put("k"), 0u);
  proto::GetReplicasRequest g = testing_internal::GetReq("k");
  g.set_lease_ms(2000);
  ASSERT_TRUE(this->master_->GetReplicas(g).ok());
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(this->master_->Remove(rm).ok());
  this->clock_.AdvanceMs(1999);
  this->master_->Tick();
  EXPECT_EQ(this->master_->Stats().used_bytes, this->kObjectBytes);
  this->clock_.AdvanceMs(2);
  const TickReport t = this->master_->Tick();
  EXPECT_EQ(t.leases_expired, 1u);
  EXPECT_EQ(this->master_->Stats().used_bytes, 0u);
}

TYPED_TEST_P(MasterConformance, FullPutEvictsButNeverLeasedPinnedOrPending) {
  this->Mount("w1", 8 * this->kObjectBytes);
  for (int i = 0; i < 8; ++i) ASSERT_NE(this->Put("k" + std::to_string(i)), 0u) << i;
  // k0 leased, k1 hard-pinned (re-put), k2 soft-pinned, a pending put on k3's slot.
  ASSERT_TRUE(this->master_->GetReplicas(testing_internal::GetReq("k0")).ok());
  proto::RemoveRequest rm;
  rm.set_key("k1");
  ASSERT_TRUE(this->master_->Remove(rm).ok());
  ASSERT_NE(this->Put("k1", this->kObjectBytes, 1, proto::PIN_HARD), 0u);
  rm.set_key("k2");
  ASSERT_TRUE(this->master_->Remove(rm).ok());
  ASSERT_NE(this->Put("k2", this->kObjectBytes, 1, proto::PIN_SOFT), 0u);
  rm.set_key("k3");
  ASSERT_TRUE(this->master_->Remove(rm).ok());
  ASSERT_TRUE(this->master_->PutStart(testing_internal::PutReq("p", this->kObjectBytes)).ok());
  // Full: each new (hard-pinned) put evicts one unpinned object, never k0, k1, p.
  for (int i = 0; i < 4; ++i) {
    ASSERT_NE(this->Put("n" + std::to_string(i), this->kObjectBytes, 1, proto::PIN_HARD), 0u) << i;
  }
  auto exists = [&](const std::string& k) {
    proto::ExistsRequest e;
    e.set_key(k);
    return this->master_->Exists(e)->exists();
  };
  EXPECT_TRUE(exists("k0"));
  EXPECT_TRUE(exists("k1"));
  EXPECT_TRUE(exists("k2"));  // soft pins go only after every unpinned object
  EXPECT_EQ(this->master_->Stats().pending_puts, 1);
  // Only k2 (soft) is left to evict; then nothing: RESOURCE_EXHAUSTED.
  ASSERT_NE(this->Put("n4", this->kObjectBytes, 1, proto::PIN_HARD), 0u);
  EXPECT_FALSE(exists("k2"));
  auto full = this->master_->PutStart(testing_internal::PutReq("n5", this->kObjectBytes));
  EXPECT_TRUE(absl::IsResourceExhausted(full.status())) << full.status();
  EXPECT_TRUE(exists("k0"));
  EXPECT_TRUE(exists("k1"));
}

TYPED_TEST_P(MasterConformance, TickEvictsFromHighToLowWatermark) {
  MasterOptions o;
  o.high_watermark = 0.7;
  o.low_watermark = 0.5;
  this->Make(o);
  this->Mount("w1", 10 * this->kObjectBytes);
  for (int i = 0; i < 8; ++i) ASSERT_NE(this->Put("k" + std::to_string(i)), 0u);
  const TickReport t = this->master_->Tick();
  EXPECT_EQ(t.evicted_objects, 3u);
  EXPECT_EQ(this->master_->Stats().objects, 5);
  proto::ExistsRequest e;
  e.set_key("k0");  // the least recently used goes first
  EXPECT_FALSE(this->master_->Exists(e)->exists());
  e.set_key("k7");
  EXPECT_TRUE(this->master_->Exists(e)->exists());
}

// Keys are stored inline up to 23 bytes and on the heap past that
// (InlineString), in the table and in the eviction policy: every length
// commits, is found, is evicted in its turn and is removed.
TYPED_TEST_P(MasterConformance, KeysOfEveryLengthAreFoundEvictedAndRemoved) {
  MasterOptions o;
  o.high_watermark = 0.7;
  o.low_watermark = 0.5;
  this->Make(o);
  this->Mount("w1", 10 * this->kObjectBytes);
  const std::vector<size_t> lengths = {1, 15, 16, 23, 24, 40, 200, rpc::kMaxKeyBytes};
  std::vector<std::string> keys;
  for (size_t i = 0; i < lengths.size(); ++i) {
    keys.push_back(std::string(lengths[i] - 1, 'a' + static_cast<char>(i)) + "z");
    ASSERT_NE(this->Put(keys.back()), 0u) << lengths[i];
  }
  auto exists = [&](const std::string& k) {
    proto::ExistsRequest e;
    e.set_key(k);
    return this->master_->Exists(e)->exists();
  };
  for (const std::string& k : keys) {
    ASSERT_TRUE(exists(k)) << k.size();
    auto g = this->master_->GetReplicas(testing_internal::GetReq(k));
    ASSERT_TRUE(g.ok()) << g.status();
    proto::ReleaseLeasesRequest rel;
    rel.add_lease_ids(g->lease().lease_id());
    ASSERT_TRUE(this->master_->ReleaseLeases(rel).ok());
  }
  // Least recently used first: the three shortest were read first.
  EXPECT_EQ(this->master_->Tick().evicted_objects, 3u);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(exists(keys[i]), i >= 3) << lengths[i];
  for (size_t i = 3; i < keys.size(); ++i) {
    proto::RemoveRequest rm;
    rm.set_key(keys[i]);
    ASSERT_TRUE(this->master_->Remove(rm).ok()) << lengths[i];
    EXPECT_FALSE(exists(keys[i]));
  }
  EXPECT_EQ(this->master_->Stats().objects, 0);
}

TYPED_TEST_P(MasterConformance, ReplicasLandOnDistinctWorkers) {
  this->Mount("w1");
  auto one = this->master_->PutStart(testing_internal::PutReq("k", 100, 2));
  EXPECT_TRUE(absl::IsResourceExhausted(one.status())) << one.status();
  this->Mount("w2");
  auto two = this->master_->PutStart(testing_internal::PutReq("k", 100, 2));
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->replicas_size(), 2);
  EXPECT_NE(two->replicas(0).worker_id(), two->replicas(1).worker_id());
  // One transfer failed: the put commits on the other.
  proto::PutEndRequest end = testing_internal::EndReq("k", two->put_id());
  end.add_failed_segment_ids(two->replicas(0).segment_id());
  auto committed = this->master_->PutEnd(end);
  ASSERT_TRUE(committed.ok()) << committed.status();
  auto get = this->master_->GetReplicas(testing_internal::GetReq("k"));
  ASSERT_EQ(get->replicas_size(), 1);
  EXPECT_EQ(get->replicas(0).segment_id(), two->replicas(1).segment_id());
  EXPECT_EQ(this->master_->Stats().used_bytes, 100u);
}

TYPED_TEST_P(MasterConformance, SilentWorkerIsDroppedWithItsReplicas) {
  const uint64_t s1 = this->Mount("w1");
  this->Mount("w2");
  ASSERT_NE(this->Put("both", 100, 2), 0u);
  this->clock_.AdvanceMs(3000);
  proto::HeartbeatRequest hb;
  hb.set_worker_id("w2");
  hb.set_sequence(1);
  EXPECT_FALSE(this->master_->Heartbeat(hb)->remount_required());
  this->clock_.AdvanceMs(3000);  // w1 silent 6 s > 5 s; w2 3 s
  const TickReport t = this->master_->Tick();
  EXPECT_EQ(t.workers_expired, 1u);
  EXPECT_EQ(t.replicas_dropped, 1u);
  auto get = this->master_->GetReplicas(testing_internal::GetReq("both"));
  ASSERT_TRUE(get.ok());
  ASSERT_EQ(get->replicas_size(), 1);
  EXPECT_EQ(get->replicas(0).worker_id(), "w2");
  hb.set_worker_id("w1");
  EXPECT_TRUE(this->master_->Heartbeat(hb)->remount_required());
  // The last replica goes with w2: the object disappears.
  proto::UnmountSegmentRequest un;
  un.set_worker_id("w2");
  un.set_segment_id(s1);  // not w2's segment
  EXPECT_TRUE(absl::IsNotFound(this->master_->UnmountSegment(un).status()));
  this->clock_.AdvanceMs(6000);
  this->master_->Tick();
  EXPECT_TRUE(
      absl::IsNotFound(this->master_->GetReplicas(testing_internal::GetReq("both")).status()));
  EXPECT_EQ(this->master_->Stats().objects, 0);
  EXPECT_EQ(this->master_->TenantUsage("")->used_bytes, 0u);
}

TYPED_TEST_P(MasterConformance, PrefixQueryCountsLeadingBlocks) {
  this->Mount("w1");
  std::vector<Hash128> chain;
  for (uint64_t i = 1; i <= 5; ++i) chain.push_back(Hash128{i, i * 7});
  for (int i = 0; i < 3; ++i) ASSERT_NE(this->Put(rpc::BlockObjectKey(chain[i]), 512), 0u);
  ASSERT_NE(this->Put(rpc::BlockObjectKey(chain[4]), 512), 0u);  // after the gap
  proto::PrefixQueryRequest q;
  for (const Hash128& h : chain) rpc::ToProto(h, q.add_chain());
  auto r = this->master_->PrefixQuery(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->matched(), 3u);
  EXPECT_EQ(r->blocks_size(), 0);
  EXPECT_EQ(r->lease().lease_id(), 0u);
  q.set_with_replicas(true);
  r = this->master_->PrefixQuery(q);
  ASSERT_EQ(r->blocks_size(), 3);
  EXPECT_EQ(r->blocks(2).replicas_size(), 1);
  EXPECT_NE(r->lease().lease_id(), 0u);
  // The one lease covers all three: removing them defers every free.
  for (int i = 0; i < 3; ++i) {
    proto::RemoveRequest rm;
    rm.set_key(rpc::BlockObjectKey(chain[i]));
    ASSERT_TRUE(this->master_->Remove(rm).ok());
  }
  EXPECT_EQ(this->master_->Stats().deferred_frees, 3u);
  proto::ReleaseLeasesRequest rel;
  rel.add_lease_ids(r->lease().lease_id());
  ASSERT_TRUE(this->master_->ReleaseLeases(rel).ok());
  EXPECT_EQ(this->master_->Stats().deferred_frees, 0u);
  EXPECT_EQ(this->master_->Stats().used_bytes, 512u);
}

TYPED_TEST_P(MasterConformance, BadInputGetsClearErrors) {
  this->Mount("w1");
  auto code = [&](proto::PutStartRequest r) { return this->master_->PutStart(r).status().code(); };
  EXPECT_EQ(code(testing_internal::PutReq("", 10)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(testing_internal::PutReq(std::string(rpc::kMaxKeyBytes + 1, 'x'), 10)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(testing_internal::PutReq(std::string("\0x", 2), 10)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(testing_internal::PutReq("k", 0)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(testing_internal::PutReq("k", this->master_->options().max_object_bytes + 1)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(testing_internal::PutReq("k", 10, 99)), absl::StatusCode::kInvalidArgument);
  proto::PutStartRequest t = testing_internal::PutReq("k", 10);
  t.mutable_options()->set_tenant("nobody");
  EXPECT_EQ(code(t), absl::StatusCode::kInvalidArgument);
  proto::GetReplicasRequest g = testing_internal::GetReq("k");
  g.set_tenant("nobody");
  EXPECT_EQ(this->master_->GetReplicas(g).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->master_->GetReplicas(testing_internal::GetReq("")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(this->master_->MountSegment(testing_internal::MountReq("", "s", 10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      this->master_->MountSegment(testing_internal::MountReq("w1", "seg0", 4096)).status().code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(this->master_->Stats().used_bytes, 0u);
}

TYPED_TEST_P(MasterConformance, TenantQuotaAndIsolation) {
  MasterOptions o;
  o.tenants.push_back({.name = "a", .capacity_bytes = 3 * this->kObjectBytes});
  this->Make(o);
  this->Mount("w1");
  auto put = [&](const std::string& k) {
    proto::PutStartRequest r = testing_internal::PutReq(k, this->kObjectBytes);
    r.mutable_options()->set_tenant("a");
    auto s = this->master_->PutStart(r);
    if (!s.ok()) return s.status();
    return this->master_->PutEnd(testing_internal::EndReq(k, s->put_id())).status();
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(put("a" + std::to_string(i)).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(put("a3")));
  // Another tenant (the default) cannot see or remove a's objects.
  EXPECT_TRUE(
      absl::IsNotFound(this->master_->GetReplicas(testing_internal::GetReq("a0")).status()));
  proto::RemoveRequest rm;
  rm.set_key("a0");
  EXPECT_TRUE(absl::IsNotFound(this->master_->Remove(rm).status()));
  rm.set_tenant("a");
  ASSERT_TRUE(this->master_->Remove(rm).ok());
  EXPECT_TRUE(put("a3").ok());
  EXPECT_EQ(this->master_->TenantUsage("a")->used_bytes, 3 * this->kObjectBytes);
}

TYPED_TEST_P(MasterConformance, TtlRemovesObjects) {
  this->Mount("w1");
  proto::PutStartRequest r = testing_internal::PutReq("k", 100);
  r.mutable_options()->set_ttl_ms(1000);
  auto s = this->master_->PutStart(r);
  ASSERT_TRUE(this->master_->PutEnd(testing_internal::EndReq("k", s->put_id())).ok());
  this->clock_.AdvanceMs(999);
  EXPECT_TRUE(this->master_->GetReplicas(testing_internal::GetReq("k")).ok());
  this->clock_.AdvanceMs(1);
  EXPECT_TRUE(absl::IsNotFound(this->master_->GetReplicas(testing_internal::GetReq("k")).status()));
  this->clock_.AdvanceMs(5000);  // the lease taken above ends too
  const TickReport t = this->master_->Tick();
  EXPECT_EQ(t.objects_expired, 1u);
  EXPECT_EQ(this->master_->Stats().used_bytes, 0u);
}

TYPED_TEST_P(MasterConformance, DescribeSegmentsTellsMountedUnmountedAndUnknown) {
  auto describe = [&](std::vector<uint64_t> ids) {
    proto::DescribeSegmentsRequest req;
    for (uint64_t id : ids) req.add_segment_ids(id);
    return this->master_->DescribeSegments(req);
  };
  auto mount = [&](const std::string& worker, const std::string& name, uint64_t router_id) {
    proto::MountSegmentRequest req =
        testing_internal::MountReq(worker, name, this->kSegmentBytes, "host-" + worker);
    proto::SegmentEndpoint* e = req.mutable_segment()->mutable_endpoint();
    e->set_tcp_address("127.0.0.1:4000");
    e->set_router_endpoint("router://host-" + worker + "/1|tcp://127.0.0.1:4000");
    e->set_router_segment_id(router_id);
    auto r = this->master_->MountSegment(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->segment_id() : 0;
  };
  const uint64_t a = mount("w1", "seg0", 11);
  const uint64_t b = mount("w2", "seg0", 22);
  ASSERT_NE(a, b);
  auto d = describe({b, 0, b + 1000, a});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->segments_size(), 4);
  EXPECT_EQ(d->segments(0).segment_id(), b);
  EXPECT_EQ(d->segments(0).state(), proto::SEGMENT_MOUNTED);
  EXPECT_EQ(d->segments(0).segment().worker_id(), "w2");
  EXPECT_EQ(d->segments(0).segment().size_bytes(), this->kSegmentBytes);
  EXPECT_EQ(d->segments(0).segment().endpoint().host_id(), "host-w2");
  EXPECT_EQ(d->segments(0).segment().endpoint().router_endpoint(),
            "router://host-w2/1|tcp://127.0.0.1:4000");
  EXPECT_EQ(d->segments(0).segment().endpoint().router_segment_id(), 22u);
  EXPECT_EQ(d->segments(1).state(), proto::SEGMENT_UNKNOWN);  // 0 is never an id
  EXPECT_EQ(d->segments(2).state(), proto::SEGMENT_UNKNOWN);  // not assigned yet
  EXPECT_FALSE(d->segments(2).has_segment());
  EXPECT_EQ(d->segments(3).segment().endpoint().router_segment_id(), 11u);

  // Unmounted: told apart from unknown, for good.
  proto::UnmountSegmentRequest un;
  un.set_worker_id("w2");
  un.set_segment_id(b);
  ASSERT_TRUE(this->master_->UnmountSegment(un).ok());
  d = describe({b});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->segments(0).state(), proto::SEGMENT_UNMOUNTED);
  EXPECT_FALSE(d->segments(0).has_segment());

  // A worker that expired and remounts: the old id stays unmounted, the new
  // one carries the endpoint of the remount.
  this->clock_.AdvanceMs(6000);
  EXPECT_EQ(this->master_->Tick().workers_expired, 1u);
  EXPECT_EQ(describe({a})->segments(0).state(), proto::SEGMENT_UNMOUNTED);
  const uint64_t a2 = mount("w1", "seg0", 33);
  ASSERT_GT(a2, b);
  d = describe({a, a2});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->segments(0).state(), proto::SEGMENT_UNMOUNTED);
  EXPECT_EQ(d->segments(1).state(), proto::SEGMENT_MOUNTED);
  EXPECT_EQ(d->segments(1).segment().endpoint().router_segment_id(), 33u);

  // Bad input: the whole call fails with a reason.
  EXPECT_EQ(describe({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(describe(std::vector<uint64_t>(rpc::kMaxDescribeSegments + 1, a2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(describe(std::vector<uint64_t>(rpc::kMaxDescribeSegments, a2)).ok());
}

REGISTER_TYPED_TEST_SUITE_P(MasterConformance, ObjectIsVisibleOnlyAfterPutEnd,
                            FirstPutStartOfAKeyWins, AbandonedPutIsRevokedAtItsDeadline,
                            LeasedObjectSpaceOutlivesRemove, ExpiredLeaseStopsDeferringTheFree,
                            FullPutEvictsButNeverLeasedPinnedOrPending,
                            TickEvictsFromHighToLowWatermark,
                            KeysOfEveryLengthAreFoundEvictedAndRemoved,
                            ReplicasLandOnDistinctWorkers, SilentWorkerIsDroppedWithItsReplicas,
                            PrefixQueryCountsLeadingBlocks, BadInputGetsClearErrors,
                            TenantQuotaAndIsolation, TtlRemovesObjects,
                            DescribeSegmentsTellsMountedUnmountedAndUnknown);

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MASTER_TESTING_H_
