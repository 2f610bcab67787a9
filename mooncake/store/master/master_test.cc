#include "mooncake/store/master/master.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/base/clock.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {
namespace {

using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::MountReq;
using testing_internal::PutReq;

struct ReferenceConfig {
  using MasterT = Master<>;
  static MasterT::AllocatorFactory Factory() { return nullptr; }
};

// A second, different combination: KV block slabs over TLSF, evicted by S3-FIFO.
using KvMaster = Master<alloc::KvAllocator<>, index::S3FifoPolicy<ObjectKey, ObjectKeyHash>>;
struct KvS3FifoConfig {
  using MasterT = KvMaster;
  static MasterT::AllocatorFactory Factory() {
    return [](uint64_t capacity) {
      return alloc::KvAllocator<>::Create(
          alloc::TlsfAllocator({.capacity_bytes = capacity / 64 * 64, .granularity_bytes = 64}),
          alloc::SizeClassOptions{.class_bytes = {4096}});
    };
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Reference, MasterConformance, ::testing::Types<ReferenceConfig>);
INSTANTIATE_TYPED_TEST_SUITE_P(KvS3Fifo, MasterConformance, ::testing::Types<KvS3FifoConfig>);

TEST(MasterTest, AllocatorWithoutTraitsNeedsAFactory) {
  FakeClock clock;
  auto m = KvMaster::Create(MasterOptions{}, &clock);
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
}

TEST(MasterTest, InvalidOptionsAreRefused) {
  MasterOptions o;
  o.low_watermark = 0.99;
  EXPECT_TRUE(absl::IsInvalidArgument(Master<>::Create(o).status()));
  o = MasterOptions{};
  o.shard_count = 3;
  EXPECT_TRUE(absl::IsInvalidArgument(Master<>::Create(o).status()));
}

TEST(MasterTest, ClientLocalReplicaIsListedFirst) {
  FakeClock clock;
  auto m = *Master<>::Create(MasterOptions{}, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20, "host-a")).ok());
  ASSERT_TRUE(m->MountSegment(MountReq("w2", "s", 1 << 20, "host-b")).ok());
  proto::PutStartRequest put = PutReq("k", 100, 1);
  put.set_client_host_id("host-b");
  auto start = m->PutStart(put);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(start->replicas(0).worker_id(), "w2");  // client-local-first placement
  ASSERT_TRUE(m->PutEnd(EndReq("k", start->put_id())).ok());
  ASSERT_TRUE(m->Remove([] {
                 proto::RemoveRequest r;
                 r.set_key("k");
                 return r;
               }())
                  .ok());
  auto two = m->PutStart(PutReq("k", 100, 2));
  ASSERT_TRUE(m->PutEnd(EndReq("k", two->put_id())).ok());
  for (const char* host : {"host-a", "host-b"}) {
    proto::GetReplicasRequest g = GetReq("k");
    g.set_client_host_id(host);
    auto r = m->GetReplicas(g);
    ASSERT_EQ(r->replicas_size(), 2);
    EXPECT_EQ(r->replicas(0).worker_id(), std::string(host) == "host-a" ? "w1" : "w2");
  }
}

// Many threads put, get, remove and revoke the same few keys. Checked: no
// crash, every successful get names a committed size, and once everything is
// removed and every lease released the pool and the quota are back to zero
// (nothing leaked, nothing freed twice: the allocator asserts on that).
TEST(MasterTest, ConcurrentOpsOnSharedKeysLeaveNoLeak) {
  FakeClock clock(1);
  MasterOptions o;
  o.shard_count = 4;
  auto m = *Master<>::Create(o, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  ASSERT_TRUE(m->MountSegment(MountReq("w2", "s", 1 << 20)).ok());
  constexpr int kThreads = 4;
  constexpr int kOps = 3000;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> leases;
      for (int i = 0; i < kOps; ++i) {
        const std::string key = "k" + std::to_string((i * 7 + t) % 5);
        const uint64_t size = 1000 + static_cast<uint64_t>((i + t) % 3) * 1000;
        switch ((i + t) % 4) {
          case 0: {
            auto s = m->PutStart(PutReq(key, size, 1 + (i % 2)));
            if (!s.ok()) break;
            if (i % 5 == 0) {
              proto::PutRevokeRequest rv;
              rv.set_key(key);
              rv.set_put_id(s->put_id());
              (void)m->PutRevoke(rv);
            } else {
              (void)m->PutEnd(EndReq(key, s->put_id()));
            }
            break;
          }
          case 1: {
            auto g = m->GetReplicas(GetReq(key));
            if (g.ok()) {
              const uint64_t sz = g->object().size_bytes();
              if (sz != 1000 && sz != 2000 && sz != 3000) bad.fetch_add(1);
              if (g->replicas_size() == 0) bad.fetch_add(1);
              leases.push_back(g->lease().lease_id());
            }
            break;
          }
          case 2: {
            proto::RemoveRequest r;
            r.set_key(key);
            (void)m->Remove(r);
            break;
          }
          default: {
            proto::ReleaseLeasesRequest r;
            for (uint64_t id : leases) r.add_lease_ids(id);
            leases.clear();
            (void)m->ReleaseLeases(r);
            if (t == 0) m->Tick();
          }
        }
      }
      proto::ReleaseLeasesRequest r;
      for (uint64_t id : leases) r.add_lease_ids(id);
      (void)m->ReleaseLeases(r);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  for (int k = 0; k < 5; ++k) {
    proto::RemoveRequest r;
    r.set_key("k" + std::to_string(k));
    (void)m->Remove(r);
  }
  clock.AdvanceMs(o.put_timeout_ms + o.timed_out_put_hold_ms + 1);
  m->Tick();
  EXPECT_EQ(m->Stats().objects, 0);
  EXPECT_EQ(m->Stats().pending_puts, 0);
  EXPECT_EQ(m->Stats().used_bytes, 0u);
  EXPECT_EQ(m->Stats().deferred_frees, 0u);
  EXPECT_EQ(m->TenantUsage("")->used_bytes, 0u);
}

// One Tick evicts at most two rounds of max_evictions_per_round objects; the
// Ticks after it go on from just under the high watermark down to the low one
// instead of stopping there.
TEST(MasterTest, TicksKeepEvictingUntilTheLowWatermark) {
  FakeClock clock;
  MasterOptions o;
  o.high_watermark = 0.7;
  o.low_watermark = 0.5;
  o.max_evictions_per_round = 2;
  auto m = *Master<>::Create(o, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 20 * 4096)).ok());
  for (int i = 0; i < 18; ++i) {
    const std::string key = "k" + std::to_string(i);
    auto s = m->PutStart(PutReq(key, 4096));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(m->PutEnd(EndReq(key, s->put_id())).ok());
  }
  EXPECT_EQ(m->Tick().evicted_objects, 4u);  // 0.9 -> 0.7: two rounds of two
  uint64_t ticks = 0;
  while (m->Tick().evicted_objects > 0) ASSERT_LT(++ticks, 10u);
  EXPECT_GE(ticks, 1u);  // the 0.7 left by the first Tick is not the end
  EXPECT_EQ(m->Stats().objects, 10);
  EXPECT_EQ(m->Stats().used_bytes, 10u * 4096);
  // Below the high watermark with nothing to do: no more eviction.
  auto s = m->PutStart(PutReq("more", 4096));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(m->PutEnd(EndReq("more", s->put_id())).ok());
  EXPECT_EQ(m->Tick().evicted_objects, 0u);
  EXPECT_EQ(m->Stats().objects, 11);
}

// Every PutStart files a deadline entry; an ended put (committed, revoked)
// takes its entry out instead of leaving it for a Tick put_timeout_ms later.
TEST(MasterTest, PutDeadlineQueueDoesNotGrowWithCompletedPuts) {
  FakeClock clock;
  auto m = *Master<>::Create(MasterOptions{}, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "k" + std::to_string(i);
    auto s = m->PutStart(PutReq(key, 64));
    ASSERT_TRUE(s.ok()) << s.status();
    if (i % 2 == 0) {
      ASSERT_TRUE(m->PutEnd(EndReq(key, s->put_id())).ok());
    } else {
      proto::PutRevokeRequest r;
      r.set_key(key);
      r.set_put_id(s->put_id());
      ASSERT_TRUE(m->PutRevoke(r).ok());
    }
    ASSERT_LE(m->Stats().put_deadline_entries, 2u);
  }
  auto pending = m->PutStart(PutReq("pending", 64));
  ASSERT_TRUE(pending.ok());
  EXPECT_GE(m->Stats().put_deadline_entries, 1u);
  // The pending one still times out at its deadline.
  clock.AdvanceMs(m->options().put_timeout_ms + 1);
  EXPECT_EQ(m->Tick().puts_timed_out, 1u);
  EXPECT_EQ(m->Stats().put_deadline_entries, 0u);
  EXPECT_EQ(m->Stats().pending_puts, 0);
}

// A prefix read with replicas is a read for the policy: the chain survives
// eviction that takes older-looking objects instead; a bare probe is not.
TEST(MasterTest, PrefixReadRefreshesTheChainForEviction) {
  FakeClock clock;
  auto m = *Master<>::Create(MasterOptions{}, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 8 * 4096)).ok());
  auto put = [&](const std::string& key) {
    auto s = m->PutStart(PutReq(key, 4096));
    return s.ok() && m->PutEnd(EndReq(key, s->put_id())).ok();
  };
  const Hash128 b0{1, 1}, b1{2, 2};
  ASSERT_TRUE(put(rpc::BlockObjectKey(b0)));
  ASSERT_TRUE(put(rpc::BlockObjectKey(b1)));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(put("k" + std::to_string(i)));
  proto::PrefixQueryRequest q;
  rpc::ToProto(b0, q.add_chain());
  rpc::ToProto(b1, q.add_chain());
  ASSERT_EQ(m->PrefixQuery(q)->matched(), 2u);  // probe: no refresh
  q.set_with_replicas(true);
  auto read = m->PrefixQuery(q);
  ASSERT_EQ(read->matched(), 2u);
  proto::ReleaseLeasesRequest rel;
  rel.add_lease_ids(read->lease().lease_id());
  ASSERT_TRUE(m->ReleaseLeases(rel).ok());
  EXPECT_EQ(m->EvictBytes(2 * 4096).victims, 2u);
  q.set_with_replicas(false);
  EXPECT_EQ(m->PrefixQuery(q)->matched(), 2u);
  proto::ExistsRequest e;
  e.set_key("k0");
  EXPECT_FALSE(m->Exists(e)->exists());
}

// TryPutStartInline evicts within inline_put_evictions; a put that needs more
// comes back untouched (key free, charge released) for PutStart to finish.
TEST(MasterTest, InlinePutStartDefersWhenItMustEvictMore) {
  FakeClock clock;
  MasterOptions o;
  o.inline_put_evictions = 2;
  auto m = *Master<>::Create(o, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 8 * 4096)).ok());
  auto put = [&](const std::string& key, uint64_t size) {
    auto s = m->PutStart(PutReq(key, size));
    return s.ok() && m->PutEnd(EndReq(key, s->put_id())).ok();
  };
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(put("k" + std::to_string(i), 4096));
  const uint64_t used = m->TenantUsage("")->used_bytes;
  ASSERT_EQ(used, 8u * 4096);

  // Two victims make room: done inline.
  auto small = m->TryPutStartInline(PutReq("two", 2 * 4096));
  ASSERT_TRUE(small.has_value());
  ASSERT_TRUE(small->ok()) << small->status();
  ASSERT_TRUE(m->PutEnd(EndReq("two", (*small)->put_id())).ok());

  // Four would be needed: nothing placed, the key and its charge are free.
  auto big = m->TryPutStartInline(PutReq("four", 4 * 4096));
  EXPECT_FALSE(big.has_value());
  EXPECT_EQ(m->TenantUsage("")->used_bytes, 6u * 4096) << "two objects went; no charge kept";
  proto::ExistsRequest e;
  e.set_key("four");
  EXPECT_FALSE(m->Exists(e)->exists());
  // Where it may take longer, the same put goes through.
  auto again = m->PutStart(PutReq("four", 4 * 4096));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(m->PutEnd(EndReq("four", again->put_id())).ok());
  EXPECT_TRUE(m->Exists(e)->exists());
  // A put that cannot be placed at all keeps no charge either (it used to).
  const uint64_t before = m->TenantUsage("")->used_bytes;
  EXPECT_FALSE(m->PutStart(PutReq("huge", 64 * 4096)).ok());
  EXPECT_EQ(m->TenantUsage("")->used_bytes, before);

  // A budget of 0 defers every put that must evict, and only those.
  o.inline_put_evictions = 0;
  auto strict = *Master<>::Create(o, &clock);
  ASSERT_TRUE(strict->MountSegment(MountReq("w1", "s", 2 * 4096)).ok());
  auto first = strict->TryPutStartInline(PutReq("a", 4096));
  ASSERT_TRUE(first.has_value() && first->ok());
  ASSERT_TRUE(strict->PutEnd(EndReq("a", (*first)->put_id())).ok());
  auto second = strict->TryPutStartInline(PutReq("b", 2 * 4096));
  EXPECT_FALSE(second.has_value());
  // Errors that need no eviction come back inline.
  auto taken = strict->TryPutStartInline(PutReq("a", 4096));
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->status().code(), absl::StatusCode::kAlreadyExists);
}

// An inline PutStart does not sweep a long list of deferred frees (read
// leases on removed objects); it moves to the pool instead, where the sweep
// runs and frees what is due.
TEST(MasterTest, InlinePutStartDefersRatherThanSweepManyDeferredFrees) {
  FakeClock clock;
  MasterOptions o;
  o.default_lease_ms = 1000;
  auto m = *Master<>::Create(o, &clock);
  constexpr int kObjects = 1100;  // more than the inline sweep bound (1024)
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", kObjects * 4096)).ok());
  for (int i = 0; i < kObjects; ++i) {
    const std::string key = "k" + std::to_string(i);
    auto s = m->PutStart(PutReq(key, 4096));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(m->PutEnd(EndReq(key, s->put_id())).ok());
    ASSERT_TRUE(m->GetReplicas(GetReq(key)).ok());  // leased, then removed: deferred
    proto::RemoveRequest rm;
    rm.set_key(key);
    ASSERT_TRUE(m->Remove(rm).ok());
  }
  ASSERT_EQ(m->Stats().deferred_frees, static_cast<size_t>(kObjects));
  clock.AdvanceMs(2000);  // every lease has run out: all due
  EXPECT_FALSE(m->TryPutStartInline(PutReq("new", 4096)).has_value());
  auto done = m->PutStart(PutReq("new", 4096));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(m->Stats().deferred_frees, 0u);
  // With nothing parked the inline path places (and sweeps) again.
  ASSERT_TRUE(m->PutEnd(EndReq("new", done->put_id())).ok());
  auto next = m->TryPutStartInline(PutReq("next", 4096));
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(next->ok()) << next->status();
}

TEST(MasterTest, MetricsReportObjectsUsageAndFragmentation) {
  FakeClock clock;
  MetricsRegistry registry;
  auto m = *Master<>::Create(MasterOptions{}, &clock, &registry);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  auto s = m->PutStart(PutReq("k", 4096));
  ASSERT_TRUE(m->PutEnd(EndReq("k", s->put_id())).ok());
  ASSERT_TRUE(m->GetReplicas(GetReq("k")).ok());
  (void)m->GetReplicas(GetReq("missing"));
  m->Tick();
  const std::string text = registry.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_master_objects 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mooncake_master_worker_used_bytes{worker=\"w1\"} 4096"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_gets_total{result=\"hit\"} 1"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_gets_total{result=\"miss\"} 1"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_puts_total{result=\"committed\"} 1"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_segment_fragmentation{segment=\"1\"}"), std::string::npos);
}

// Tenants are visible: usage, quota and refusals per tenant.
TEST(MasterTest, MetricsShowEachTenantsUsageQuotaAndRefusals) {
  FakeClock clock;
  MetricsRegistry registry;
  MasterOptions o;
  o.tenants = {{"a", 8192, 0}};
  auto m = *Master<>::Create(o, &clock, &registry);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  proto::PutStartRequest put = PutReq("k", 4096);
  put.mutable_options()->set_tenant("a");
  auto s = m->PutStart(put);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(m->PutEnd(EndReq("k", s->put_id())).ok());
  proto::PutStartRequest big = PutReq("big", 8192);
  big.mutable_options()->set_tenant("a");
  EXPECT_FALSE(m->PutStart(big).ok()) << "over a's quota";
  m->Tick();
  const std::string text = registry.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_master_tenant_used_bytes{tenant=\"a\"} 4096\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_master_tenant_capacity_bytes{tenant=\"a\"} 8192\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_master_tenant_refused_total{tenant=\"a\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_master_tenant_used_bytes{tenant=\"default\"} 0\n"),
            std::string::npos)
      << text;
  m->Tick();
  EXPECT_NE(registry.RenderPrometheus().find("tenant_refused_total{tenant=\"a\"} 1\n"),
            std::string::npos)
      << "a second refresh does not count the refusal again";
}

// Per-tenant put rates (TenantConfig::rate_bytes_per_sec): a tenant over its
// rate is refused with a retry hint, another tenant is not, and the refusals
// are counted per tenant.
TEST(MasterTest, ATenantOverItsPutRateIsRefusedAndAnotherIsNot) {
  FakeClock clock;
  MetricsRegistry registry;
  MasterOptions o;
  o.tenants = {{.name = "slow", .capacity_bytes = 1 << 30, .rate_bytes_per_sec = 64 << 10},
               {.name = "fast", .capacity_bytes = 1 << 30}};
  auto m = *Master<>::Create(o, &clock, &registry);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 64 << 20)).ok());
  auto put = [&](const std::string& key, const std::string& tenant, uint64_t size,
                 uint32_t replicas = 1) {
    proto::PutStartRequest r = PutReq(key, size, replicas);
    r.mutable_options()->set_tenant(tenant);
    return m->PutStart(r);
  };
  // One second of burst: 64 KiB; two replicas charge twice the size.
  ASSERT_TRUE(put("s1", "slow", 16 << 10, 1).ok());
  ASSERT_TRUE(m->MountSegment(MountReq("w2", "s", 64 << 20, "host-b")).ok());
  ASSERT_TRUE(put("s2", "slow", 24 << 10, 2).ok());
  absl::StatusOr<proto::PutStartResponse> refused = put("s3", "slow", 1 << 10);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("tenant 'slow' over its put rate of 65536 bytes/s"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("retry in 16 ms"), std::string::npos)
      << refused.status();
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(put("f" + std::to_string(i), "fast", 64 << 10).ok()) << "fast is not limited";
  }
  ASSERT_TRUE(put("d", "", 1 << 20).ok()) << "nor is the default tenant";
  clock.AdvanceMs(16);
  EXPECT_TRUE(put("s3", "slow", 1 << 10).ok()) << "admitted once the hint's wait passed";
  EXPECT_FALSE(put("s4", "slow", 1 << 10).ok());

  m->Tick();
  const std::string text = registry.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_master_tenant_rate_limited_total{tenant=\"slow\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_master_tenant_rate_limited_total{tenant=\"fast\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_master_tenant_refused_total{tenant=\"slow\"} 0\n"),
            std::string::npos)
      << "a rate refusal is not a quota refusal";
}

// Only puts that got their space count against the rate: a PutStart refused
// for another reason gives its tokens back.
TEST(MasterTest, APutRefusedForAnotherReasonSpendsNoRate) {
  FakeClock clock;
  MasterOptions o;
  o.tenants = {{.name = "a", .capacity_bytes = 1 << 30, .rate_bytes_per_sec = 8192}};
  auto m = *Master<>::Create(o, &clock);
  proto::PutStartRequest r = PutReq("k", 8192);
  r.mutable_options()->set_tenant("a");
  EXPECT_EQ(m->PutStart(r).status().code(), absl::StatusCode::kUnavailable) << "no segment";
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  auto started = m->PutStart(r);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(m->PutStart(r).status().code(), absl::StatusCode::kResourceExhausted)
      << "the first placed put spent the burst";
  clock.AdvanceMs(1000);
  EXPECT_EQ(m->PutStart(r).status().code(), absl::StatusCode::kAlreadyExists);
  r.set_key("k2");
  EXPECT_TRUE(m->PutStart(r).ok()) << "the ALREADY_EXISTS gave its tokens back";
}

// A put names how its checksum was computed, in a byte; a format past 255
// is refused before anything is placed, and hot_reads past what an object's
// window counts is refused at Create.
TEST(MasterTest, UnknownChecksumFormatsAndHotReadsPastTheWindowAreRefused) {
  FakeClock clock;
  auto m = *Master<>::Create(MasterOptions{}, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  proto::PutStartRequest r = PutReq("k", 4096);
  r.set_checksum_format(static_cast<proto::ChecksumFormat>(300));
  const absl::Status s = m->PutStart(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("checksum_format 300"), std::string::npos) << s;
  EXPECT_EQ(m->Stats().used_bytes, 0u) << "nothing placed";
  r.set_checksum_format(proto::CHECKSUM_XXH3_CHUNKED);
  ASSERT_TRUE(m->PutStart(r).ok());

  MasterOptions o;
  o.replication.hot_reads = kMaxWindowReads;
  EXPECT_TRUE(Master<>::Create(o, &clock).ok());
  o.replication.hot_reads = kMaxWindowReads + 1;
  EXPECT_EQ(Master<>::Create(o, &clock).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MasterTest, SetTenantRateChangesTheLimitAtRunTime) {
  FakeClock clock;
  MasterOptions o;
  o.tenants = {{.name = "a", .capacity_bytes = 1 << 30}};
  auto m = *Master<>::Create(o, &clock);
  ASSERT_TRUE(m->MountSegment(MountReq("w1", "s", 1 << 20)).ok());
  EXPECT_EQ(m->SetTenantRate("nobody", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m->SetTenantRate("a", kMaxTenantRateBytesPerSec + 1).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m->SetTenantRate("a", 4096).ok());
  auto put = [&](const std::string& key) {
    proto::PutStartRequest r = PutReq(key, 4096);
    r.mutable_options()->set_tenant("a");
    return m->PutStart(r).status();
  };
  ASSERT_TRUE(put("k1").ok());
  EXPECT_EQ(put("k2").code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(m->SetTenantRate("a", 0).ok());
  EXPECT_TRUE(put("k2").ok());
  EXPECT_TRUE(put("k3").ok());
  o.tenants[0].rate_bytes_per_sec = kMaxTenantRateBytesPerSec + 1;
  EXPECT_EQ(Master<>::Create(o, &clock).status().code(), absl::StatusCode::kInvalidArgument);
}

// A worker's and a segment's series live while they are mounted: a master
// that outlives many worker restarts keeps no series of the departed.
TEST(MasterTest, MetricsForgetUnmountedSegmentsAndDepartedWorkers) {
  FakeClock clock;
  MetricsRegistry registry;
  auto m = *Master<>::Create(MasterOptions{}, &clock, &registry);
  auto w1 = m->MountSegment(MountReq("w1", "s", 1 << 20));
  auto w2a = m->MountSegment(MountReq("w2", "a", 1 << 20));
  auto w2b = m->MountSegment(MountReq("w2", "b", 1 << 20));
  ASSERT_TRUE(w1.ok() && w2a.ok() && w2b.ok());
  m->Tick();
  auto has = [&](const std::string& series) {
    return registry.RenderPrometheus().find(series) != std::string::npos;
  };
  const std::string seg_a = absl::StrCat("segment=\"", w2a->segment_id(), "\"");
  const std::string seg_b = absl::StrCat("segment=\"", w2b->segment_id(), "\"");
  ASSERT_TRUE(has("worker_used_bytes{worker=\"w2\"}"));
  ASSERT_TRUE(has(seg_a));
  ASSERT_TRUE(has(seg_b));
  proto::UnmountSegmentRequest un;
  un.set_worker_id("w2");
  un.set_segment_id(w2a->segment_id());
  ASSERT_TRUE(m->UnmountSegment(un).ok());
  m->Tick();
  EXPECT_FALSE(has(seg_a)) << "an unmounted segment's series is dropped";
  EXPECT_TRUE(has(seg_b));
  EXPECT_TRUE(has("worker_used_bytes{worker=\"w2\"}")) << "w2 still has a segment";
  un.set_segment_id(w2b->segment_id());
  ASSERT_TRUE(m->UnmountSegment(un).ok());
  m->Tick();
  EXPECT_FALSE(has(seg_b));
  EXPECT_FALSE(has("worker_used_bytes{worker=\"w2\"}")) << "a departed worker's series is dropped";
  EXPECT_TRUE(has("worker_used_bytes{worker=\"w1\"}"));
  EXPECT_TRUE(has("# TYPE mooncake_master_worker_used_bytes gauge"));
  // A worker that comes back gets its series again.
  ASSERT_TRUE(m->MountSegment(MountReq("w2", "c", 1 << 20)).ok());
  m->Tick();
  EXPECT_TRUE(has("worker_used_bytes{worker=\"w2\"} 0"));
}

}  // namespace
}  // namespace mooncake::master
