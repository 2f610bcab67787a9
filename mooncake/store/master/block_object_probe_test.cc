#include "mooncake/store/master/block_object_probe.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/hash.h"
#include "mooncake/index/match_prefix.h"
#include "mooncake/store/master/object_group.h"
#include "mooncake/store/master/object_meta.h"
#include "mooncake/store/master/object_table.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::master {
namespace {

constexpr int64_t kNow = 1'000'000;

std::vector<Hash128> Chain(size_t n) {
  std::vector<Hash128> chain;
  for (size_t i = 0; i < n; ++i) chain.push_back(Hash128{0x1000 + i, 0xabc0 + i});
  return chain;
}

// A committed, visible block object of `tenant` under the block's key.
ObjectMeta& PutBlock(ObjectTable& table, const Hash128& block, const std::string& tenant = "t") {
  const std::string key = rpc::BlockObjectKey(block);
  return table.With(key, [&](ObjectTable::Shard& sh) -> ObjectMeta& {
    ObjectMeta& m = sh.objects[key];
    m.state = ObjectState::kCommitted;
    m.tenant = tenant;
    m.version = 7;
    return m;
  });
}

TEST(BlockObjectProbeTest, MatchesTheLeadingVisibleBlocksAndRecordsEachHit) {
  ObjectTable table(4);
  const std::vector<Hash128> chain = Chain(5);
  for (size_t i = 0; i < 3; ++i) PutBlock(table, chain[i]);
  PutBlock(table, chain[4]);  // after the gap: never reached
  std::vector<std::pair<size_t, std::string>> hits;
  BlockObjectProbe probe(table, "t", kNow, [&](size_t i, const std::string& key, ObjectMeta& m) {
    EXPECT_EQ(m.version, 7u);
    hits.emplace_back(i, key);
    return true;
  });
  EXPECT_EQ(index::MatchPrefix(chain, probe), 3u);
  ASSERT_EQ(hits.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hits[i].first, i);
    EXPECT_EQ(hits[i].second, rpc::BlockObjectKey(chain[i]));  // the one key layout
  }
}

TEST(BlockObjectProbeTest, WalksTheRequestsProtoChain) {
  ObjectTable table(4);
  const std::vector<Hash128> chain = Chain(4);
  store::proto::PrefixQueryRequest req;
  for (const Hash128& h : chain) rpc::ToProto(h, req.add_chain());
  for (size_t i = 0; i < 2; ++i) PutBlock(table, chain[i]);
  BlockObjectProbe probe(table, "t", kNow);
  EXPECT_EQ(index::MatchPrefix(req.chain(), probe), 2u);
  EXPECT_EQ(probe.key(), rpc::BlockObjectKey(chain[2]));  // the miss was probed last
}

TEST(BlockObjectProbeTest, AnotherTenantsBlockEndsTheMatch) {
  ObjectTable table(4);
  const std::vector<Hash128> chain = Chain(3);
  PutBlock(table, chain[0]);
  PutBlock(table, chain[1], "other");
  PutBlock(table, chain[2]);
  BlockObjectProbe probe(table, "t", kNow);
  EXPECT_EQ(index::MatchPrefix(chain, probe), 1u);
  BlockObjectProbe others(table, "other", kNow);
  EXPECT_EQ(index::MatchPrefix(chain, others), 0u);
}

TEST(BlockObjectProbeTest, PendingAndExpiredBlocksEndTheMatch) {
  ObjectTable table(4);
  const std::vector<Hash128> chain = Chain(3);
  PutBlock(table, chain[0]);
  PutBlock(table, chain[1]).extras.mut().expire_at_ns = kNow;  // expires now
  PutBlock(table, chain[2]).state = ObjectState::kPending;
  BlockObjectProbe probe(table, "t", kNow);
  EXPECT_EQ(index::MatchPrefix(chain, probe), 1u);
  BlockObjectProbe earlier(table, "t", kNow - 1);  // before the TTL: block 2 is pending
  EXPECT_EQ(index::MatchPrefix(chain, earlier), 2u);
}

TEST(BlockObjectProbeTest, AGroupMemberThatIsNotVisibleEndsTheMatch) {
  ObjectTable table(4);
  const std::vector<Hash128> chain = Chain(3);
  auto group = std::make_shared<ObjectGroup>("g", "t", 0);
  for (const Hash128& h : chain) PutBlock(table, h);
  PutBlock(table, chain[1]).extras.mut().group = group;
  BlockObjectProbe probe(table, "t", kNow);
  EXPECT_EQ(index::MatchPrefix(chain, probe), 1u);  // kOpen
  group->phase.store(GroupPhase::kVisible);
  EXPECT_EQ(index::MatchPrefix(chain, probe), 3u);
  group->phase.store(GroupPhase::kGone);
  EXPECT_EQ(index::MatchPrefix(chain, probe), 1u);
}

TEST(BlockObjectProbeTest, AVisitorThatRefusesABlockEndsTheMatch) {
  ObjectTable table(4);
  const std::vector<Hash128> chain = Chain(4);
  for (const Hash128& h : chain) PutBlock(table, h);
  PutBlock(table, chain[2]).ssd = SsdState::kStored;
  size_t calls = 0;
  BlockObjectProbe probe(table, "t", kNow, [&](size_t, const std::string&, ObjectMeta& m) {
    ++calls;
    return m.ssd == SsdState::kNone;
  });
  EXPECT_EQ(index::MatchPrefix(chain, probe), 2u);
  EXPECT_EQ(calls, 3u);  // the refused block was visited, nothing after it
}

}  // namespace
}  // namespace mooncake::master
