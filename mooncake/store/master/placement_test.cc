#include "mooncake/store/master/placement.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::master {
namespace {

std::vector<SegmentView> Segs() {
  return {SegmentView{1, "w1", "ha", "s", 1000, 900}, SegmentView{2, "w2", "hb", "s", 1000, 100},
          SegmentView{3, "w3", "ha", "s", 1000, 500}, SegmentView{4, "w4", "hc", "s", 10, 0}};
}

TEST(PlacementTest, LeastLoadedOrdersByUseAndSkipsSmallSegments) {
  const auto segs = Segs();
  auto order = OrderCandidates(segs, {.size_bytes = 100}, PlacementStrategy::kLeastLoaded);
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0}));
}

TEST(PlacementTest, ClientLocalFirstThenLeastLoaded) {
  const auto segs = Segs();
  auto order = OrderCandidates(segs, {.size_bytes = 100, .client_host_id = "ha"},
                               PlacementStrategy::kClientLocalFirst);
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 1}));
}

TEST(PlacementTest, PreferredSegmentGoesFirst) {
  const auto segs = Segs();
  auto order = OrderCandidates(segs, {.size_bytes = 100, .preferred_segment_id = 1},
                               PlacementStrategy::kLeastLoaded);
  EXPECT_EQ(order.front(), 0u);
}

TEST(PlacementTest, ExcludedSegmentsAreNeverCandidates) {
  const auto segs = Segs();
  const uint64_t excluded[] = {2, 3};
  for (PlacementStrategy strategy : {PlacementStrategy::kLeastLoaded, PlacementStrategy::kRandom,
                                     PlacementStrategy::kClientLocalFirst}) {
    auto order = OrderCandidates(segs,
                                 {.size_bytes = 100,
                                  .preferred_segment_id = 2,
                                  .client_host_id = "ha",
                                  .excluded_segment_ids = excluded},
                                 strategy);
    EXPECT_EQ(order, (std::vector<size_t>{0}));
  }
  EXPECT_EQ(WorkersThatFit(segs, {.size_bytes = 100, .excluded_segment_ids = excluded}), 1u);
}

TEST(PlacementTest, RandomIsSeededAndSpreads) {
  const auto segs = Segs();
  std::set<size_t> firsts;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    auto a = OrderCandidates(segs, {.size_bytes = 100, .seed = seed}, PlacementStrategy::kRandom);
    auto b = OrderCandidates(segs, {.size_bytes = 100, .seed = seed}, PlacementStrategy::kRandom);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a.size(), 3u);
    firsts.insert(a.front());
  }
  EXPECT_EQ(firsts.size(), 3u);
}

store::proto::SegmentDescriptor Desc(const std::string& w, const std::string& n, uint64_t size) {
  store::proto::SegmentDescriptor d;
  d.set_worker_id(w);
  d.set_name(n);
  d.set_size_bytes(size);
  return d;
}

TEST(PlacementTest, ReplicasOnDistinctWorkersOrNothing) {
  SegmentPool<alloc::TlsfAllocator> pool;
  bool shortfall = false;
  EXPECT_TRUE(absl::IsUnavailable(
      PlaceReplicas(pool, {.size_bytes = 64}, PlacementStrategy::kLeastLoaded, &shortfall)
          .status()));
  ASSERT_TRUE(pool.Mount(Desc("w1", "a", 4096)).ok());
  ASSERT_TRUE(pool.Mount(Desc("w1", "b", 4096)).ok());
  auto two = PlaceReplicas(pool, {.size_bytes = 64, .replica_count = 2},
                           PlacementStrategy::kLeastLoaded, &shortfall);
  EXPECT_TRUE(absl::IsResourceExhausted(two.status()));
  EXPECT_FALSE(shortfall);  // not a space problem: eviction cannot help
  ASSERT_TRUE(pool.Mount(Desc("w2", "a", 128)).ok());
  two = PlaceReplicas(pool, {.size_bytes = 64, .replica_count = 2}, PlacementStrategy::kLeastLoaded,
                      &shortfall);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_NE((*two)[0].worker_id, (*two)[1].worker_id);
  // w2 is now half full; two more: w2 fits one, w1 plenty; then w2 is full.
  ASSERT_TRUE(PlaceReplicas(pool, {.size_bytes = 64, .replica_count = 2},
                            PlacementStrategy::kLeastLoaded, &shortfall)
                  .ok());
  const uint64_t used = pool.used_bytes();
  auto full = PlaceReplicas(pool, {.size_bytes = 64, .replica_count = 2},
                            PlacementStrategy::kLeastLoaded, &shortfall);
  EXPECT_TRUE(absl::IsResourceExhausted(full.status()));
  EXPECT_TRUE(shortfall);
  EXPECT_EQ(pool.used_bytes(), used);  // the partial placement was undone
}

}  // namespace
}  // namespace mooncake::master
