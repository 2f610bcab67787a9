#include "mooncake/index/match_prefix.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "mooncake/index/block_key.h"

namespace mooncake::index {
namespace {

std::vector<BlockKey> Chain(size_t n) {
  std::vector<BlockKey> chain;
  for (size_t i = 0; i < n; ++i) chain.push_back(BlockKey{i + 1, ~i});
  return chain;
}

// A probe over a set of present keys that logs every call.
struct SetProbe {
  const absl::flat_hash_set<BlockKey>* present;
  std::vector<size_t> calls;
  bool operator()(size_t i, const BlockKey& key) {
    calls.push_back(i);
    return present->contains(key);
  }
};

// The requirements, each with a broken probe the concept must reject.
struct NoArgs {
  bool operator()() const { return true; }
};
struct WrongKey {
  bool operator()(size_t, const std::string&) const { return true; }
};
struct ReturnsInt {
  int operator()(size_t, const BlockKey&) const { return 1; }
};
struct NotAChain {
  int begin() const { return 0; }  // no end(), no size()
};
static_assert(PrefixProbe<SetProbe, BlockKey>);
static_assert(PrefixProbe<bool (*)(size_t, const BlockKey&), BlockKey>);
static_assert(!PrefixProbe<NoArgs, BlockKey>);
static_assert(!PrefixProbe<WrongKey, BlockKey>);
static_assert(!PrefixProbe<ReturnsInt, BlockKey>);
static_assert(KeyChain<std::span<const BlockKey>>);
static_assert(KeyChain<std::vector<BlockKey>>);
static_assert(!KeyChain<NotAChain>);
static_assert(std::same_as<ChainKey<std::span<const BlockKey>>, BlockKey>);

TEST(MatchPrefixTest, EmptyChainMatchesNothingAndProbesNothing) {
  const absl::flat_hash_set<BlockKey> present;
  SetProbe probe{&present, {}};
  EXPECT_EQ(MatchPrefix(std::span<const BlockKey>(), probe), 0u);
  EXPECT_TRUE(probe.calls.empty());
}

TEST(MatchPrefixTest, WholeChainPresent) {
  const std::vector<BlockKey> chain = Chain(5);
  const absl::flat_hash_set<BlockKey> present(chain.begin(), chain.end());
  SetProbe probe{&present, {}};
  EXPECT_EQ(MatchPrefix(chain, probe), 5u);
  EXPECT_EQ(probe.calls, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

TEST(MatchPrefixTest, StopsAtFirstMissAndNeverProbesPastIt) {
  const std::vector<BlockKey> chain = Chain(6);
  // Blocks 0, 1, 3, 4 present: block 2 ends the match though 3 and 4 exist.
  const absl::flat_hash_set<BlockKey> present = {chain[0], chain[1], chain[3], chain[4]};
  SetProbe probe{&present, {}};
  EXPECT_EQ(MatchPrefix(chain, probe), 2u);
  EXPECT_EQ(probe.calls, (std::vector<size_t>{0, 1, 2}));
}

TEST(MatchPrefixTest, FirstBlockMissingMatchesNothing) {
  const std::vector<BlockKey> chain = Chain(3);
  const absl::flat_hash_set<BlockKey> present = {chain[1], chain[2]};
  SetProbe probe{&present, {}};
  EXPECT_EQ(MatchPrefix(std::span<const BlockKey>(chain), probe), 0u);
  EXPECT_EQ(probe.calls, (std::vector<size_t>{0}));
}

TEST(MatchPrefixTest, ProbeSeesIndexAndKeyAndRecordsHitsOnly) {
  const std::vector<BlockKey> chain = Chain(8);
  std::vector<BlockKey> found;
  // Present while the key matches its position: the index the probe gets is
  // the key's position in the chain.
  const size_t m = MatchPrefix(chain, [&](size_t i, const BlockKey& key) {
    if (i >= 4 || key != chain[i]) return false;
    found.push_back(key);
    return true;
  });
  EXPECT_EQ(m, 4u);
  EXPECT_EQ(found, std::vector<BlockKey>(chain.begin(), chain.begin() + 4));
}

TEST(MatchPrefixTest, WalksAnyKeyChain) {
  const std::vector<std::string> chain = {"a", "b", "c", "x", "e"};
  const size_t m = MatchPrefix(chain, [](size_t i, const std::string& key) {
    return key == std::string(1, static_cast<char>('a' + i));
  });
  EXPECT_EQ(m, 3u);
}

}  // namespace
}  // namespace mooncake::index
