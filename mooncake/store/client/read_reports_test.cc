#include "mooncake/store/client/read_reports.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::client {
namespace {

constexpr int64_t kMs = 1'000'000;

// (tenant, key) -> reads, over every request.
std::map<std::pair<std::string, std::string>, uint32_t> Flatten(
    const std::vector<store::proto::TouchObjectsRequest>& reqs) {
  std::map<std::pair<std::string, std::string>, uint32_t> out;
  for (const auto& r : reqs) {
    EXPECT_EQ(r.keys_size(), r.reads_size());
    EXPECT_LE(static_cast<size_t>(r.keys_size()), rpc::kMaxBatchItems);
    for (int i = 0; i < r.keys_size(); ++i) out[{r.tenant(), r.keys(i)}] += r.reads(i);
  }
  return out;
}

TEST(CachedReadReportsTest, DueOnceTheOldestReadIsAnIntervalOld) {
  CachedReadReports reports(100 * kMs);
  EXPECT_TRUE(reports.Add("", "a", 0).empty());
  EXPECT_TRUE(reports.Add("", "a", 50 * kMs).empty());
  EXPECT_TRUE(reports.Add("t", "a", 99 * kMs).empty());
  EXPECT_EQ(reports.pending_keys(), 2u);
  const auto due = reports.Add("", "b", 100 * kMs);
  const auto flat = Flatten(due);
  EXPECT_EQ(flat.size(), 3u);
  EXPECT_EQ((flat.at({"", "a"})), 2u) << "a key read twice is reported once, with its count";
  EXPECT_EQ((flat.at({"t", "a"})), 1u) << "tenants are reported apart";
  EXPECT_EQ((flat.at({"", "b"})), 1u);
  EXPECT_EQ(reports.pending_keys(), 0u);
  // The interval counts again from the next read.
  EXPECT_TRUE(reports.Add("", "c", 150 * kMs).empty());
  EXPECT_TRUE(reports.Add("", "c", 249 * kMs).empty());
  EXPECT_EQ(Flatten(reports.TakeAll()).at({"", "c"}), 2u);
  EXPECT_TRUE(reports.TakeAll().empty());
}

TEST(CachedReadReportsTest, DueAtABatchOfKeysAndSplitIntoRequestsOfAtMostABatch) {
  CachedReadReports reports(1'000'000 * kMs);
  std::vector<store::proto::TouchObjectsRequest> due;
  for (size_t i = 0; i < rpc::kMaxBatchItems && due.empty(); ++i) {
    due = reports.Add(i % 2 == 0 ? "x" : "y", std::to_string(i), 0);
  }
  ASSERT_FALSE(due.empty()) << "kMaxBatchItems distinct keys are due at once";
  EXPECT_EQ(Flatten(due).size(), rpc::kMaxBatchItems);
  EXPECT_EQ(due.size(), 2u) << "one request per tenant";
}

}  // namespace
}  // namespace mooncake::client
