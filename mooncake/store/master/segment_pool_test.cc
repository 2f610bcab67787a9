#include "mooncake/store/master/segment_pool.h"

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
