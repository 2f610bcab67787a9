// The SSD tier end to end: a StoreNode (master + worker with an SsdTier on a
// real file) and a client over TCP. More is put than DRAM holds; evicted
// objects go to SSD and every read returns exactly the bytes put.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/store/client.h"
#include "mooncake/store/node/store_node.h"
#include "mooncake/store/node/testing/node_testing.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::node {
namespace {

using StoreClient = client::Client<rpc::TcpChannel>;
constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, ".", ::getpid());
}

// Deterministic, distinct per key, incompressible enough to be honest.
std::string Value(int i, uint64_t size) {
  std::string v(size, '\0');
  uint64_t x = StableHash64(absl::StrCat("value-", i));
  for (size_t j = 0; j < size; j += 8) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t b = 0; b < 8 && j + b < size; ++b) v[j + b] = static_cast<char>(x >> (8 * b));
  }
  return v;
}

struct Cluster {
  std::unique_ptr<StoreNode> node;
  std::unique_ptr<rpc::TcpChannel> channel;
  std::unique_ptr<StoreClient> client;
};

Cluster Start(uint64_t ssd_bytes, const std::string& name,
              tier::Compression compression = tier::Compression::kAuto) {
  Cluster c;
  StoreNodeOptions o = node_testing::TestNodeOptions(Role::kAll);
  o.segment_bytes = 16 * kMiB;
  o.ssd_path = TempPath(name);
  o.ssd_bytes = ssd_bytes;
  o.ssd_compression = compression;
  std::remove(o.ssd_path.c_str());
  auto n = StoreNode::Start(o);
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok()) return c;
  c.node = std::move(*n);
  auto ch = rpc::TcpChannel::Connect(c.node->rpc_address());
  EXPECT_TRUE(ch.ok()) << ch.status();
  c.channel = std::move(*ch);
  client::ClientOptions co;
  co.use_local = false;
  co.use_shm = false;
  co.rpc_timeout_ms = 5'000;
  co.transfer_timeout_ms = 5'000;
  co.ssd_load_wait_ms = 10'000;
  // The metadata cache keeps each read's lease (5 s): DRAM full of leased
  // objects has no room to load into until they end.
  co.cache_enabled = false;
  auto cl = StoreClient::Create(co, c.channel.get());
  EXPECT_TRUE(cl.ok()) << cl.status();
  if (cl.ok()) c.client = std::move(*cl);
  return c;
}

uint64_t Counter(StoreNode& n, std::string_view kind, std::string_view result) {
  auto c = n.metrics().GetCounter("mooncake_master_tier_tasks_total", "",
                                  {{"kind", std::string(kind)}, {"result", std::string(result)}});
  return c.ok() ? (*c)->Value() : 0;
}

TEST(StoreTier, EvictedObjectsComeBackFromSsdByteExact) {
  Cluster c = Start(64 * kMiB, "tier_roundtrip");
  ASSERT_NE(c.client, nullptr);
  ASSERT_NE(c.node->worker()->tier_agent(), nullptr);
  constexpr int kObjects = 40;  // 40 MiB into 16 MiB of DRAM
  for (int i = 0; i < kObjects; ++i) {
    const absl::Status s = c.client->Put(absl::StrCat("obj-", i), Value(i, kMiB));
    ASSERT_TRUE(s.ok()) << i << ": " << s;
  }
  EXPECT_GT(Counter(*c.node, "offload", "ok"), 0u);
  EXPECT_EQ(Counter(*c.node, "offload", "failed"), 0u);
  EXPECT_LE(c.node->master()->Stats().used_bytes, 16 * kMiB);
  // Every object, oldest first (those are on SSD only), twice.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kObjects; ++i) {
      auto got = c.client->Get(absl::StrCat("obj-", i));
      ASSERT_TRUE(got.ok()) << "round " << round << " obj-" << i << ": " << got.status();
      ASSERT_EQ(got->size(), kMiB);
      ASSERT_TRUE(*got == Value(i, kMiB)) << "wrong bytes for obj-" << i;
    }
  }
  EXPECT_GT(Counter(*c.node, "load", "ok"), 0u);
  EXPECT_EQ(Counter(*c.node, "load", "failed"), 0u);
  EXPECT_GT(c.client->stats().ssd_load_waits, 0u);
  const NodeSnapshot snap = c.node->Snapshot();
  EXPECT_TRUE(snap.has_tier);
  EXPECT_GT(snap.tier_objects, 0u);
  EXPECT_EQ(snap.objects, kObjects);
  // The tier's totals reach /metrics. The workers' tiers never sync (kNoSync: a worker
  // empties its tier at start).
  EXPECT_EQ(snap.tier_syncs, 0u);
  EXPECT_EQ(snap.tier_io_errors, 0u);
  const std::string metrics = c.node->RenderMetrics();
  EXPECT_TRUE(absl::StrContains(metrics, "mooncake_worker_tier_failed_syncs_total 0")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "mooncake_worker_tier_corrupt_records_total 0"));
  EXPECT_TRUE(absl::StrContains(metrics, "mooncake_worker_tier_syncs_total 0")) << metrics;
  EXPECT_EQ(c.node->worker()->tier_agent()->tier().stats().syncs, 0u);
  EXPECT_EQ(c.node->worker()->tier_agent()->tier().info().durability, tier::Durability::kNoSync);

  // Removing an object also deletes its SSD record.
  const uint64_t records = snap.tier_objects;
  ASSERT_TRUE(c.client->Remove("obj-0").ok());
  EXPECT_TRUE(absl::IsNotFound(c.client->Get("obj-0").status()));
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (c.node->Snapshot().tier_objects >= records && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_LT(c.node->Snapshot().tier_objects, records);
  EXPECT_TRUE(c.node->Shutdown().ok());
}

TEST(StoreTier, AFullTierDropsItsOldestCopiesAndNeverServesWrongBytes) {
  Cluster c = Start(64 * kMiB, "tier_full");
  ASSERT_NE(c.client, nullptr);
  constexpr int kObjects = 100;  // 100 MiB into 16 MiB DRAM + 64 MiB SSD
  for (int i = 0; i < kObjects; ++i) {
    const absl::Status s = c.client->Put(absl::StrCat("obj-", i), Value(i, kMiB));
    ASSERT_TRUE(s.ok()) << i << ": " << s;
  }
  EXPECT_GT(c.node->metrics()
                .GetCounter("mooncake_master_tier_ssd_evictions_total", "", {})
                .value()
                ->Value(),
            0u);
  int found = 0;
  for (int i = kObjects; i-- > 0;) {  // newest first: those are kept
    auto got = c.client->Get(absl::StrCat("obj-", i));
    if (absl::IsNotFound(got.status())) continue;
    ASSERT_TRUE(got.ok()) << "obj-" << i << ": " << got.status();
    ASSERT_TRUE(*got == Value(i, kMiB)) << "wrong bytes for obj-" << i;
    ++found;
  }
  // ~16 in DRAM and ~60 on SSD (minus record headers and headroom); reading
  // back older ones displaces some of those.
  EXPECT_GE(found, 50) << found;
  EXPECT_LT(found, kObjects);
  EXPECT_EQ(Counter(*c.node, "load", "failed"), 0u);
  std::fprintf(stderr, "found %d of %d; offload failures %lu\n", found, kObjects,
               static_cast<unsigned long>(Counter(*c.node, "offload", "failed")));
  EXPECT_TRUE(c.node->Shutdown().ok());
}

// --ssd_compression reaches the worker's tier: with "always" every bf16 object
// written back is stored compressed (and more of them fit), with "never" none
// is; both read back byte-exact.
TEST(StoreTier, SsdCompressionOptionReachesTheWorkersTier) {
  store::proto::TensorMeta bf16;
  bf16.set_dtype(store::proto::DTYPE_BF16);
  constexpr int kObjects = 40;  // 40 MiB into 16 MiB of DRAM
  std::vector<std::string> values;
  for (int i = 0; i < kObjects; ++i) {
    const std::vector<std::byte> kv =
        compress::SyntheticKvBytes(kMiB, compress::DType::kBFloat16, static_cast<uint64_t>(i) + 1);
    values.emplace_back(reinterpret_cast<const char*>(kv.data()), kv.size());
  }
  for (const tier::Compression compression :
       {tier::Compression::kAlways, tier::Compression::kNever}) {
    const std::string name(tier::CompressionName(compression));
    SCOPED_TRACE(name);
    Cluster c = Start(64 * kMiB, "tier_compression_" + name, compression);
    ASSERT_NE(c.client, nullptr);
    ASSERT_NE(c.node->worker()->tier_agent(), nullptr);
    for (int i = 0; i < kObjects; ++i) {
      const absl::Status s = c.client->Put(absl::StrCat("kv-", i), values[i], {.tensor = &bf16});
      ASSERT_TRUE(s.ok()) << i << ": " << s;
    }
    ASSERT_GT(Counter(*c.node, "offload", "ok"), 0u);
    const tier::TierStats t = c.node->worker()->tier_agent()->tier().stats();
    if (compression == tier::Compression::kAlways) {
      EXPECT_EQ(t.compressed_writes, t.writes);
      EXPECT_LT(t.used_bytes, t.raw_bytes);  // compressed records: more objects per byte
    } else {
      EXPECT_EQ(t.compressed_writes, 0u);
      EXPECT_GT(t.used_bytes, t.raw_bytes);  // raw records and their header blocks
    }
    for (int i = 0; i < kObjects; ++i) {
      auto got = c.client->Get(absl::StrCat("kv-", i));
      ASSERT_TRUE(got.ok()) << "kv-" << i << ": " << got.status();
      ASSERT_TRUE(*got == values[i]) << "wrong bytes for kv-" << i;
    }
    EXPECT_EQ(Counter(*c.node, "load", "failed"), 0u);
    EXPECT_TRUE(c.node->Shutdown().ok());
  }
}

TEST(StoreTier, BadSsdOptionsAreInvalidArgument) {
  StoreNodeOptions o = node_testing::TestNodeOptions(Role::kAll);
  o.ssd_path = TempPath("tier_bad");
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateStoreNodeOptions(o)));  // no size
  o.ssd_bytes = kMiB;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateStoreNodeOptions(o)));  // too small
  o.ssd_bytes = 64 * kMiB + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateStoreNodeOptions(o)));  // not 4K-aligned
  o.ssd_bytes = 64 * kMiB;
  EXPECT_TRUE(ValidateStoreNodeOptions(o).ok());
  o.role = Role::kMaster;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateStoreNodeOptions(o)));
  // A path that cannot be created: the node does not start, and says why.
  StoreNodeOptions p = node_testing::TestNodeOptions(Role::kAll);
  p.ssd_path = "/nonexistent-dir/ssd.tier";
  p.ssd_bytes = 64 * kMiB;
  auto n = StoreNode::Start(p);
  EXPECT_FALSE(n.ok());
}

TEST(StoreTier, ARestartTakesANewSsdSizeAndNeverReplacesAForeignFile) {
  StoreNodeOptions o = node_testing::TestNodeOptions(Role::kAll);
  o.segment_bytes = 16 * kMiB;
  o.ssd_path = TempPath("tier_resize");
  std::remove(o.ssd_path.c_str());
  for (uint64_t ssd_bytes : {64 * kMiB, 128 * kMiB, 64 * kMiB}) {
    o.ssd_bytes = ssd_bytes;
    auto n = StoreNode::Start(o);
    ASSERT_TRUE(n.ok()) << n.status();
    const NodeSnapshot s = (*n)->Snapshot();
    EXPECT_TRUE(s.has_tier);
    EXPECT_EQ(s.tier_capacity_bytes, ssd_bytes - 4096);  // less the file header block
    EXPECT_EQ(s.tier_objects, 0u);
    EXPECT_TRUE((*n)->Shutdown().ok());
  }
  // A path that holds something else: the node does not start, and the file stays.
  o.ssd_path = TempPath("tier_foreign");
  {
    std::ofstream out(o.ssd_path, std::ios::binary);
    out << "not a tier";
  }
  auto n = StoreNode::Start(o);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition) << n.status();
  std::ifstream in(o.ssd_path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a tier");
}

}  // namespace
}  // namespace mooncake::node
