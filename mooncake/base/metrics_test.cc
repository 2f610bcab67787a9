#include "mooncake/base/metrics.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

TEST(MetricsTest, RendersGoldenText) {
  MetricsRegistry r;
  Counter* puts_a = r.GetCounter("mooncake_puts_total", "Objects put.", {{"tenant", "a"}}).value();
  Counter* puts_b = r.GetCounter("mooncake_puts_total", "Objects put.", {{"tenant", "b"}}).value();
  Gauge* used = r.GetGauge("mooncake_bytes_used", "Bytes in use.\nPer segment \\ total.").value();
  LatencyHistogram* lat =
      r.GetHistogram("mooncake_get_latency_seconds", "Get latency.",
                     {{"op", "get"}, {"path", "shm"}}, 1e9, {0.00001, 0.00005, 0.0001, 0.001})
          .value();
  puts_a->Increment(3);
  puts_b->Increment();
  used->Set(1.5);
  for (uint64_t v = 1; v <= 100; ++v) lat->Record(v * 1000);  // 1..100 us

  const std::string expected =
      "# HELP mooncake_bytes_used Bytes in use.\\nPer segment \\\\ total.\n"
      "# TYPE mooncake_bytes_used gauge\n"
      "mooncake_bytes_used 1.5\n"
      "# HELP mooncake_get_latency_seconds Get latency.\n"
      "# TYPE mooncake_get_latency_seconds histogram\n"
      // A bound counts the fine buckets wholly at or below it: 10000 ns lies in
      // [9984, 10112), 50000 in [49664, 50176), 100000 in [99328, 100352), so each
      // bound leaves out the one value that sits exactly on it.
      "mooncake_get_latency_seconds_bucket{op=\"get\",path=\"shm\",le=\"1e-05\"} 9\n"
      "mooncake_get_latency_seconds_bucket{op=\"get\",path=\"shm\",le=\"5e-05\"} 49\n"
      "mooncake_get_latency_seconds_bucket{op=\"get\",path=\"shm\",le=\"0.0001\"} 99\n"
      "mooncake_get_latency_seconds_bucket{op=\"get\",path=\"shm\",le=\"0.001\"} 100\n"
      "mooncake_get_latency_seconds_bucket{op=\"get\",path=\"shm\",le=\"+Inf\"} 100\n"
      "mooncake_get_latency_seconds_sum{op=\"get\",path=\"shm\"} 0.00505\n"
      "mooncake_get_latency_seconds_count{op=\"get\",path=\"shm\"} 100\n"
      "# HELP mooncake_puts_total Objects put.\n"
      "# TYPE mooncake_puts_total counter\n"
      "mooncake_puts_total{tenant=\"a\"} 3\n"
      "mooncake_puts_total{tenant=\"b\"} 1\n";
  EXPECT_EQ(r.RenderPrometheus(), expected);
}

TEST(MetricsTest, HistogramsDefaultToLatencyBoundsAndStayCumulative) {
  MetricsRegistry r;
  LatencyHistogram* h = r.GetHistogram("rpc_latency_seconds", "h", {}, 1e9).value();
  h->Record(3'000);           // 3 us: below every bound
  h->Record(2'000'000);       // 2 ms
  h->Record(20'000'000'000);  // 20 s: only +Inf
  const std::string text = r.RenderPrometheus();
  EXPECT_NE(text.find("rpc_latency_seconds_bucket{le=\"1e-05\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rpc_latency_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rpc_latency_seconds_bucket{le=\"0.0025\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rpc_latency_seconds_bucket{le=\"10\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rpc_latency_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rpc_latency_seconds_count 3\n"), std::string::npos) << text;
  size_t buckets = 0;
  for (size_t at = text.find("_bucket{"); at != std::string::npos;
       at = text.find("_bucket{", at + 1)) {
    ++buckets;
  }
  EXPECT_EQ(buckets, std::size(MetricsRegistry::kLatencyBoundsSeconds) + 1);
}

TEST(MetricsTest, SameSeriesReturnsSamePointerWhateverTheLabelOrder) {
  MetricsRegistry r;
  Counter* a = r.GetCounter("c_total", "h", {{"x", "1"}, {"y", "2"}}).value();
  Counter* b = r.GetCounter("c_total", "h", {{"y", "2"}, {"x", "1"}}).value();
  EXPECT_EQ(a, b);
  Counter* c = r.GetCounter("c_total", "h", {{"x", "1"}, {"y", "3"}}).value();
  EXPECT_NE(a, c);
}

TEST(MetricsTest, EscapesLabelValues) {
  MetricsRegistry r;
  r.GetCounter("c_total", "h", {{"k", "a\"b\\c\nd"}}).value()->Increment();
  EXPECT_NE(r.RenderPrometheus().find("c_total{k=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, RejectsBadNamesAndMismatches) {
  MetricsRegistry r;
  EXPECT_EQ(r.GetCounter("9bad", "h").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetCounter("", "h").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetCounter("bad-name", "h").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetCounter("ok", "h", {{"__reserved", "v"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetCounter("ok", "h", {{"a", "1"}, {"a", "2"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetHistogram("h_seconds", "h", {{"le", "1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetHistogram("h_seconds", "h", {}, 1e9, {0.1, 0.1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetHistogram("h_seconds", "h", {}, 1e9, {0.0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.GetCounter("m", "h", {{"a", "1"}}).ok());
  EXPECT_EQ(r.GetGauge("m", "h").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetCounter("m", "h", {{"b", "1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsTest, RemovedSeriesStopRenderingAndComeBackFresh) {
  MetricsRegistry r;
  Gauge* a = *r.GetGauge("peer_bytes", "Bytes per peer.", {{"peer", "a"}});
  Gauge* b = *r.GetGauge("peer_bytes", "Bytes per peer.", {{"peer", "b"}});
  a->Set(1);
  b->Set(2);
  EXPECT_TRUE(r.RemoveSeries("peer_bytes", {{"peer", "a"}}));
  EXPECT_FALSE(r.RemoveSeries("peer_bytes", {{"peer", "a"}})) << "already gone";
  EXPECT_FALSE(r.RemoveSeries("peer_bytes", {{"other", "b"}})) << "other label names";
  EXPECT_FALSE(r.RemoveSeries("no_such_metric", {}));
  std::string text = r.RenderPrometheus();
  EXPECT_EQ(text.find("peer=\"a\""), std::string::npos) << text;
  EXPECT_NE(text.find("peer_bytes{peer=\"b\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE peer_bytes gauge"), std::string::npos) << text;
  Gauge* again = *r.GetGauge("peer_bytes", "Bytes per peer.", {{"peer", "a"}});
  text = r.RenderPrometheus();
  EXPECT_EQ(again->Value(), 0);
  EXPECT_NE(text.find("peer_bytes{peer=\"a\"} 0\n"), std::string::npos) << text;
}

TEST(MetricsTest, GaugeFormatsSpecialValues) {
  MetricsRegistry r;
  Gauge* g = r.GetGauge("g", "h").value();
  g->Set(-3);
  EXPECT_NE(r.RenderPrometheus().find("\ng -3\n"), std::string::npos);
  g->Set(std::numeric_limits<double>::infinity());
  EXPECT_NE(r.RenderPrometheus().find("\ng +Inf\n"), std::string::npos);
  g->Set(std::nan(""));
  EXPECT_NE(r.RenderPrometheus().find("\ng NaN\n"), std::string::npos);
  g->Set(1);
  g->Add(0.25);
  EXPECT_DOUBLE_EQ(g->Value(), 1.25);
}

TEST(MetricsTest, ConcurrentRegistrationAndUpdates) {
  MetricsRegistry r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&r, t] {
      for (int i = 0; i < 1000; ++i) {
        r.GetCounter("shared_total", "h").value()->Increment();
        r.GetCounter("per_thread_total", "h", {{"t", std::to_string(t)}}).value()->Increment();
        if (i % 100 == 0) (void)r.RenderPrometheus();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(r.GetCounter("shared_total", "h").value()->Value(), 4000u);
  EXPECT_EQ(r.GetCounter("per_thread_total", "h", {{"t", "2"}}).value()->Value(), 1000u);
}

}  // namespace
}  // namespace mooncake
