#include "mooncake/store/master/segment_pool.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/alloc/kv_allocator.h"

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

}  // namespace
}  // namespace mooncake::master
