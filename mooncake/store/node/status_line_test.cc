#include "mooncake/store/node/status_line.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

TEST(LogTimestamp, Rfc3339UtcWithMilliseconds) {
  // 2026-12-04 14:30:05.123456 UTC.
  const absl::Time t = absl::FromUnixMicros(1796394605123456);
  EXPECT_EQ(LogTimestamp(t), "2026-12-04T14:30:05.123Z");
  EXPECT_EQ(LogTimestamp(absl::UnixEpoch()), "1970-01-01T00:00:00.000Z");
}

TEST(HumanBytes, BinaryUnits) {
  EXPECT_EQ(HumanBytes(0), "0B");
  EXPECT_EQ(HumanBytes(1023), "1023B");
  EXPECT_EQ(HumanBytes(1536), "1.5KiB");
  EXPECT_EQ(HumanBytes(uint64_t{1} << 30), "1.0GiB");
}

TEST(StatusReporter, RatesAreSinceThePreviousLine) {
  StatusReporter r;
  NodeSnapshot s{.time_ns = 1'000'000'000,
                 .has_master = true,
                 .objects = 10,
                 .used_bytes = 256u << 20,
                 .capacity_bytes = 1u << 30,
                 .puts_committed = 100,
                 .gets = 1000,
                 .evictions = 0,
                 .workers = 2};
  const std::string first = r.Line(s);
  EXPECT_TRUE(absl::StrContains(first, "objects=10")) << first;
  EXPECT_TRUE(absl::StrContains(first, "used=256.0MiB/1.0GiB (25.0%)")) << first;
  EXPECT_TRUE(absl::StrContains(first, "puts/s=-")) << first;  // no baseline yet
  EXPECT_TRUE(absl::StrContains(first, "workers=2")) << first;
  s.time_ns += 2'000'000'000;  // 2 s later
  s.puts_committed += 50;
  s.gets += 3000;
  s.evictions += 4;
  const std::string second = r.Line(s);
  EXPECT_TRUE(absl::StrContains(second, "puts/s=25.0")) << second;
  EXPECT_TRUE(absl::StrContains(second, "gets/s=1500.0")) << second;
  EXPECT_TRUE(absl::StrContains(second, "evictions/s=2.0")) << second;
  EXPECT_EQ(second.find('\n'), std::string::npos);  // one line
}

TEST(StatusReporter, WorkerOnlyLine) {
  StatusReporter r;
  const std::string line = r.Line({.time_ns = 1,
                                   .has_worker = true,
                                   .segments_mounted = 1,
                                   .segments_total = 2,
                                   .segment_bytes_total = 64u << 20,
                                   .heartbeats_ok = 7,
                                   .heartbeats_failed = 1});
  EXPECT_TRUE(absl::StrContains(line, "segments=1/2 mounted (64.0MiB)")) << line;
  EXPECT_TRUE(absl::StrContains(line, "heartbeats ok=7 failed=1")) << line;
  EXPECT_FALSE(absl::StrContains(line, "objects=")) << line;
  EXPECT_FALSE(absl::StrContains(line, "ssd=")) << line;  // no tier
}

TEST(StatusReporter, TheSsdTierAndItsTroubleAreShown) {
  StatusReporter r;
  NodeSnapshot s{.time_ns = 1,
                 .has_worker = true,
                 .has_tier = true,
                 .tier_objects = 12,
                 .tier_used_bytes = 3u << 20,
                 .tier_capacity_bytes = 1u << 30};
  std::string line = r.Line(s);
  EXPECT_TRUE(absl::StrContains(line, " ssd=12 objects 3.0MiB/1.0GiB")) << line;
  EXPECT_FALSE(absl::StrContains(line, "ssd_io_errors")) << line;  // a healthy disk
  s.time_ns = 2;
  s.tier_io_errors = 2;
  s.tier_corrupt_records = 1;
  line = r.Line(s);
  EXPECT_TRUE(absl::StrContains(line, " ssd_io_errors=2 ssd_corrupt=1")) << line;
}

TEST(EventReporter, MasterSeesWorkersJoinAndLeave) {
  EventReporter e;
  NodeSnapshot s;
  s.has_master = true;
  s.worker_segments = {{"w1", 2}};
  EXPECT_TRUE(e.Events(s).empty()) << "the first snapshot is the baseline";
  EXPECT_TRUE(e.Events(s).empty()) << "nothing changed";
  s.worker_segments = {{"w1", 2}, {"w2", 1}};
  EXPECT_EQ(e.Events(s), std::vector<std::string>{"event: worker joined: w2 (1 segment)"});
  s.worker_segments = {{"w2", 1}};
  const std::vector<std::string> left = e.Events(s);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(left[0].starts_with("event: worker left: w1 (")) << left[0];
}

TEST(EventReporter, WorkerSaysWhenItsMasterGoesAndComesBack) {
  EventReporter e;
  NodeSnapshot s;
  s.has_worker = true;
  s.master_address = "10.0.0.1:50051";
  s.segments_total = s.segments_mounted = 2;
  s.heartbeats_ok = 10;
  EXPECT_TRUE(e.Events(s).empty());
  s.heartbeats_ok = 11;
  EXPECT_TRUE(e.Events(s).empty()) << "healthy heartbeats say nothing";
  s.heartbeats_failed = 2;
  std::vector<std::string> ev = e.Events(s);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].starts_with("event: master 10.0.0.1:50051 is not answering heartbeats (2 "))
      << ev[0];
  s.heartbeats_failed = 5;
  s.segments_mounted = 0;
  EXPECT_TRUE(e.Events(s).empty()) << "said once, not every second";
  s.heartbeats_ok = 12;
  s.remounts = 1;
  s.segments_mounted = 2;
  ev = e.Events(s);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0],
            "event: master 10.0.0.1:50051 answers heartbeats again; segments remounted (2 of 2 "
            "mounted)");
}

TEST(EventReporter, SsdTierTroubleIsAnEvent) {
  EventReporter e;
  NodeSnapshot s;
  s.has_worker = s.has_tier = true;
  EXPECT_TRUE(e.Events(s).empty());
  s.tier_io_errors = 3;
  s.tier_corrupt_records = 1;
  std::vector<std::string> ev = e.Events(s);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].starts_with("event: SSD tier: 3 new I/O errors, 1 new corrupt records"))
      << ev[0];
  EXPECT_TRUE(e.Events(s).empty());
}

}  // namespace
}  // namespace mooncake::node
