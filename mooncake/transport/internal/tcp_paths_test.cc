#include "mooncake/transport/internal/tcp_paths.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"

namespace mooncake::transport_internal {
namespace {

using Pairs = std::vector<std::pair<int, int>>;

TEST(PairPathsTest, UnboundPathPerPeerAddress) {
  const std::vector<std::string> remote = {"10.0.1.2", "10.0.2.2"};
  EXPECT_EQ(PairPaths({}, remote), (Pairs{{-1, 0}, {-1, 1}}));
}

TEST(PairPathsTest, EveryLocalAddressToASinglePeerAddress) {
  const std::vector<std::string> local = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};
  const std::vector<std::string> remote = {"127.0.0.1"};
  EXPECT_EQ(PairPaths(local, remote), (Pairs{{0, 0}, {1, 0}, {2, 0}}));
}

TEST(PairPathsTest, EachPeerAddressTakesTheLocalAddressOfItsSubnet) {
  const std::vector<std::string> local = {"10.0.2.1", "10.0.1.1"};
  const std::vector<std::string> remote = {"10.0.1.2", "10.0.2.2"};
  EXPECT_EQ(PairPaths(local, remote), (Pairs{{1, 0}, {0, 1}}));
  // No common subnet: by index.
  const std::vector<std::string> far = {"192.168.0.5", "172.16.0.5"};
  EXPECT_EQ(PairPaths(std::vector<std::string>{"10.9.0.1", "10.8.0.1"}, far),
            (Pairs{{0, 0}, {1, 1}}));
}

TEST(PairPathsTest, CommonPrefixBits) {
  EXPECT_EQ(CommonPrefixBits("10.0.1.1", "10.0.1.2"), 30);
  EXPECT_EQ(CommonPrefixBits("10.0.1.1", "10.0.1.1"), 32);
  EXPECT_EQ(CommonPrefixBits("10.0.1.1", "::1"), 0);
  EXPECT_EQ(CommonPrefixBits("eth0", "eth0"), 0);
}

TEST(CapacityEstimatorTest, MeasuresBytesPerBusySecond) {
  FakeClock clock(1'000'000'000);
  CapacityEstimator est(&clock, /*sample_ns=*/10'000'000, /*alpha=*/1.0);
  EXPECT_EQ(est.bytes_per_s(), 0);
  est.Started(4);
  for (int i = 0; i < 4; ++i) {
    clock.AdvanceMs(5);
    est.Finished(1 << 20);  // 1 MiB per 5 ms = 200 MiB/s
  }
  EXPECT_NEAR(est.bytes_per_s(), 200.0 * (1 << 20), 1e3);
  // Idle time is not counted against it.
  clock.AdvanceMs(1000);
  est.Started(2);
  clock.AdvanceMs(10);
  est.Finished(1 << 20);
  clock.AdvanceMs(10);
  est.Finished(1 << 20);  // 100 MiB/s while busy
  EXPECT_NEAR(est.bytes_per_s(), 100.0 * (1 << 20), 1e3);
}

TEST(CapacityEstimatorTest, ASampleAlsoClosesOnBytes) {
  FakeClock clock;
  CapacityEstimator est(&clock, /*sample_ns=*/1'000'000'000, 1.0, /*sample_bytes=*/2 << 20);
  est.Started(2);
  clock.AdvanceMs(1);
  est.Finished(1 << 20);
  EXPECT_EQ(est.bytes_per_s(), 0);  // neither 1 s busy nor 2 MiB yet
  clock.AdvanceMs(1);
  est.Finished(1 << 20);  // 2 MiB in 2 ms
  EXPECT_NEAR(est.bytes_per_s(), 1e9 * (1 << 20) / 1e6, 1e3);
}

TEST(CapacityEstimatorTest, EwmaFoldsSamples) {
  FakeClock clock;
  CapacityEstimator est(&clock, 10'000'000, 0.5);
  est.Started(2);
  clock.AdvanceMs(10);
  est.Finished(1'000'000);  // 100 MB/s
  clock.AdvanceMs(10);
  est.Finished(3'000'000);  // 300 MB/s
  EXPECT_NEAR(est.bytes_per_s(), 200e6, 1);
}

TEST(PathPickerTest, SplitsBytesByWeight) {
  PathPicker picker(2);
  const std::vector<double> w = {3, 1};
  std::vector<int> n(2, 0);
  for (int i = 0; i < 400; ++i) ++n[picker.Pick(w, 1 << 20)];
  EXPECT_EQ(n[0], 300);
  EXPECT_EQ(n[1], 100);
}

TEST(PathPickerTest, ZeroWeightIsNeverPickedAndRejoinsWithoutABurst) {
  PathPicker picker(2);
  const std::vector<double> both = {1, 1}, first = {1, 0};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(picker.Pick(first, 100), 0u);
  // Back: it alternates with path 0 instead of taking the next 100 picks.
  std::vector<int> n(2, 0);
  for (int i = 0; i < 10; ++i) ++n[picker.Pick(both, 100)];
  EXPECT_EQ(n[0], 5);
  EXPECT_EQ(n[1], 5);
}

TEST(RescueQueueTest, ClosedQueueRefusesAndReturnsLeftovers) {
  RescueQueue q;
  Slice s;
  s.length = 7;
  EXPECT_TRUE(q.Push(nullptr, s));
  auto left = q.Close();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].slice.length, 7u);
  Slice t;
  t.length = 9;
  EXPECT_FALSE(q.Push(nullptr, t));
  EXPECT_EQ(t.length, 9u);  // untouched
  bool open = true;
  EXPECT_TRUE(q.Take(absl::InfinitePast(), &open).empty());
  EXPECT_FALSE(open);
}

TEST(SprayWeightsTest, ConfiguredUntilEveryUpPathIsMeasured) {
  FakeClock clock;
  RescueQueue q;
  MetricsRegistry registry;
  PathState a({"a", 2}, &clock, &q, nullptr, registry, "tcp");
  PathState b({"b", 1}, &clock, &q, nullptr, registry, "tcp");
  std::vector<PathState*> paths = {&a, &b};
  EXPECT_EQ(SprayWeights(paths), (std::vector<double>{2, 1}));
  EXPECT_TRUE(a.MarkDown(absl::UnavailableError("x")));
  EXPECT_FALSE(a.MarkDown(absl::UnavailableError("x")));  // already down: one failure
  EXPECT_EQ(SprayWeights(paths), (std::vector<double>{0, 1}));
  EXPECT_EQ(a.stats().failures, 1u);
  EXPECT_FALSE(a.ProbeDue());
  clock.AdvanceMs(200);
  EXPECT_TRUE(a.ProbeDue());
  a.ProbeFailed(absl::UnavailableError("still"));
  clock.AdvanceMs(200);
  EXPECT_FALSE(a.ProbeDue());  // the backoff doubled
  clock.AdvanceMs(200);
  EXPECT_TRUE(a.ProbeDue());
  a.MarkUp();
  EXPECT_EQ(SprayWeights(paths), (std::vector<double>{2, 1}));
}

}  // namespace
}  // namespace mooncake::transport_internal
