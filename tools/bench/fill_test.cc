#include "tools/bench/fill.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/testing/fake_kv_driver.h"

namespace mooncake::bench {
namespace {

TEST(FillTest, ReportsUtilisationHitRateAndFailedPuts) {
  constexpr size_t kValue = 10'000;
  FakeKvStore store(10 * kValue);  // holds exactly 10 values
  std::vector<std::unique_ptr<FakeKvDriver>> d;
  for (int i = 0; i < 2; ++i) d.push_back(std::make_unique<FakeKvDriver>(&store));
  ValuePool pool(kValue);
  UtilisationProbe probe = [&]() -> absl::StatusOr<Utilisation> {
    return Utilisation{static_cast<double>(store.used_bytes()),
                       static_cast<double>(store.capacity_bytes()),
                       static_cast<double>(store.evictions())};
  };
  FillResult f = RunFill<FakeKvDriver>(d, pool, KeySpace{"f", 3000}, kValue, 10 * kValue, probe,
                                       absl::Microseconds(100), nullptr);
  EXPECT_EQ(f.system, "fake");
  EXPECT_EQ(f.puts.requests, 3000u);
  EXPECT_EQ(f.puts.errors, 0u);
  EXPECT_EQ(f.readback_keys, 3000u);
  EXPECT_EQ(f.readback_hits, 10u);  // the last ten put
  EXPECT_DOUBLE_EQ(f.hit_rate, 10.0 / 3000);
  EXPECT_DOUBLE_EQ(f.hit_ceiling, 10.0 / 3000);
  ASSERT_GT(f.samples, 0u);    // samples exist only after the first eviction
  EXPECT_GE(f.util_min, 0.9);  // the fake is full (or one value short) while evicting
  EXPECT_LE(f.util_min, f.util_median);
  EXPECT_LE(f.util_median, 1.0);
  EXPECT_TRUE(f.probe_error.empty()) << f.probe_error;
}

TEST(FillTest, ProbeErrorsAndFailedPutsAreReported) {
  FakeKvStore store(100);  // smaller than one value: every put fails
  std::vector<std::unique_ptr<FakeKvDriver>> d;
  d.push_back(std::make_unique<FakeKvDriver>(&store));
  ValuePool pool(1000);
  UtilisationProbe probe = []() -> absl::StatusOr<Utilisation> {
    return absl::UnavailableError("metrics down");
  };
  FillResult f = RunFill<FakeKvDriver>(d, pool, KeySpace{"g", 5}, 1000, 100, probe,
                                       absl::Microseconds(100), nullptr);
  EXPECT_EQ(f.puts.errors, 5u);
  EXPECT_EQ(f.samples, 0u);
  EXPECT_NE(f.probe_error.find("metrics down"), std::string::npos);
  EXPECT_EQ(f.readback_hits, 0u);
}

}  // namespace
}  // namespace mooncake::bench
