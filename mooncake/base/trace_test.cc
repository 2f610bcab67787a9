#include "mooncake/base/trace.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mooncake::trace {
namespace {

// Tracing is process-wide: every test starts from an empty registry view by
// collecting (and so dropping exited rings) and only looks at its own spans.
class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Enable(false);
    Collect();
  }
  void TearDown() override { Enable(false); }

  static std::vector<Span> Named(const Snapshot& snap, std::string_view name) {
    std::vector<Span> out;
    for (const Span& s : snap.spans) {
      if (name == s.name) out.push_back(s);
    }
    return out;
  }
};

TEST_F(TraceTest, OffRecordsNothing) {
  Record("off.record", "test", 1, 2, 3, 4, 5);
  { Scope span("off.scope", "test"); }
  EXPECT_TRUE(Named(Collect(), "off.record").empty());
  EXPECT_TRUE(Named(Collect(), "off.scope").empty());
}

TEST_F(TraceTest, RecordAndScopeKeepTheirFields) {
  Enable(true);
  Record("rec", "cat.a", 100, 250, 7, 3, 4096);
  {
    Scope span("scope", "cat.b", 9);
    EXPECT_TRUE(span.active());
    span.set_slice(2);
    span.set_bytes(65536);
  }
  const Snapshot snap = Collect();
  const std::vector<Span> rec = Named(snap, "rec");
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_STREQ(rec[0].category, "cat.a");
  EXPECT_EQ(rec[0].start_ns, 100);
  EXPECT_EQ(rec[0].end_ns, 250);
  EXPECT_EQ(rec[0].batch, 7u);
  EXPECT_EQ(rec[0].slice, 3u);
  EXPECT_EQ(rec[0].bytes, 4096u);
  EXPECT_EQ(rec[0].tid, static_cast<int>(::syscall(SYS_gettid)));
  EXPECT_FALSE(rec[0].scoped);
  const std::vector<Span> scope = Named(snap, "scope");
  ASSERT_EQ(scope.size(), 1u);
  EXPECT_EQ(scope[0].batch, 9u);
  EXPECT_EQ(scope[0].slice, 2u);
  EXPECT_EQ(scope[0].bytes, 65536u);
  EXPECT_TRUE(scope[0].scoped);
  EXPECT_LE(scope[0].start_ns, scope[0].end_ns);
  EXPECT_LE(scope[0].end_ns, NowNs());
}

TEST_F(TraceTest, DismissedScopeRecordsNothing) {
  Enable(true);
  {
    Scope span("dismissed", "test");
    span.Dismiss();
    EXPECT_FALSE(span.active());
  }
  EXPECT_TRUE(Named(Collect(), "dismissed").empty());
}

TEST_F(TraceTest, RingOverwritesOldest) {
  Enable(true);
  std::thread t([] {
    for (uint64_t i = 0; i < kRingEvents + 100; ++i) Record("wrap", "test", 0, 1, i);
  });
  t.join();
  const std::vector<Span> spans = Named(Collect(), "wrap");
  ASSERT_EQ(spans.size(), kRingEvents);
  uint64_t min_batch = UINT64_MAX;
  for (const Span& s : spans) min_batch = std::min(min_batch, s.batch);
  EXPECT_EQ(min_batch, 100u);  // the first 100 were overwritten
}

TEST_F(TraceTest, ExitedThreadRingKeptUntilDumped) {
  Enable(true);
  std::thread t([] {
    ::pthread_setname_np(::pthread_self(), "exiting-writer");
    Record("exited", "test", 5, 6);
  });
  t.join();
  const Snapshot first = Collect();
  ASSERT_EQ(Named(first, "exited").size(), 1u);
  bool named = false;
  for (const ThreadInfo& ti : first.threads) named = named || ti.name == "exiting-writer";
  EXPECT_TRUE(named);
  EXPECT_TRUE(Named(Collect(), "exited").empty()) << "dumped once, then dropped";
}

TEST_F(TraceTest, ExitedRingsAreBounded) {
  Enable(true);
  for (size_t i = 0; i < kExitedRingsMax + 8; ++i) {
    std::thread([] { Record("many", "test", 0, 1); }).join();
  }
  // Each new ring drops the oldest exited ones past the bound.
  EXPECT_LE(trace_internal::Registry::Get().size(), kExitedRingsMax + 2);
  EXPECT_EQ(Named(Collect(), "many").size(), kExitedRingsMax);
}

TEST_F(TraceTest, WindowKeepsRecentSpans) {
  Enable(true);
  const int64_t now = NowNs();
  Record("old", "test", now - 20'000'000'000, now - 10'000'000'000);
  Record("new", "test", now - 1000, now);
  const Snapshot snap = Collect(absl::Seconds(5));
  EXPECT_TRUE(Named(snap, "old").empty());
  EXPECT_EQ(Named(snap, "new").size(), 1u);
}

// Writers record spans whose fields are tied to each other while a dumper
// collects: every span it returns must be whole (no mix of two writes).
TEST_F(TraceTest, WritersWhileDumpingSeeNoTornSpans) {
  Enable(true);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&stop, w] {
      for (uint64_t i = 1; !stop.load(std::memory_order_relaxed); ++i) {
        const int64_t start = static_cast<int64_t>(i * 10);
        Record("torn", "test", start, start + w, i, static_cast<uint32_t>(i * 3), i * 7 + w);
      }
    });
  }
  uint64_t checked = 0;
  const absl::Time end = absl::Now() + absl::Milliseconds(500);
  for (int round = 0; absl::Now() < end || round < 3; ++round) {
    std::ostringstream json;
    const Snapshot snap = Collect();
    WriteChromeJson(snap, json);
    for (const Span& s : Named(snap, "torn")) {
      const uint64_t w = s.bytes - s.batch * 7;
      ASSERT_LT(w, 4u);
      ASSERT_EQ(s.start_ns, static_cast<int64_t>(s.batch * 10));
      ASSERT_EQ(s.end_ns, s.start_ns + static_cast<int64_t>(w));
      ASSERT_EQ(s.slice, static_cast<uint32_t>(s.batch * 3));
      ASSERT_STREQ(s.category, "test");
      ++checked;
    }
  }
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_GT(checked, 0u);
}

TEST_F(TraceTest, ChromeJsonShape) {
  Snapshot snap;
  snap.pid = 42;
  snap.threads = {ThreadInfo{7, "worker"}};
  snap.spans = {Span{"json\"quoted\\", "test", 1'234'567, 2'345'678, 7, 1, 2, 3, false},
                Span{"scoped", "test", 1'300'000, 1'400'000, 7, 0, 0, 0, true}};
  std::ostringstream out;
  WriteChromeJson(snap, out);
  const std::string json = out.str();
  EXPECT_NE(json.find("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":42,\"tid\":7,"
                      "\"args\":{\"name\":\"worker\"}}"),
            std::string::npos);
  // A Scope's span stays on its thread's track.
  EXPECT_NE(json.find("\"ts\":1300.000,\"dur\":100.000,\"pid\":42,\"tid\":7,"), std::string::npos);
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 0), 0u);
  EXPECT_NE(json.find("\"name\":\"json\\\"quoted\\\\\",\"cat\":\"test\",\"ph\":\"X\","
                      "\"ts\":1234.567,\"dur\":1111.111"),
            std::string::npos)
      << json;
  // A Record's span goes on a category track; its thread is in args.
  EXPECT_NE(json.find("\"tid\":1073741824,\"args\":{\"batch\":1,\"slice\":2,\"bytes\":3,\"tid\":"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"tid\":1073741824,\"args\":{\"name\":\"test spans 0\"}"),
            std::string::npos);
  EXPECT_NE(json.find("\"name\":\"thread_name\",\"ph\":\"M\""), std::string::npos);
  // Braces and brackets balance outside strings.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    ASSERT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
  EXPECT_FALSE(in_string);
}

// With TRACE_JSON_OUT set (trace_json_test.sh), writes a dump with spans from
// several threads there for python's json module to parse back.
TEST_F(TraceTest, WritesJsonForTheParserCheck) {
  const char* path = std::getenv("TRACE_JSON_OUT");
  if (path == nullptr) GTEST_SKIP() << "TRACE_JSON_OUT not set";
  Enable(true);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t] {
      for (uint32_t i = 0; i < 10; ++i) {
        Scope span("parse.check", "test", static_cast<uint64_t>(t), i, 1000 + i);
      }
    });
  }
  for (auto& t : threads) t.join();
  Record("control\x01\n", "test", 10, 20);
  Record("overlap", "test", 15, 30);  // overlaps the one above: another track
  Record("overlap", "test", 31, 40);  // fits the first track again
  std::ofstream out(path);
  DumpChromeJson(out);
  ASSERT_TRUE(out.good());
}

}  // namespace
}  // namespace mooncake::trace
