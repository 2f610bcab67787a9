#include "mooncake/store/client/client_metrics.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/client.h"
#include "mooncake/store/client/testing/in_process_store.h"

namespace mooncake::client {
namespace {

using TestClient = client_testing::InProcessStore::TestClient;

// The real master and one worker (4 MiB) in process.
class Store : public client_testing::InProcessStore {
 public:
  Store() : InProcessStore(4 << 20) {}
  using InProcessStore::NewClient;
  std::unique_ptr<TestClient> NewClient(std::string client_id) {
    ClientOptions o;
    o.client_id = std::move(client_id);
    return NewClient(o);
  }
};

// The value of the series `name{labels}` in Prometheus text, or nullopt when
// the text has no such line. `labels` as rendered: sorted, quoted.
std::optional<uint64_t> SeriesValue(std::string_view text, std::string_view name,
                                    std::string_view labels) {
  const std::string prefix = absl::StrCat(AbslView(name), "{", AbslView(labels), "} ");
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with(prefix)) {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(AbslView(line.substr(prefix.size())), &v)) return std::nullopt;
      return v;
    }
    at = end + 1;
  }
  return std::nullopt;
}

std::optional<uint64_t> ClientValue(std::string_view text, std::string_view family,
                                    std::string_view client_id) {
  return SeriesValue(text, absl::StrCat("mooncake_client_", AbslView(family)),
                     absl::StrCat("client=\"", AbslView(client_id), "\""));
}

std::optional<uint64_t> Lookups(std::string_view text, std::string_view client_id,
                                std::string_view result) {
  return SeriesValue(
      text, "mooncake_client_cache_lookups_total",
      absl::StrCat("client=\"", AbslView(client_id), "\",result=\"", AbslView(result), "\""));
}

TEST(ClientMetrics, RenderedCountersMatchPutsAndGetsOfARealClient) {
  Store s;
  auto c = s.NewClient("app-1");
  ASSERT_NE(c, nullptr);
  MetricsRegistry registry;
  auto metrics = ClientMetrics::Create(&registry, c->client_id());
  ASSERT_TRUE(metrics.ok()) << metrics.status();

  // Registered at Create: every family renders, at zero, before any Refresh.
  std::string text = registry.RenderPrometheus();
  for (std::string_view family :
       {"master_rpcs_total", "replica_fallbacks_total", "checksum_mismatches_total",
        "read_bytes_total", "written_bytes_total", "registered_buffer_bytes_total",
        "ssd_load_waits_total", "ssd_put_waits_total", "transport_failovers_total"}) {
    EXPECT_EQ(ClientValue(text, family, "app-1"), 0u) << family;
    EXPECT_NE(text.find(absl::StrCat("# TYPE mooncake_client_", AbslView(family), " counter\n")),
              std::string::npos)
        << family;
  }
  EXPECT_EQ(Lookups(text, "app-1", "hit"), 0u);
  EXPECT_EQ(Lookups(text, "app-1", "miss"), 0u);

  const std::string value(1000, 'v');
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c->Put(absl::StrCat("k", i), value).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(*c->Get(absl::StrCat("k", i)), value);  // miss: asks the master
    ASSERT_EQ(*c->Get(absl::StrCat("k", i)), value);  // hit: the cached lease
  }
  EXPECT_EQ(c->Get("absent").status().code(), absl::StatusCode::kNotFound);

  // Counters move only on Refresh.
  EXPECT_EQ(ClientValue(registry.RenderPrometheus(), "written_bytes_total", "app-1"), 0u);
  const ClientStats stats = c->stats();
  (*metrics)->Refresh(stats);
  text = registry.RenderPrometheus();
  EXPECT_EQ(ClientValue(text, "written_bytes_total", "app-1"), 3000u);
  EXPECT_EQ(ClientValue(text, "read_bytes_total", "app-1"), 6000u);
  EXPECT_EQ(Lookups(text, "app-1", "hit"), 3u);
  EXPECT_EQ(Lookups(text, "app-1", "miss"), 4u);
  EXPECT_EQ(ClientValue(text, "replica_fallbacks_total", "app-1"), 0u);
  EXPECT_EQ(ClientValue(text, "checksum_mismatches_total", "app-1"), 0u);
  // 3 x (PutStart, PutEnd) and 4 GetReplicas at least; the exact figure is the client's.
  ASSERT_GE(stats.master_rpcs, 10u);
  EXPECT_EQ(ClientValue(text, "master_rpcs_total", "app-1"), stats.master_rpcs);

  // The same snapshot again moves nothing; later work moves by its own counts.
  (*metrics)->Refresh(stats);
  EXPECT_EQ(ClientValue(registry.RenderPrometheus(), "read_bytes_total", "app-1"), 6000u);
  ASSERT_EQ(*c->Get("k0"), value);
  (*metrics)->Refresh(c->stats());
  text = registry.RenderPrometheus();
  EXPECT_EQ(ClientValue(text, "read_bytes_total", "app-1"), 7000u);
  EXPECT_EQ(Lookups(text, "app-1", "hit"), 4u);
}

// What an embedding process's /metrics handler does: one Render call per
// scrape, the compression counters included.
TEST(ClientMetrics, RenderRefreshesAndServesTheRegistry) {
  Store s;
  ClientOptions o;
  o.client_id = "packer";
  o.network_compression = NetworkCompression::kAlways;
  auto c = s.NewClient(o);
  ASSERT_NE(c, nullptr);
  MetricsRegistry registry;
  ASSERT_TRUE(registry.GetCounter("app_requests_total", "the embedder's own", {}).ok());
  auto metrics = ClientMetrics::Create(&registry, c->client_id());
  ASSERT_TRUE(metrics.ok()) << metrics.status();

  // 512 KiB of bf16 whose high bytes take few values: compresses well.
  std::string value(512 << 10, '\0');
  for (size_t i = 0; i < value.size(); ++i) {
    value[i] = static_cast<char>(i % 2 == 1 ? 0x3f + (i / 2) % 3 : (i * 7919) % 251);
  }
  store::proto::TensorMeta tensor;
  tensor.set_dtype(store::proto::DTYPE_BF16);
  tensor.add_shape(value.size() / 2);
  ASSERT_TRUE(c->Put("kv", value, {.tensor = &tensor}).ok());
  ASSERT_EQ(*c->Get("kv"), value);

  const std::string text = (*metrics)->Render(c->stats());
  EXPECT_NE(text.find("app_requests_total"), std::string::npos) << "the whole registry";
  EXPECT_EQ(ClientValue(text, "compressed_puts_total", "packer"), 1u);
  EXPECT_EQ(ClientValue(text, "decompressed_gets_total", "packer"), 1u);
  const std::optional<uint64_t> saved =
      ClientValue(text, "compression_saved_bytes_total", "packer");
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(*saved, c->stats().compression_saved_bytes);
  EXPECT_GT(*saved, value.size() / 5);
  EXPECT_EQ(ClientValue(text, "written_bytes_total", "packer"), value.size());
  EXPECT_NE(text.find("# TYPE mooncake_client_measured_link_bytes_per_second gauge\n"),
            std::string::npos);
  EXPECT_EQ(text.find("mooncake_client_measured_link_bytes_per_second{client=\"packer\"} 0\n"),
            std::string::npos)
      << "a 512 KiB transfer was measured";
}

TEST(ClientMetrics, ClientsOfOneRegistryKeepTheirOwnSeriesAndOneIdSums) {
  Store s;
  auto a = s.NewClient("a");
  auto b = s.NewClient("b");
  auto b_again = s.NewClient("b");
  ASSERT_TRUE(a != nullptr && b != nullptr && b_again != nullptr);
  MetricsRegistry registry;
  auto ma = ClientMetrics::Create(&registry, "a");
  auto mb = ClientMetrics::Create(&registry, "b");
  auto mb_again = ClientMetrics::Create(&registry, "b");
  ASSERT_TRUE(ma.ok() && mb.ok() && mb_again.ok());

  ASSERT_TRUE(a->Put("ka", std::string(100, 'a')).ok());
  ASSERT_TRUE(b->Put("kb", std::string(200, 'b')).ok());
  ASSERT_TRUE(b_again->Put("kb2", std::string(300, 'b')).ok());
  (*ma)->Refresh(a->stats());
  (*mb)->Refresh(b->stats());
  (*mb_again)->Refresh(b_again->stats());
  const std::string text = registry.RenderPrometheus();
  EXPECT_EQ(ClientValue(text, "written_bytes_total", "a"), 100u);
  EXPECT_EQ(ClientValue(text, "written_bytes_total", "b"), 500u) << "one id: the sum";
}

TEST(ClientMetrics, ConcurrentRefreshesOfOneSnapshotAddItOnce) {
  MetricsRegistry registry;
  auto m = ClientMetrics::Create(&registry, "c");
  ASSERT_TRUE(m.ok());
  ClientStats stats;
  stats.bytes_read = 12345;
  stats.ssd_load_waits = 7;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) (*m)->Refresh(stats);
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string text = registry.RenderPrometheus();
  EXPECT_EQ(ClientValue(text, "read_bytes_total", "c"), 12345u);
  EXPECT_EQ(ClientValue(text, "ssd_load_waits_total", "c"), 7u);
}

TEST(ClientMetrics, SnapshotBelowThePreviousMovesNothing) {
  MetricsRegistry registry;
  auto m = ClientMetrics::Create(&registry, "c");
  ASSERT_TRUE(m.ok());
  ClientStats stats;
  stats.master_rpcs = 10;
  (*m)->Refresh(stats);
  stats.master_rpcs = 4;  // not this client's: a counter never goes down
  (*m)->Refresh(stats);
  stats.master_rpcs = 12;
  (*m)->Refresh(stats);
  EXPECT_EQ(ClientValue(registry.RenderPrometheus(), "master_rpcs_total", "c"), 12u);
}

TEST(ClientMetrics, FamilyOfAnotherTypeIsInvalidArgument) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry.GetGauge("mooncake_client_read_bytes_total", "not a counter").ok());
  auto m = ClientMetrics::Create(&registry, "c");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mooncake::client
