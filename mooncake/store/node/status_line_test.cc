#include "mooncake/store/node/status_line.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

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

}  // namespace
}  // namespace mooncake::node
