// StoreConnector against a whole store in this process (master, worker,
// client): save from one engine layout, load into another, every moved row
// checked; shared prefixes, repeated saves, and bad input.
#include "mooncake/connector/store_connector.h"

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "examples/in_process_store.h"
#include "gtest/gtest.h"
#include "mooncake/connector/kv_layout.h"

namespace mooncake::connector {
namespace {

using Store = examples::InProcessStore<>;

KvLayout Layout(KvOrder order, uint32_t block_size, uint64_t num_blocks) {
  return KvLayout{.order = order,
                  .dtype = KvDtype::kFloat16,
                  .num_layers = 3,
                  .num_parts = 2,
                  .block_size = block_size,
                  .num_kv_heads = 2,
                  .head_dim = 16,
                  .num_blocks = num_blocks,
                  .first_head = 0,
                  .total_kv_heads = 2};
}

struct Cache {
  KvLayout layout;
  std::vector<std::vector<std::byte>> regions;
  Cache(KvLayout l, uint64_t seed) : layout(l) {
    std::mt19937_64 rng(seed);
    regions.assign(l.NumRegions(), std::vector<std::byte>(l.RegionBytes()));
    for (auto& r : regions) {
      for (auto& b : r) b = static_cast<std::byte>(seed == 0 ? 0 : rng());
    }
  }
  std::vector<std::byte*> Bases() {
    std::vector<std::byte*> v;
    for (auto& r : regions) v.push_back(r.data());
    return v;
  }
  const std::byte* Head(uint32_t layer, uint32_t part, uint64_t block, uint32_t row,
                        uint32_t head) const {
    const ByteRange at = layout.ElementLocation(layer, part, block, row, head, 0);
    return regions[at.region].data() + at.offset;
  }
};

// (layer, part, token, head) vectors of the first `tokens` tokens that differ.
uint64_t Mismatches(const Cache& a, const std::vector<uint64_t>& ab, const Cache& b,
                    const std::vector<uint64_t>& bb, uint64_t tokens, uint64_t first = 0) {
  uint64_t bad = 0;
  for (uint64_t t = first; t < tokens; ++t) {
    for (uint32_t l = 0; l < 3; ++l) {
      for (uint32_t p = 0; p < 2; ++p) {
        for (uint32_t h = 0; h < 2; ++h) {
          bad += std::memcmp(a.Head(l, p, ab[t / a.layout.block_size], t % a.layout.block_size, h),
                             b.Head(l, p, bb[t / b.layout.block_size], t % b.layout.block_size, h),
                             a.layout.HeadBytes()) != 0;
        }
      }
    }
  }
  return bad;
}

std::vector<uint32_t> Prompt(size_t n, uint32_t seed) {
  std::vector<uint32_t> t(n);
  std::mt19937 rng(seed);
  for (auto& x : t) x = rng() % 32000;
  return t;
}

std::vector<uint64_t> Shuffled(uint64_t count, uint64_t num_blocks, uint64_t seed) {
  std::vector<uint64_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  ids.resize(count);
  return ids;
}

StoreConnectorOptions Options() {
  StoreConnectorOptions o;
  o.ns.model_id = "test/model";
  o.ns.dtype = "fp16";
  return o;
}

std::unique_ptr<Store> StartStore() {
  Store::Options o;
  o.worker.segment_bytes = 64 << 20;
  auto s = Store::Start(std::move(o));
  MC_ASSERT(s.ok(), "store");
  return std::move(*s);
}

TEST(StoreConnectorTest, SavedPagesLoadIntoAnotherLayoutAndPageSize) {
  auto store = StartStore();
  Cache src(Layout(KvOrder::kLayerFirst, 16, 64), 1), dst(Layout(KvOrder::kPageFirst, 32, 32), 0);
  auto saver =
      StoreConnector<Store::Client>::Create(&store->client(), src.layout, src.Bases(), Options());
  auto loader =
      StoreConnector<Store::Client>::Create(&store->client(), dst.layout, dst.Bases(), Options());
  ASSERT_TRUE(saver.ok() && loader.ok());
  const auto tokens = Prompt(300, 7);  // 18 full canonical blocks, 12 tokens left over
  const auto sb = Shuffled(19, 64, 1), db = Shuffled(10, 32, 2);
  auto saved = (*saver)->Save(tokens, sb);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->blocks, 18u);
  EXPECT_EQ(saved->already_cached, 0u);
  EXPECT_EQ(saved->saved, 18u);
  EXPECT_EQ(*(*loader)->MatchPrefix(tokens), 18u);
  auto loaded = (*loader)->LoadPrefix(tokens, db, tokens.size() - 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 288u);
  EXPECT_EQ(Mismatches(src, sb, dst, db, 288), 0u);
  // Nothing past the loaded prefix was written.
  Cache empty(dst.layout, 0);
  EXPECT_EQ(Mismatches(empty, db, dst, db, 300, 288), 0u);
}

TEST(StoreConnectorTest, SharedPrefixLoadsOnlyTheSharedBlocksAndSavesSkipCachedOnes) {
  auto store = StartStore();
  Cache a(Layout(KvOrder::kLayerFirstHeadMajor, 8, 128), 3),
      b(Layout(KvOrder::kLayerFirst, 16, 64), 0);
  auto sa = StoreConnector<Store::Client>::Create(&store->client(), a.layout, a.Bases(), Options());
  auto sb = StoreConnector<Store::Client>::Create(&store->client(), b.layout, b.Bases(), Options());
  ASSERT_TRUE(sa.ok() && sb.ok());
  auto prompt_a = Prompt(160, 1);
  auto prompt_b = prompt_a;
  prompt_b.resize(100);  // B shares A's first 100 tokens: 6 whole blocks of 16
  const auto tail = Prompt(50, 2);
  prompt_b.insert(prompt_b.end(), tail.begin(), tail.end());
  std::vector<uint64_t> ab(20), bb(10);
  std::iota(ab.begin(), ab.end(), 40);
  std::iota(bb.begin(), bb.end(), 3);
  ASSERT_TRUE((*sa)->Save(prompt_a, ab).ok());
  EXPECT_EQ(*(*sb)->MatchPrefix(prompt_b), 6u);
  EXPECT_EQ(*(*sb)->LoadPrefix(prompt_b, bb, prompt_b.size()), 96u);
  EXPECT_EQ(Mismatches(a, ab, b, bb, 96), 0u);
  // Saving B now writes only its blocks past the shared ones; saving again writes none.
  auto r = (*sb)->Save(prompt_b, bb);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->already_cached, 6u);
  EXPECT_EQ(r->saved, 3u);
  r = (*sb)->Save(prompt_b, bb);
  EXPECT_EQ(r->already_cached, 9u);
  EXPECT_EQ(r->saved, 0u);
  // Another namespace (TP rank, model, ...) shares nothing.
  StoreConnectorOptions other = Options();
  other.ns.model_id = "test/other-model";
  auto so = StoreConnector<Store::Client>::Create(&store->client(), b.layout, b.Bases(), other);
  EXPECT_EQ(*(*so)->MatchPrefix(prompt_a), 0u);
  EXPECT_EQ(*(*so)->LoadPrefix(prompt_a, bb, 160), 0u);
}

TEST(StoreConnectorTest, SmallStagingLoadsInRounds) {
  auto store = StartStore();
  Cache src(Layout(KvOrder::kPageFirst, 16, 64), 5),
      dst(Layout(KvOrder::kLayerFirstBlockMajor, 16, 64), 0);
  StoreConnectorOptions o = Options();
  o.max_staging_bytes = 3 * uint64_t{3} * 2 * 16 * 2 * 16 * 2;  // three blocks per round
  auto s = StoreConnector<Store::Client>::Create(&store->client(), src.layout, src.Bases(), o);
  auto d = StoreConnector<Store::Client>::Create(&store->client(), dst.layout, dst.Bases(), o);
  ASSERT_TRUE(s.ok() && d.ok());
  const auto tokens = Prompt(500, 9);
  const auto sb = Shuffled(32, 64, 3), db = Shuffled(32, 64, 4);
  ASSERT_EQ((*s)->Save(tokens, sb)->saved, 31u);
  EXPECT_EQ(*(*d)->LoadPrefix(tokens, db, 500), 496u);
  EXPECT_EQ(Mismatches(src, sb, dst, db, 496), 0u);
}

TEST(StoreConnectorTest, BadInputIsRefused) {
  auto store = StartStore();
  Cache c(Layout(KvOrder::kLayerFirst, 16, 8), 1);
  StoreConnectorOptions no_model = Options();
  no_model.ns.model_id.clear();
  EXPECT_FALSE(
      StoreConnector<Store::Client>::Create(&store->client(), c.layout, c.Bases(), no_model).ok());
  EXPECT_FALSE(
      StoreConnector<Store::Client>::Create(&store->client(), c.layout, {}, Options()).ok());
  auto s = StoreConnector<Store::Client>::Create(&store->client(), c.layout, c.Bases(), Options());
  ASSERT_TRUE(s.ok());
  const auto tokens = Prompt(64, 1);
  EXPECT_EQ((*s)->Save(tokens, std::vector<uint64_t>{0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);  // 64 tokens in 2 blocks of 16
  EXPECT_EQ((*s)->Save(tokens, std::vector<uint64_t>{0, 1, 2, 8}).status().code(),
            absl::StatusCode::kInvalidArgument);  // block 8 of a cache of 8
  EXPECT_EQ(*(*s)->LoadPrefix(tokens, std::vector<uint64_t>{0, 1, 2, 3}, 64), 0u);  // empty pool
  EXPECT_EQ(*(*s)->MatchPrefix(std::vector<uint32_t>(5, 1)), 0u);                   // no full block
}

}  // namespace
}  // namespace mooncake::connector
