#include "tools/chaos/history.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/chaos/report.h"

namespace mooncake::chaos {
namespace {

using ha_failover::Value;

class HistoryTest : public ::testing::Test {
 protected:
  void Meta(int64_t end_ns = 100) {
    h_.push_back({{"t", "meta"},
                  {"start_ns", "0"},
                  {"end_ns", std::to_string(end_ns)},
                  {"deadline_ms", "1"}});
  }
  // An operation of client 0 on `key` over [inv, end] ns.
  void Op(const std::string& op, const std::string& key, uint64_t v, const std::string& res,
          int64_t inv, int64_t end, const std::string* bytes = nullptr) {
    Record r = {{"t", "op"},
                {"c", "0"},
                {"op", op},
                {"key", key},
                {"v", std::to_string(v)},
                {"inv_ns", std::to_string(inv)},
                {"end_ns", std::to_string(end)},
                {"res", res}};
    const std::string value = bytes != nullptr ? *bytes : Value(key, v);
    if (res == "ok" && op != "remove") r["digest"] = std::to_string(Digest(value));
    h_.push_back(r);
  }
  CheckReport Check() {
    Meta();
    return CheckHistory(h_);
  }
  std::vector<Record> h_;
};

TEST_F(HistoryTest, JsonLinesRoundTrip) {
  const Record r = {{"t", "op"}, {"key", "c1/k2"}, {"v", "7"}, {"digest", "18446744073709551615"}};
  const std::string line = ToJson(r, {"v", "digest"});
  EXPECT_EQ(line, R"({"digest":18446744073709551615,"key":"c1/k2","t":"op","v":7})");
  absl::StatusOr<Record> back = ParseLine(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(U64(*back, "digest"), 18446744073709551615ull);
  EXPECT_FALSE(ParseLine(R"({"t":"op")").ok());
  EXPECT_FALSE(ParseLine("no object").ok());
}

TEST_F(HistoryTest, WriterAndReaderAgree) {
  const std::string path = ::testing::TempDir() + "/history_test.jsonl";
  {
    absl::StatusOr<std::unique_ptr<HistoryWriter>> w = HistoryWriter::Open(path);
    ASSERT_TRUE(w.ok());
    (*w)->Append({{"t", "fault"}, {"kind", "kill"}, {"start_ns", "5"}, {"loses_data", "0"}});
  }
  absl::StatusOr<std::vector<Record>> h = ReadHistory(path);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->size(), 1u);
  EXPECT_EQ(Str((*h)[0], "kind"), "kill");
  EXPECT_EQ(Int((*h)[0], "start_ns"), 5);
  std::remove(path.c_str());
}

TEST_F(HistoryTest, AcknowledgedPutThenNotFoundIsLost) {
  Op("put", "k", 1, "ok", 0, 1);
  Op("get", "k", 0, "not_found", 2, 3);
  const CheckReport r = Check();
  EXPECT_EQ(r.lost, 1u);
  EXPECT_FALSE(r.Passed());
  ASSERT_FALSE(r.anomalies.empty());
  EXPECT_NE(r.anomalies[0].find("LOST"), std::string::npos);
}

TEST_F(HistoryTest, RemovedOrFailedOrNeverPutMayBeAbsent) {
  Op("get", "a", 0, "not_found", 0, 1);  // never put
  Op("put", "b", 1, "ok", 0, 1);
  Op("remove", "b", 0, "fail", 2, 3);  // may have taken effect
  Op("get", "b", 0, "not_found", 4, 5);
  Op("put", "c", 1, "ok", 0, 1);
  Op("remove", "c", 0, "not_found", 2, 3);  // a retried remove
  Op("get", "c", 0, "not_found", 4, 5);
  const CheckReport r = Check();
  EXPECT_EQ(r.lost, 0u);
  EXPECT_TRUE(r.Passed());
}

TEST_F(HistoryTest, FailedPutWidensTheAllowedVersions) {
  Op("put", "k", 1, "ok", 0, 1);
  Op("put", "k", 2, "fail", 2, 3);
  Op("get", "k", 2, "ok", 4, 5);  // the failed put took effect: allowed
  Op("get", "k", 1, "ok", 6, 7);  // or not: allowed too
  EXPECT_EQ(Check().wrong, 0u);
}

TEST_F(HistoryTest, BytesOfAnotherVersionOrCorruptBytesAreWrong) {
  Op("put", "k", 1, "ok", 0, 1);
  Op("put", "k", 2, "ok", 2, 3);
  Op("get", "k", 1, "ok", 4, 5);  // an overwritten version: stale
  std::string corrupt = Value("k", 2);
  corrupt[100] ^= 1;
  Op("get", "k", 2, "ok", 6, 7, &corrupt);
  Op("prefix_block", "k", 2, "ok", 8, 9, &corrupt);
  const CheckReport r = Check();
  EXPECT_EQ(r.wrong, 3u);
  EXPECT_EQ(r.lost, 0u);
}

TEST_F(HistoryTest, LosesDataFaultExcusesWithItsCause) {
  Op("put", "k", 1, "ok", 0, 1);
  h_.push_back({{"t", "fault"},
                {"kind", "kill"},
                {"target", "master0"},
                {"start_ns", "2"},
                {"end_ns", "3"},
                {"loses_data", "1"}});
  Op("get", "k", 0, "not_found", 4, 5);
  Op("put", "k", 2, "ok", 6, 7);
  Op("get", "k", 0, "not_found", 8, 9);  // after a new acknowledged put: lost again
  const CheckReport r = Check();
  EXPECT_EQ(r.gone_with_cause, 1u);
  EXPECT_EQ(r.lost, 1u);
  EXPECT_EQ(r.faults_by_kind.at("kill"), 1u);
}

TEST_F(HistoryTest, FaultWithoutDataLossExcusesNothing) {
  Op("put", "k", 1, "ok", 0, 1);
  h_.push_back({{"t", "fault"},
                {"kind", "kill"},
                {"target", "worker1"},
                {"start_ns", "2"},
                {"loses_data", "0"}});
  Op("get", "k", 0, "not_found", 4, 5);
  EXPECT_EQ(Check().lost, 1u);
}

TEST_F(HistoryTest, PendingOrLateOperationsAreHangs) {
  Op("put", "k", 1, "pending", 0, 50);
  Op("get", "j", 0, "not_found", 0, 2'000'000);  // 2 ms past a 1 ms deadline
  Op("get", "i", 0, "not_found", 0, 10);
  const CheckReport r = Check();
  EXPECT_EQ(r.hangs, 2u);
  EXPECT_FALSE(r.Passed());
}

TEST_F(HistoryTest, LongestStallIsTheLongestGapBetweenOkCompletions) {
  Op("get", "a", 0, "not_found", 0, 10);
  Op("get", "b", 0, "fail", 10, 60);  // a failure is no progress
  Op("get", "c", 0, "not_found", 20, 70);
  Op("get", "d", 0, "not_found", 70, 80);
  const CheckReport r = Check();  // ends at 100
  EXPECT_EQ(r.longest_stall_ns, 60);
  EXPECT_EQ(r.stall_at_ns, 10);
}

TEST_F(HistoryTest, MemoryOverItsBoundAndEvictionsFail) {
  h_.push_back({{"t", "rss"}, {"proc", "worker0"}, {"peak_kb", "2048"}, {"bound_kb", "1024"}});
  CheckReport r = Check();
  EXPECT_EQ(r.memory_over, 1u);
  EXPECT_FALSE(r.Passed());
  h_.clear();
  h_.push_back({{"t", "meta"}, {"evictions", "3"}});
  r = Check();
  EXPECT_EQ(r.evictions, 3u);
  EXPECT_FALSE(r.Passed());
  EXPECT_NE(FormatReport(r).find("no-eviction model"), std::string::npos);
}

}  // namespace
}  // namespace mooncake::chaos
