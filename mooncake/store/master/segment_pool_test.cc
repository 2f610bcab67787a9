#include "mooncake/store/master/segment_pool.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/alloc/size_class_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"

namespace mooncake::master {
namespace {

store::proto::SegmentDescriptor Desc(const std::string& worker, const std::string& name,
                                     uint64_t size) {
  store::proto::SegmentDescriptor d;
  d.set_worker_id(worker);
  d.set_name(name);
  d.set_size_bytes(size);
  d.mutable_endpoint()->set_host_id("h");
  return d;
}

TEST(SegmentPoolTest, MountAllocateFreeUnmount) {
  SegmentPool<alloc::TlsfAllocator> pool;
  auto id = pool.Mount(Desc("w", "s", 1 << 20));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 1u);
  EXPECT_TRUE(absl::IsAlreadyExists(pool.Mount(Desc("w", "s", 1 << 20)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool.Mount(Desc("", "s", 1 << 20)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(pool.Mount(Desc("w", "t", 0)).status()));
  auto a = pool.Allocate(*id, 1000, 64);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(pool.used_bytes(), 1000u);
  EXPECT_EQ(pool.capacity_bytes(), 1u << 20);
  EXPECT_FALSE(pool.Allocate(*id, 2 << 20, 64).has_value());
  EXPECT_TRUE(pool.Free(*id, *a));
  EXPECT_EQ(pool.used_bytes(), 0u);
  auto b = pool.Allocate(*id, 1000, 64);
  ASSERT_TRUE(pool.Unmount(*id).ok());
  EXPECT_EQ(pool.used_bytes(), 0u);
  EXPECT_EQ(pool.capacity_bytes(), 0u);
  EXPECT_FALSE(pool.Free(*id, *b));  // dropped with its segment
  EXPECT_TRUE(absl::IsNotFound(pool.Unmount(*id)));
  // Ids are never reused.
  EXPECT_EQ(*pool.Mount(Desc("w", "s", 1 << 20)), 2u);
}

TEST(SegmentPoolTest, KvAllocatorThroughAFactory) {
  SegmentPool<alloc::KvAllocator<>> pool([](uint64_t capacity) {
    return alloc::KvAllocator<>::Create(
        alloc::TlsfAllocator({.capacity_bytes = capacity, .granularity_bytes = 64}),
        alloc::SizeClassOptions{.class_bytes = {4096}});
  });
  const uint64_t id = *pool.Mount(Desc("w", "s", 1 << 20));
  auto a = pool.Allocate(id, 4096, 64);
  ASSERT_TRUE(a.has_value());
  auto snap = pool.Snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].used_bytes, 4096u);
  EXPECT_EQ(snap[0].host_id, "h");
  EXPECT_TRUE(pool.Free(id, *a));
}

TEST(SegmentPoolTest, CandidatesAreSharedUntilAMountOrUnmount) {
  SegmentPool<alloc::TlsfAllocator> pool;
  EXPECT_TRUE(pool.Candidates()->segments.empty());
  const uint64_t a = *pool.Mount(Desc("w1", "dram", 1 << 20));
  const uint64_t b = *pool.Mount(Desc("w1", "ssd", 1 << 20));
  const uint64_t c = *pool.Mount(Desc("w2", "dram", 1 << 20));
  std::shared_ptr<const SegmentTable> t = pool.Candidates();
  EXPECT_EQ(pool.Candidates(), t);  // no Mount/Unmount: the same table
  ASSERT_EQ(t->segments.size(), 3u);
  EXPECT_EQ(t->segments[0].id, a);
  EXPECT_EQ(t->segments[1].id, b);
  EXPECT_EQ(t->segments[2].id, c);
  EXPECT_EQ(t->segments[0].worker, t->segments[1].worker);
  EXPECT_NE(t->segments[0].worker, t->segments[2].worker);
  EXPECT_EQ(t->segments[0].name, t->segments[2].name);
  EXPECT_EQ(t->worker_ids[t->segments[2].worker], "w2");
  EXPECT_EQ(t->names[t->segments[1].name], "ssd");
  EXPECT_EQ(t->HostIndex("h"), t->segments[0].host);
  EXPECT_EQ(t->HostIndex("elsewhere"), SegmentTable::kNoIndex);
  EXPECT_EQ(t->NameIndex("hbm"), SegmentTable::kNoIndex);
  // Loads are live, not copied into the table.
  auto alloc = pool.Allocate(b, 4096, 64);
  ASSERT_TRUE(alloc.has_value());
  EXPECT_EQ(t->segments[1].used_bytes->load(), 4096u);

  ASSERT_TRUE(pool.Unmount(b).ok());
  std::shared_ptr<const SegmentTable> after = pool.Candidates();
  EXPECT_NE(after, t);
  EXPECT_GT(after->generation, t->generation);
  ASSERT_EQ(after->segments.size(), 2u);
  EXPECT_EQ(after->segments[1].id, c);
  // The old table stays readable after the unmount; its segment is gone from the pool.
  EXPECT_EQ(t->segments[1].used_bytes->load(), 4096u);
  EXPECT_EQ(t->names[t->segments[1].name], "ssd");
  EXPECT_FALSE(pool.Allocate(t->segments[1].id, 64, 64).has_value());

  const uint64_t d = *pool.Mount(Desc("w3", "dram", 1 << 20));
  ASSERT_EQ(pool.Candidates()->segments.size(), 3u);
  EXPECT_EQ(pool.Candidates()->segments[2].id, d);
  EXPECT_EQ(pool.Candidates()->worker_ids.size(), 3u);
}

TEST(SegmentPoolTest, CandidatesRacingMountsSeeWholeTables) {
  SegmentPool<alloc::TlsfAllocator> pool;
  std::thread t([&] {
    for (int i = 0; i < 200; ++i) {
      const uint64_t id = *pool.Mount(Desc("w" + std::to_string(i), "s", 1 << 16));
      if (i % 2 == 0) {
        EXPECT_TRUE(pool.Unmount(id).ok());
      }
    }
  });
  for (int i = 0; i < 2000; ++i) {
    std::shared_ptr<const SegmentTable> table = pool.Candidates();
    for (size_t j = 1; j < table->segments.size(); ++j) {
      ASSERT_LT(table->segments[j - 1].id, table->segments[j].id);
    }
    for (const SegmentTable::Entry& e : table->segments) {
      ASSERT_LT(e.worker, table->worker_ids.size());
      ASSERT_EQ(e.capacity_bytes, 1u << 16);
    }
  }
  t.join();
  EXPECT_EQ(pool.Candidates()->segments.size(), 100u);
}

TEST(SegmentPoolTest, UnmountRacingAllocationsKeepsTotalsExact) {
  SegmentPool<alloc::TlsfAllocator> pool;
  for (int round = 0; round < 20; ++round) {
    const uint64_t id = *pool.Mount(Desc("w", "s" + std::to_string(round), 1 << 20));
    std::thread t([&] {
      for (int i = 0; i < 200; ++i) {
        if (auto a = pool.Allocate(id, 512, 64); a.has_value() && i % 2 == 0) pool.Free(id, *a);
      }
    });
    ASSERT_TRUE(pool.Unmount(id).ok());
    t.join();
    EXPECT_EQ(pool.used_bytes(), 0u);
    EXPECT_EQ(pool.capacity_bytes(), 0u);
  }
}

TEST(SegmentPoolTest, MountWithIdRestoresIdsInAnyOrder) {
  SegmentPool<alloc::TlsfAllocator> pool;
  ASSERT_TRUE(pool.MountWithId(7, Desc("w1", "dram", 1 << 20)).ok());
  ASSERT_TRUE(pool.MountWithId(3, Desc("w2", "dram", 1 << 20)).ok());
  EXPECT_EQ(pool.next_id(), 8u);
  EXPECT_TRUE(pool.Contains(7));
  EXPECT_TRUE(pool.Contains(3));
  EXPECT_EQ(pool.capacity_bytes(), 2u << 20);
  EXPECT_EQ(pool.Descriptor(3)->worker_id(), "w2");
  // Taken ids and names.
  EXPECT_TRUE(absl::IsAlreadyExists(pool.MountWithId(7, Desc("w3", "dram", 1 << 20))));
  EXPECT_TRUE(absl::IsAlreadyExists(pool.MountWithId(5, Desc("w1", "dram", 1 << 20))));
  // Same validation as Mount.
  EXPECT_TRUE(absl::IsInvalidArgument(pool.MountWithId(5, Desc("", "s", 1 << 20))));
  EXPECT_TRUE(absl::IsInvalidArgument(pool.MountWithId(5, Desc("w3", "s", 0))));
  EXPECT_TRUE(absl::IsInvalidArgument(pool.MountWithId(0, Desc("w3", "s", 1 << 20))));
  EXPECT_TRUE(absl::IsInvalidArgument(pool.MountWithId(UINT64_MAX, Desc("w3", "s", 1 << 20))));
  // Skipped ids are unknown, not unmounted, until restored.
  EXPECT_EQ(pool.Describe(5).first, SegmentPool<alloc::TlsfAllocator>::IdState::kUnknown);
  EXPECT_EQ(pool.Describe(1).first, SegmentPool<alloc::TlsfAllocator>::IdState::kUnknown);
  ASSERT_TRUE(pool.MountWithId(5, Desc("w3", "dram", 1 << 20)).ok());
  ASSERT_TRUE(pool.MountWithId(1, Desc("w4", "dram", 1 << 20)).ok());
  // Mount never reuses a restored id.
  const absl::StatusOr<uint64_t> fresh = pool.Mount(Desc("w5", "dram", 1 << 20));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, 8u);
  // An unmounted id is never mounted again, with or without an id.
  ASSERT_TRUE(pool.Unmount(5).ok());
  EXPECT_EQ(pool.Describe(5).first, SegmentPool<alloc::TlsfAllocator>::IdState::kUnmounted);
  EXPECT_TRUE(absl::IsAlreadyExists(pool.MountWithId(5, Desc("w3", "dram", 1 << 20))));
  EXPECT_EQ(*pool.Mount(Desc("w3", "dram", 1 << 20)), 9u);
  // The ids still never given out remain restorable.
  ASSERT_TRUE(pool.MountWithId(2, Desc("w6", "dram", 1 << 20)).ok());
  ASSERT_TRUE(pool.MountWithId(6, Desc("w7", "dram", 1 << 20)).ok());
  EXPECT_EQ(pool.Describe(4).first, SegmentPool<alloc::TlsfAllocator>::IdState::kUnknown);
  std::vector<uint64_t> ids;
  for (const SegmentTable::Entry& e : pool.Candidates()->segments) ids.push_back(e.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 6, 7, 8, 9}));
}

TEST(SegmentPoolTest, MountWithIdRefreshesCandidates) {
  SegmentPool<alloc::TlsfAllocator> pool;
  const uint64_t a = *pool.Mount(Desc("w1", "dram", 1 << 20));
  std::shared_ptr<const SegmentTable> before = pool.Candidates();
  ASSERT_TRUE(pool.MountWithId(10, Desc("w2", "dram", 1 << 20)).ok());
  std::shared_ptr<const SegmentTable> after = pool.Candidates();
  EXPECT_GT(after->generation, before->generation);
  ASSERT_EQ(after->segments.size(), 2u);
  EXPECT_EQ(after->segments[0].id, a);
  EXPECT_EQ(after->segments[1].id, 10u);
  EXPECT_EQ(after->worker_ids[after->segments[1].worker], "w2");
  // A refused MountWithId leaves the table alone.
  EXPECT_FALSE(pool.MountWithId(10, Desc("w3", "dram", 1 << 20)).ok());
  EXPECT_EQ(pool.Candidates(), after);
}

TEST(SegmentPoolTest, ClaimRebuildsUsedBytesAndFrees) {
  SegmentPool<alloc::TlsfAllocator> pool;
  ASSERT_TRUE(pool.MountWithId(4, Desc("w", "dram", 1 << 20)).ok());
  std::shared_ptr<const SegmentTable> t = pool.Candidates();
  std::optional<alloc::Allocation> x = pool.Claim(4, 0, 1000);
  std::optional<alloc::Allocation> y = pool.Claim(4, 4096, 64);
  ASSERT_TRUE(x.has_value() && y.has_value());
  EXPECT_EQ(x->offset, 0u);
  EXPECT_EQ(y->offset, 4096u);
  EXPECT_EQ(pool.used_bytes(), 1064u);
  EXPECT_EQ(pool.Snapshot()[0].used_bytes, 1064u);
  EXPECT_EQ(t->segments[0].used_bytes->load(), 1064u);
  EXPECT_EQ(pool.Candidates(), t);  // a claim is not a Mount/Unmount
  EXPECT_EQ(pool.Stats(4)->live_allocations, 2u);
  // Taken, misaligned, out of range, unknown segment: refused, totals unchanged.
  EXPECT_FALSE(pool.Claim(4, 512, 64).has_value());
  EXPECT_FALSE(pool.Claim(4, 4100, 64).has_value());
  EXPECT_FALSE(pool.Claim(4, 1 << 20, 64).has_value());
  EXPECT_FALSE(pool.Claim(5, 0, 64).has_value());
  EXPECT_EQ(pool.used_bytes(), 1064u);
  // allocate() keeps off claimed bytes; Free takes claims back.
  std::optional<alloc::Allocation> z = pool.Allocate(4, 2048, 64);
  ASSERT_TRUE(z.has_value());
  EXPECT_TRUE(z->offset >= 4096 + 64 || z->offset + 2048 <= 4096);
  EXPECT_GE(z->offset, 1024u);
  EXPECT_TRUE(pool.Free(4, *x));
  EXPECT_TRUE(pool.Free(4, *y));
  EXPECT_TRUE(pool.Free(4, *z));
  EXPECT_EQ(pool.used_bytes(), 0u);
  // Claims into an unmounted segment fail and leave the totals alone.
  std::optional<alloc::Allocation> w = pool.Claim(4, 0, 64);
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE(pool.Unmount(4).ok());
  EXPECT_EQ(pool.used_bytes(), 0u);
  EXPECT_FALSE(pool.Claim(4, 64, 64).has_value());
}

template <typename P>
concept PoolCanClaim = requires(P& p) {
  p.Claim(uint64_t{1}, uint64_t{0}, uint64_t{64});
};
static_assert(PoolCanClaim<SegmentPool<alloc::TlsfAllocator>>);
static_assert(PoolCanClaim<SegmentPool<alloc::KvAllocator<>>>);  // claims on its TLSF backing
// A slab alone has no Claim.
static_assert(!PoolCanClaim<SegmentPool<alloc::SizeClassAllocator<alloc::TlsfAllocator>>>);

}  // namespace
}  // namespace mooncake::master
