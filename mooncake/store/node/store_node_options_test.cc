#include "mooncake/store/node/store_node_options.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

TEST(ParseByteSize, SuffixesAndPlainNumbers) {
  EXPECT_EQ(*ParseByteSize("f", "4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("f", "64K"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("f", "64k"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("f", "1M"), 1u << 20);
  EXPECT_EQ(*ParseByteSize("f", "1G"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("f", "2T"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("f", "1GiB"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("f", "512MB"), uint64_t{512} << 20);
}

TEST(ParseByteSize, RejectsJunkWithTheFlagName) {
  for (const char* bad : {"", "G", "1Q", "-1", "1.5G", " 1G", "1G ", "0x10", "B",
                          "99999999999999999999", "20000000T"}) {
    auto r = ParseByteSize("segment_bytes", bad);
    ASSERT_FALSE(r.ok()) << "accepted \"" << bad << "\"";
    EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--segment_bytes=")) << r.status();
  }
}

TEST(ParseRdmaUse, AutoOnOffAndNothingElse) {
  EXPECT_EQ(ParseRdmaUse("auto"), RdmaUse::kAuto);
  EXPECT_EQ(ParseRdmaUse("on"), RdmaUse::kOn);
  EXPECT_EQ(ParseRdmaUse("off"), RdmaUse::kOff);
  EXPECT_FALSE(ParseRdmaUse("yes").has_value());
  EXPECT_FALSE(ParseRdmaUse("").has_value());
  for (RdmaUse r : {RdmaUse::kAuto, RdmaUse::kOn, RdmaUse::kOff}) {
    EXPECT_EQ(ParseRdmaUse(RdmaUseName(r)), r);
  }
}

TEST(ParseHostPort, ListenAndJoinAddresses) {
  auto hp = ParseHostPort("listen", "127.0.0.1:0", true);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 0);
  hp = ParseHostPort("master", "[::1]:7000", false);
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 7000);
  EXPECT_EQ(hp->ToString(), "[::1]:7000");  // bracketed, so it parses back the same
  auto again = ParseHostPort("master", hp->ToString(), false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->host, "::1");
  EXPECT_EQ(again->port, 7000);
  EXPECT_FALSE(ParseHostPort("master", "host:0", false).ok());  // nothing to join at port 0
  for (const char* bad :
       {"", "nocolon", ":80", "h:", "h:65536", "h:-1", "h:8x", "::1", "::1:50051", "[::1]"}) {
    auto r = ParseHostPort("listen", bad, true);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--listen=")) << r.status();
  }
}

TEST(ParseTenants, ListWithOptionalPinned) {
  auto t = ParseTenants("");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
  t = ParseTenants("a:10G,b:2G:1G");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "a");
  EXPECT_EQ((*t)[0].capacity_bytes, uint64_t{10} << 30);
  EXPECT_EQ((*t)[0].pinned_capacity_bytes, 0u);
  EXPECT_EQ((*t)[1].pinned_capacity_bytes, uint64_t{1} << 30);
  for (const char* bad : {"a", "a:", ":1G", "a:1G:2G", "a:1G,a:2G", "a:1G:1G:1G", "a:x"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseTenants(bad).status())) << bad;
  }
}

TEST(ApplyTenantFlag, CapacityAndRateRepeatedAndMergedWithTenants) {
  auto listed = ParseTenants("a:10G,b:2G:1G");
  ASSERT_TRUE(listed.ok());
  std::vector<master::TenantConfig> t = *listed;
  std::vector<std::string> seen;
  ASSERT_TRUE(ApplyTenantFlag("b:4G:100M", t, seen).ok());
  ASSERT_TRUE(ApplyTenantFlag("c:1G", t, seen).ok());
  ASSERT_TRUE(ApplyTenantFlag("d:1T:0", t, seen).ok());
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].rate_bytes_per_sec, 0u) << "a: --tenants alone, unlimited";
  EXPECT_EQ(t[1].capacity_bytes, uint64_t{4} << 30) << "--tenant overrides b's capacity";
  EXPECT_EQ(t[1].pinned_capacity_bytes, uint64_t{1} << 30) << "and keeps its pinned capacity";
  EXPECT_EQ(t[1].rate_bytes_per_sec, uint64_t{100} << 20);
  EXPECT_EQ(t[2].name, "c");
  EXPECT_EQ(t[2].capacity_bytes, uint64_t{1} << 30);
  EXPECT_EQ(t[2].rate_bytes_per_sec, 0u);
  EXPECT_EQ(t[3].capacity_bytes, uint64_t{1} << 40);
  EXPECT_EQ(t[3].rate_bytes_per_sec, 0u);
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyTenantFlag("c:2G", t, seen))) << "c given twice";
  for (const char* bad :
       {"", "e", "e:", ":1G", "e:1G:", "e:1G:1G:1G", "e:x", "e:1G:fast", "e:1G:2P", "b:512M"}) {
    std::vector<std::string> none;
    std::vector<master::TenantConfig> copy = t;
    EXPECT_TRUE(absl::IsInvalidArgument(ApplyTenantFlag(bad, copy, none))) << bad;
  }
  std::vector<std::string> none;
  EXPECT_TRUE(absl::IsInvalidArgument(ApplyTenantFlag("e:1G:2048T", t, none))) << "above 1 PB/s";
}

TEST(ParseAllocator, NamesAndKvBlockSizes) {
  EXPECT_EQ(ParseAllocator("tlsf"), AllocatorKind::kTlsf);
  EXPECT_EQ(ParseAllocator("kv"), AllocatorKind::kKv);
  EXPECT_EQ(ParseAllocator("TLSF"), std::nullopt);
  EXPECT_EQ(AllocatorName(AllocatorKind::kKv), "kv");
  auto b = ParseKvBlockBytes(kDefaultKvBlockBytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, (std::vector<uint64_t>{896 << 10, 2 << 20, 3584 << 10, 8 << 20}));
  for (const char* bad : {"", "1M,", "0", "1M,1M", "x"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseKvBlockBytes(bad).status())) << bad;
  }
  StoreNodeOptions o;
  o.allocator = AllocatorKind::kKv;
  o.kv_block_bytes = {o.max_object_bytes + 1};
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateStoreNodeOptions(o)));
  o.kv_block_bytes = {4096};
  EXPECT_TRUE(ValidateStoreNodeOptions(o).ok());
  o.allocator = static_cast<AllocatorKind>(9);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateStoreNodeOptions(o)));
}

TEST(ValidateStoreNodeOptions, DefaultsAreValidAndRangesChecked) {
  StoreNodeOptions o;
  EXPECT_TRUE(ValidateStoreNodeOptions(o).ok());
  auto with = [](auto change) {
    StoreNodeOptions x;
    change(x);
    return ValidateStoreNodeOptions(x);
  };
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.segment_bytes = 1000; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.segments = 0; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.replicas = 0; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.max_object_bytes = 0; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.low_watermark = 0.995; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.high_watermark = 1.5; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) {
                 x.role = Role::kWorker;
                 x.master.port = 0;
               }).ok());
  // Role all with more replicas than its one worker: other workers may join
  // its master (the binary warns).
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.replicas = 2; }).ok());
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.replicas = 9; }).ok());
  // Hot replicas: at least the object's own, at most kMaxHotReplicas.
  EXPECT_EQ(o.hot_max_replicas, 3u);
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.hot_max_replicas = 4; }).ok());
  const absl::Status hot = with([](StoreNodeOptions& x) { x.hot_max_replicas = 0; });
  EXPECT_TRUE(absl::IsInvalidArgument(hot)) << hot;
  EXPECT_NE(hot.message().find("--hot_max_replicas"), std::string_view::npos) << hot;
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.hot_max_replicas = kMaxHotReplicas + 1; }).ok());
  // An object's hot window counts at most kMaxWindowReads reads.
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.hot_reads = master::kMaxWindowReads; }).ok());
  const absl::Status reads =
      with([](StoreNodeOptions& x) { x.hot_reads = master::kMaxWindowReads + 1; });
  EXPECT_TRUE(absl::IsInvalidArgument(reads)) << reads;
  EXPECT_NE(reads.message().find("--hot_reads"), std::string_view::npos) << reads;
  // Draining on SIGTERM: off by default, at most a day.
  EXPECT_EQ(o.drain_deadline_ms, 0);
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.drain_deadline_ms = 30'000; }).ok());
  const absl::Status drain = with([](StoreNodeOptions& x) { x.drain_deadline_ms = -1; });
  EXPECT_TRUE(absl::IsInvalidArgument(drain)) << drain;
  EXPECT_NE(drain.message().find("--drain_deadline_ms"), std::string_view::npos) << drain;
  EXPECT_FALSE(
      with([](StoreNodeOptions& x) { x.drain_deadline_ms = kMaxDrainDeadlineMs + 1; }).ok());
  // The worker's TCP transport takes numeric IPv4 and IPv6 addresses (it
  // advertises the text as is); a name is refused at the flag check, not at bind.
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.worker_host = "::1"; }).ok());
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.worker_host = "2001:db8::7"; }).ok());
  EXPECT_TRUE(with([](StoreNodeOptions& x) { x.worker_host = "10.1.2.3"; }).ok());
  const absl::Status name = with([](StoreNodeOptions& x) { x.worker_host = "myhost"; });
  EXPECT_TRUE(absl::IsInvalidArgument(name)) << name;
  EXPECT_NE(name.message().find("numeric IPv4 or IPv6"), std::string_view::npos) << name;
  EXPECT_FALSE(with([](StoreNodeOptions& x) { x.worker_host = "[::1]"; }).ok());
  // Advertised as is, so nothing a client cannot connect to: the wildcard, a
  // link-local address, a scope.
  for (const char* unreachable : {"0.0.0.0", "::", "fe80::1", "fe80::1%eth0"}) {
    const absl::Status st = with([&](StoreNodeOptions& x) { x.worker_host = unreachable; });
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << unreachable << ": " << st;
  }
  EXPECT_TRUE(with([](StoreNodeOptions& x) {
                x.role = Role::kMaster;
                x.replicas = 2;
              }).ok());
  // A master has no segments: their size does not matter.
  EXPECT_TRUE(with([](StoreNodeOptions& x) {
                x.role = Role::kMaster;
                x.segment_bytes = 0;
              }).ok());
}

}  // namespace
}  // namespace mooncake::node
