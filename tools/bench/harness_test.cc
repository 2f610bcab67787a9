#include "tools/bench/harness.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/testing/fake_kv_driver.h"

namespace mooncake::bench {
namespace {

std::vector<std::unique_ptr<FakeKvDriver>> Drivers(FakeKvStore* store, size_t n) {
  std::vector<std::unique_ptr<FakeKvDriver>> d;
  for (size_t i = 0; i < n; ++i) d.push_back(std::make_unique<FakeKvDriver>(store));
  return d;
}

class HarnessTest : public ::testing::Test {
 protected:
  FakeKvStore store_;
  ValuePool pool_{64 << 10};
  KeySpace keys_{"h", 20};
  GetSpec spec_{.value_bytes = 4096, .batch = 1, .duration = absl::Milliseconds(30)};
};

TEST_F(HarnessTest, PutsEveryKeyOnceAcrossClients) {
  auto d = Drivers(&store_, 3);
  std::atomic<uint64_t> progress{0};
  PhaseResult r = RunPuts<FakeKvDriver>(d, pool_, keys_, 4096, &progress);
  EXPECT_EQ(r.items, 20u);
  EXPECT_EQ(r.requests, 20u);
  EXPECT_EQ(r.bytes, 20u * 4096);
  EXPECT_EQ(r.errors + r.misses + r.verify_failures, 0u);
  EXPECT_EQ(progress.load(), 20u);
  EXPECT_EQ(store_.used_bytes(), 20u * 4096);
  EXPECT_GT(r.seconds, 0);
  EXPECT_GT(r.p50_us, 0);
  EXPECT_LE(r.p50_us, r.p99_us);
  EXPECT_LE(r.p99_us, r.p999_us);
}

TEST_F(HarnessTest, GetsCountOnlyVerifiedItems) {
  auto d = Drivers(&store_, 2);
  ASSERT_EQ(RunPuts<FakeKvDriver>(d, pool_, keys_, 4096, nullptr).items, 20u);
  for (size_t batch : {1, 4}) {
    spec_.batch = batch;
    PhaseResult r = RunGets<FakeKvDriver>(d, pool_, keys_, spec_, nullptr);
    EXPECT_GT(r.items, 0u) << batch;
    EXPECT_EQ(r.items, r.requests * batch);
    EXPECT_EQ(r.bytes, r.items * 4096);
    EXPECT_EQ(r.errors + r.misses + r.verify_failures, 0u) << r.first_error;
  }
}

TEST_F(HarnessTest, WrongBytesAreVerifyFailuresNotThroughput) {
  auto d = Drivers(&store_, 2);
  ASSERT_EQ(RunPuts<FakeKvDriver>(d, pool_, keys_, 4096, nullptr).items, 20u);
  for (FakeFault f : {FakeFault::kCorrupt, FakeFault::kTruncate}) {
    store_.set_fault(f);
    spec_.verify = f == FakeFault::kCorrupt ? VerifyMode::kFull : VerifyMode::kSampled;
    PhaseResult r = RunGets<FakeKvDriver>(d, pool_, keys_, spec_, nullptr);
    EXPECT_EQ(r.items, 0u);
    EXPECT_EQ(r.bytes, 0u);
    EXPECT_EQ(r.verify_failures, r.requests);
    EXPECT_NE(r.first_error.find("DATA_LOSS"), std::string::npos) << r.first_error;
  }
}

TEST_F(HarnessTest, MissesAreCountedApart) {
  auto d = Drivers(&store_, 1);
  PhaseResult r = RunGets<FakeKvDriver>(d, pool_, keys_, spec_, nullptr);
  EXPECT_EQ(r.items, 0u);
  EXPECT_GT(r.misses, 0u);
  EXPECT_EQ(r.errors, 0u);
}

TEST_F(HarnessTest, PutErrorsAreCounted) {
  FakeKvStore tiny(1000);  // every 4 KiB value is too large
  auto d = Drivers(&tiny, 2);
  PhaseResult r = RunPuts<FakeKvDriver>(d, pool_, keys_, 4096, nullptr);
  EXPECT_EQ(r.items, 0u);
  EXPECT_EQ(r.errors, 20u);
  EXPECT_NE(r.first_error.find("RESOURCE_EXHAUSTED"), std::string::npos);
}

TEST_F(HarnessTest, RemoveAllEmptiesTheStore) {
  auto d = Drivers(&store_, 3);
  ASSERT_EQ(RunPuts<FakeKvDriver>(d, pool_, keys_, 100, nullptr).items, 20u);
  ASSERT_TRUE(RemoveAll<FakeKvDriver>(d, keys_).ok());
  EXPECT_EQ(store_.used_bytes(), 0u);
  EXPECT_TRUE(RemoveAll<FakeKvDriver>(d, keys_).ok());  // NOT_FOUND is fine
}

}  // namespace
}  // namespace mooncake::bench
