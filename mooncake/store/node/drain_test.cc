#include "mooncake/store/node/drain.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

TEST(ParseDrainQuery, TakesADeadlineAndAnOptionalBandwidth) {
  auto p = ParseDrainQuery("deadline_ms=30000");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->deadline_ms, 30'000);
  EXPECT_EQ(p->bandwidth_bytes_per_sec, 0u);
  p = ParseDrainQuery("bandwidth=1G&deadline_ms=5");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->deadline_ms, 5);
  EXPECT_EQ(p->bandwidth_bytes_per_sec, uint64_t{1} << 30);
  p = ParseDrainQuery("deadline_ms=1&bandwidth=123456");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bandwidth_bytes_per_sec, 123'456u);
}

TEST(ParseDrainQuery, BadDeadlinesSayWhatIsWanted) {
  for (const char* q : {"", "deadline_ms=", "deadline_ms=abc", "deadline_ms=0", "deadline_ms=-5",
                        "deadline_ms=86400001", "deadline_ms=1.5"}) {
    auto p = ParseDrainQuery(q);
    ASSERT_FALSE(p.ok()) << q;
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << q;
    EXPECT_TRUE(absl::StrContains(p.status().message(), "deadline_ms")) << p.status();
  }
  auto p = ParseDrainQuery("deadline_ms=abc");
  EXPECT_TRUE(absl::StrContains(p.status().message(), "milliseconds")) << p.status();
}

TEST(ParseDrainQuery, RefusesTyposAndBadBandwidth) {
  auto p = ParseDrainQuery("deadline=100");  // a typo never drains with defaults
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "unknown parameter 'deadline'"));
  p = ParseDrainQuery("deadline_ms=100&bandwidth=fast");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "bandwidth='fast'")) << p.status();
  p = ParseDrainQuery("deadline_ms=100&bandwidth=%zz");
  EXPECT_FALSE(p.ok());
}

store::proto::DrainStatus Sample() {
  store::proto::DrainStatus s;
  s.set_state(store::proto::DRAIN_DEADLINE);
  s.set_objects_total(12);
  s.set_objects_moved(9);
  s.set_objects_dropped(1);
  s.set_objects_left(2);
  s.set_bytes_moved(4096);
  s.set_copies_failed(1);
  s.set_elapsed_ms(1500);
  s.set_deadline_ms(1000);
  return s;
}

TEST(DrainJson, CarriesEveryField) {
  EXPECT_EQ(DrainStatusJson(Sample(), true),
            "{\"state\":\"deadline\",\"objects_total\":12,\"objects_moved\":9,"
            "\"objects_dropped\":1,\"objects_left\":2,\"objects_gone\":0,\"bytes_moved\":4096,"
            "\"copies_failed\":1,\"elapsed_ms\":1500,\"deadline_ms\":1000,\"unmounted\":true}\n");
  const PreemptTimeline t{
      .drain_start_ms = 1, .drain_done_ms = 1501, .done_ms = 1510, .bytes_moved = 4096};
  const std::string j = PreemptJson(Sample(), t, false);
  EXPECT_TRUE(absl::StrContains(j,
                                "\"unmounted\":false,\"timeline\":{\"notice_ms\":0,"
                                "\"drain_start_ms\":1,\"drain_done_ms\":1501,"
                                "\"bytes_moved\":4096,\"done_ms\":1510}}"))
      << j;
  EXPECT_EQ(DrainSummaryLine(Sample()),
            "drain deadline in 1500 ms: 9 of 12 objects moved (4096 bytes), 1 dropped, 2 left, "
            "0 gone, 1 copies failed");
}

}  // namespace
}  // namespace mooncake::node
