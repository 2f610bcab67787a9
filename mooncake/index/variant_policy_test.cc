#include "mooncake/index/variant_policy.h"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/eviction_policy_testing.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/s3fifo_policy.h"

namespace mooncake::index {

using LruOrS3 = VariantPolicy<LruPolicy<>, S3FifoPolicy<>>;
static_assert(EvictionPolicy<LruOrS3>);

// The same variant type holding each model, as distinct types for the kit.
struct HoldingLru : LruOrS3 {
  HoldingLru() : LruOrS3(LruPolicy<>()) {}
};
struct HoldingS3Fifo : LruOrS3 {
  HoldingS3Fifo() : LruOrS3(S3FifoPolicy<>()) {}
};

namespace {

using VariantTypes = ::testing::Types<HoldingLru, HoldingS3Fifo>;
INSTANTIATE_TYPED_TEST_SUITE_P(Variant, EvictionPolicyConformance, VariantTypes);

using index_testing::PolicyChain;

TEST(VariantPolicyTest, DefaultHoldsTheFirstModel) {
  LruOrS3 v;
  EXPECT_EQ(v.index(), 0u);
  EXPECT_EQ(LruOrS3(S3FifoPolicy<>()).index(), 1u);
}

// A random mix of admits, reads, erases and evictions (some refused) gives
// the same victims, sizes and charges as the bare model it holds.
template <typename P>
void ExpectSameAsBare(LruOrS3 v, P bare, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<BlockKey>> chains;
  const auto refuse_odd = [](const BlockKey& k) { return (k.low & 1) == 0; };
  for (int step = 0; step < 4000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 4 || chains.empty()) {
      const uint64_t base = rng() % 100000;
      std::vector<BlockKey> chain = PolicyChain(base * 8, 1 + rng() % 4);
      bool fresh = true;
      for (const BlockKey& k : chain) fresh = fresh && !bare.Contains(k);
      if (!fresh) continue;
      const uint64_t charge = 1 + rng() % 3;
      v.Admit(chain, 0, charge);
      bare.Admit(chain, 0, charge);
      chains.push_back(std::move(chain));
    } else if (op < 7) {
      const std::vector<BlockKey>& chain = chains[rng() % chains.size()];
      bool tracked = true;
      for (const BlockKey& k : chain) tracked = tracked && bare.Contains(k);
      if (!tracked) continue;
      v.Touch(chain);
      bare.Touch(chain);
    } else if (op < 8) {
      const BlockKey& k = chains[rng() % chains.size()].back();
      ASSERT_EQ(v.Erase(k), bare.Erase(k));
    } else {
      const std::optional<Eviction<BlockKey>> a =
          op == 8 ? v.Evict(refuse_odd) : v.Evict([](const BlockKey&) { return true; });
      const std::optional<Eviction<BlockKey>> b =
          op == 8 ? bare.Evict(refuse_odd) : bare.Evict([](const BlockKey&) { return true; });
      ASSERT_EQ(a.has_value(), b.has_value()) << step;
      if (a.has_value()) {
        EXPECT_EQ(a->key, b->key) << step;
        EXPECT_EQ(a->charge, b->charge) << step;
      }
    }
    ASSERT_EQ(v.size(), bare.size()) << step;
    ASSERT_EQ(v.charged(), bare.charged()) << step;
  }
}

TEST(VariantPolicyTest, BehavesAsTheModelItHolds) {
  ExpectSameAsBare(LruOrS3(LruPolicy<>()), LruPolicy<>(), 1);
  ExpectSameAsBare(LruOrS3(S3FifoPolicy<>()), S3FifoPolicy<>(), 2);
}

}  // namespace
}  // namespace mooncake::index
