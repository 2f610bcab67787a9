#include "mooncake/tier/internal/file_space.h"

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

constexpr uint64_t kB = kBlockBytes;

TEST(FileSpaceTest, RebuildReservesTheGivenExtentsAndFreesTheGaps) {
  FileSpace space;
  absl::StatusOr<std::vector<alloc::Allocation>> got =
      space.Rebuild(0, 64 * kB, {2 * kB, 10 * kB}, {3 * kB, 4 * kB});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].offset, 2 * kB);
  EXPECT_EQ((*got)[1].offset, 10 * kB);
  // Everything else is free again: 64 - 7 blocks, and no new extent overlaps the two.
  std::vector<alloc::Allocation> taken;
  while (auto a = space.Allocate(kB)) taken.push_back(a->second);
  EXPECT_EQ(taken.size(), 57u);
  for (const alloc::Allocation& a : taken) {
    EXPECT_FALSE(a.offset >= 2 * kB && a.offset < 5 * kB) << a.offset;
    EXPECT_FALSE(a.offset >= 10 * kB && a.offset < 14 * kB) << a.offset;
  }
}

TEST(FileSpaceTest, RebuildRefusesOverlappingExtents) {
  FileSpace space;
  EXPECT_EQ(space.Rebuild(0, 64 * kB, {0, 2 * kB}, {4 * kB, kB}).status().code(),
            absl::StatusCode::kInternal);
}

TEST(FileSpaceTest, AllocateTakesTheFilesInTurnAndReportsFull) {
  FileSpace space;
  ASSERT_TRUE(space.Rebuild(0, 8 * kB, {}, {}).ok());
  ASSERT_TRUE(space.Rebuild(1, 8 * kB, {}, {}).ok());
  std::set<uint32_t> files;
  for (int i = 0; i < 4; ++i) files.insert(space.Allocate(kB)->first);
  EXPECT_EQ(files.size(), 2u);
  EXPECT_FALSE(space.Allocate(16 * kB).has_value());  // larger than any file
  // Fill both, then a freed extent is found again.
  std::optional<std::pair<uint32_t, alloc::Allocation>> last;
  while (auto a = space.Allocate(kB)) last = a;
  ASSERT_TRUE(last.has_value());
  EXPECT_FALSE(space.Allocate(kB).has_value());
  space.Free(last->first, last->second);
  EXPECT_TRUE(space.Allocate(kB).has_value());
}

TEST(FileSpaceTest, AllocateInAndLargestFree) {
  FileSpace space;
  ASSERT_TRUE(space.Rebuild(0, 32 * kB, {}, {}).ok());
  EXPECT_EQ(space.LargestFreeBytes(0), 32 * kB);
  std::optional<alloc::Allocation> a = space.AllocateIn(0, 16 * kB);
  ASSERT_TRUE(a.has_value());
  EXPECT_LE(space.LargestFreeBytes(0), 16 * kB);
  space.Free(0, *a);
  EXPECT_EQ(space.LargestFreeBytes(0), 32 * kB);
}

TEST(FileSpaceTest, ConcurrentAllocateAndFreeNeverHandOutOneExtentTwice) {
  FileSpace space;
  ASSERT_TRUE(space.Rebuild(0, 256 * kB, {}, {}).ok());
  ASSERT_TRUE(space.Rebuild(1, 256 * kB, {}, {}).ok());
  std::vector<std::thread> threads;
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> held(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        auto a = space.Allocate(kB);
        if (!a) continue;
        if (i % 2 == 0) {
          space.Free(a->first, a->second);
        } else if (held[t].size() < 20) {
          held[t].emplace_back(a->first, a->second.offset);
        } else {
          space.Free(a->first, a->second);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::pair<uint32_t, uint64_t>> all;
  for (const auto& h : held) all.insert(h.begin(), h.end());
  EXPECT_EQ(all.size(), 80u);
}

}  // namespace
}  // namespace mooncake::tier_internal
