#include "mooncake/store/master/placement.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <string_view>
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

store::proto::SegmentDescriptor Desc(const std::string& w, const std::string& n, uint64_t size,
                                     const std::string& host = "") {
  store::proto::SegmentDescriptor d;
  d.set_worker_id(w);
  d.set_name(n);
  d.set_size_bytes(size);
  d.mutable_endpoint()->set_host_id(host);
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

TEST(PlacementTest, MountAndUnmountBetweenPutsChangePlacement) {
  SegmentPool<alloc::TlsfAllocator> pool;
  bool shortfall = false;
  const uint64_t a = *pool.Mount(Desc("w1", "dram", 1 << 20));
  auto place = [&] {
    auto r = PlaceReplicas(pool, {.size_bytes = 4096}, PlacementStrategy::kLeastLoaded, &shortfall);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0].segment_id : 0;
  };
  EXPECT_EQ(place(), a);
  EXPECT_EQ(place(), a);
  const uint64_t b = *pool.Mount(Desc("w2", "dram", 1 << 20));  // empty: now the least loaded
  EXPECT_EQ(place(), b);
  EXPECT_EQ(place(), b);
  ASSERT_TRUE(pool.Unmount(b).ok());
  EXPECT_EQ(place(), a);
  const uint64_t c = *pool.Mount(Desc("w3", "dram", 1 << 20));
  EXPECT_EQ(place(), c);
  // A worker mounted after a put that could not place two replicas makes it fit.
  ASSERT_TRUE(pool.Unmount(a).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(PlaceReplicas(pool, {.size_bytes = 64, .replica_count = 2},
                                                      PlacementStrategy::kLeastLoaded, &shortfall)
                                            .status()));
  EXPECT_FALSE(shortfall);
  const uint64_t d = *pool.Mount(Desc("w4", "dram", 1 << 20));
  auto two = PlaceReplicas(pool, {.size_bytes = 64, .replica_count = 2},
                           PlacementStrategy::kLeastLoaded, &shortfall);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(std::set<uint64_t>({(*two)[0].segment_id, (*two)[1].segment_id}),
            std::set<uint64_t>({c, d}));
  EXPECT_EQ((*two)[1].worker_id, (*two)[0].segment_id == d ? "w3" : "w4");
}

// The placement as first written: a full snapshot, a full sort, string sets.
// PlaceReplicas must choose exactly as this does.
template <alloc::Allocator A>
absl::StatusOr<ReplicaList> ReferencePlaceReplicas(SegmentPool<A>& pool,
                                                   const PlacementRequest& req,
                                                   PlacementStrategy strategy,
                                                   bool* space_shortfall) {
  *space_shortfall = false;
  const std::vector<SegmentView> segments = pool.Snapshot();
  if (segments.empty()) return absl::UnavailableError("none");
  auto fits = [&](const SegmentView& s) {
    return s.capacity_bytes >= req.size_bytes &&
           std::find(req.excluded_segment_ids.begin(), req.excluded_segment_ids.end(), s.id) ==
               req.excluded_segment_ids.end();
  };
  std::set<std::string> fit_workers;
  for (const SegmentView& s : segments) {
    if (fits(s)) fit_workers.insert(s.worker_id);
  }
  if (fit_workers.size() < req.replica_count) return absl::ResourceExhaustedError("workers");
  std::vector<size_t> order;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (fits(segments[i])) order.push_back(i);
  }
  auto rank = [&](size_t i) {
    if (req.preferred_segment_id != 0 && segments[i].id == req.preferred_segment_id) return 0;
    if (strategy == PlacementStrategy::kClientLocalFirst && !req.client_host_id.empty() &&
        segments[i].host_id == req.client_host_id) {
      return 1;
    }
    return 2;
  };
  auto load = [&](size_t i) {
    return static_cast<double>(segments[i].used_bytes) /
           static_cast<double>(segments[i].capacity_bytes);
  };
  auto hash = [&](size_t i) {
    uint64_t words[2] = {segments[i].id, req.seed};
    return StableHash64(words, sizeof(words));
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (strategy == PlacementStrategy::kRandom) return hash(a) < hash(b);
    if (load(a) != load(b)) return load(a) < load(b);
    return segments[a].id < segments[b].id;
  });
  ReplicaList placed;
  std::set<std::string> used_workers;
  auto try_place = [&](const SegmentView& s) {
    if (used_workers.contains(s.worker_id)) return false;
    auto a = pool.Allocate(s.id, req.size_bytes, req.alignment_bytes);
    if (!a.has_value()) return false;
    used_workers.insert(s.worker_id);
    placed.push_back(Replica{s.id, s.worker_id, s.host_id, *a, ReplicaState::kAllocated});
    return true;
  };
  for (size_t n = 0; n < req.preferred_segment_names.size() && placed.empty(); ++n) {
    for (size_t i : order) {
      if (segments[i].name == req.preferred_segment_names[n] && try_place(segments[i])) break;
    }
  }
  for (size_t i : order) {
    if (placed.size() == req.replica_count) break;
    try_place(segments[i]);
  }
  if (placed.size() == req.replica_count) return placed;
  for (const Replica& r : placed) pool.Free(r.segment_id, r.allocation);
  *space_shortfall = true;
  return absl::ResourceExhaustedError("space");
}

// Two pools mounted and filled alike; every put goes to one through
// PlaceReplicas and to the other through the reference, and both must
// choose the same segments (and offsets, so the pools stay alike).
TEST(PlacementTest, ChoosesAsTheFullSortAmongAThousandSegments) {
  std::mt19937_64 rng(20240611);
  const std::string_view names[] = {"dram", "ssd", "hbm"};
  SegmentPool<alloc::TlsfAllocator> fast;
  SegmentPool<alloc::TlsfAllocator> reference;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) {
    // ~400 workers on ~50 hosts; most segments named "dram", "ssd" or "hbm"
    // (a name is unique only per worker: a repeat gets the index appended).
    const int worker = static_cast<int>(rng() % 400);
    auto desc = Desc("worker-" + std::to_string(worker), std::string(names[rng() % 3]),
                     (1 + rng() % 64) * 4096, "host-" + std::to_string(worker % 50));
    auto a = fast.Mount(desc);
    if (absl::IsAlreadyExists(a.status())) {
      desc.set_name(desc.name() + std::to_string(i));
      a = fast.Mount(desc);
    }
    auto b = reference.Mount(desc);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(*a, *b);
    ids.push_back(*a);
  }
  std::vector<std::string> name_pool(std::begin(names), std::end(names));
  for (int i = 0; i < 1000; i += 97) {
    name_pool.push_back(fast.Descriptor(ids[static_cast<size_t>(i)])->name());
  }
  const PlacementStrategy strategies[] = {PlacementStrategy::kLeastLoaded,
                                          PlacementStrategy::kRandom,
                                          PlacementStrategy::kClientLocalFirst};
  int placed = 0;
  int short_of_space = 0;
  for (int put = 0; put < 3000; ++put) {
    std::vector<uint64_t> excluded;
    for (uint64_t e = rng() % 4; e > 0; --e) excluded.push_back(ids[rng() % ids.size()]);
    std::vector<std::string_view> preferred;
    if (rng() % 4 == 0) preferred.push_back(name_pool[rng() % name_pool.size()]);
    if (rng() % 8 == 0) preferred.push_back("no-such-segment");
    const std::string host = "host-" + std::to_string(rng() % 60);
    const PlacementRequest req{
        .size_bytes = 64 + rng() % (put < 2000 ? 16384 : 262144),
        .replica_count = static_cast<uint32_t>(1 + rng() % 3),
        .preferred_segment_id = rng() % 4 == 0 ? ids[rng() % ids.size()] : 0,
        .preferred_segment_names = preferred,
        .client_host_id = rng() % 2 == 0 ? std::string_view(host) : std::string_view(),
        .excluded_segment_ids = excluded,
        .seed = rng()};
    const PlacementStrategy strategy = strategies[rng() % 3];
    bool fast_short = false;
    bool ref_short = false;
    auto got = PlaceReplicas(fast, req, strategy, &fast_short);
    auto want = ReferencePlaceReplicas(reference, req, strategy, &ref_short);
    ASSERT_EQ(got.status().code(), want.status().code()) << "put " << put << ": " << got.status();
    ASSERT_EQ(fast_short, ref_short) << "put " << put;
    if (!got.ok()) {
      short_of_space += fast_short ? 1 : 0;
      continue;
    }
    ++placed;
    ASSERT_EQ(got->size(), want->size());
    for (size_t r = 0; r < got->size(); ++r) {
      ASSERT_EQ((*got)[r].segment_id, (*want)[r].segment_id) << "put " << put << " replica " << r;
      ASSERT_EQ((*got)[r].allocation.offset, (*want)[r].allocation.offset);
      ASSERT_EQ((*got)[r].worker_id, (*want)[r].worker_id);
      ASSERT_EQ((*got)[r].host_id, (*want)[r].host_id);
    }
    // Churn: a few mounts and unmounts between puts, alike in both pools.
    if (put % 250 == 249) {
      const size_t victim = rng() % ids.size();
      ASSERT_TRUE(fast.Unmount(ids[victim]).ok());
      ASSERT_TRUE(reference.Unmount(ids[victim]).ok());
      const auto desc = Desc("late-" + std::to_string(put), "dram", 1 << 20, "host-late");
      ids[victim] = *fast.Mount(desc);
      ASSERT_EQ(*reference.Mount(desc), ids[victim]);
    }
  }
  EXPECT_EQ(fast.used_bytes(), reference.used_bytes());
  // The run covered both outcomes: the pools fill up towards the end.
  EXPECT_GT(placed, 1000);
  EXPECT_GT(short_of_space, 10);
}

}  // namespace
}  // namespace mooncake::master
