#include "mooncake/store/master/master_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "mooncake/base/metrics.h"

namespace mooncake::master {
namespace {

TEST(MasterMetricsTest, SeriesRender) {
  MetricsRegistry registry;
  MasterMetrics m(&registry);
  m.objects->Set(3);
  m.puts_committed->Increment(2);
  m.evictions->Increment();
  m.PerWorker("w1")->Set(4096);
  m.PerSegment(7)->Set(0.25);
  const std::string text = registry.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_master_objects 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mooncake_master_puts_total{result=\"committed\"} 2"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_evictions_total 1"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_worker_used_bytes{worker=\"w1\"} 4096"), std::string::npos);
  EXPECT_NE(text.find("mooncake_master_segment_fragmentation{segment=\"7\"} 0.25"),
            std::string::npos);
  EXPECT_EQ(m.PerWorker("w1"), m.PerWorker("w1"));  // one series per worker
}

TEST(MasterMetricsTest, PrivateRegistryWhenNoneGiven) {
  MasterMetrics m(nullptr);
  ASSERT_NE(m.registry(), nullptr);
  m.gets_hit->Increment();
  EXPECT_EQ(m.gets_hit->Value(), 1u);
}

}  // namespace
}  // namespace mooncake::master
