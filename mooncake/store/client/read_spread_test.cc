#include "mooncake/store/client/read_spread.h"

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::client {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

TEST(ReadSpread, EqualLoadsTakeTurns) {
  ReadSpread s;
  const std::array<std::string_view, 3> w = {"a", "b", "c"};
  std::vector<size_t> picks;
  for (uint64_t turn = 0; turn < 6; ++turn) picks.push_back(s.Choose(w, turn, 100, 0));
  EXPECT_EQ(picks, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
}

TEST(ReadSpread, TheLeastLoadedWorkerWinsWhateverTheTurn) {
  ReadSpread s;
  const std::array<std::string_view, 1> only_a = {"a"};
  s.Choose(only_a, 0, 1000, 0);  // a read that had no choice
  const std::array<std::string_view, 2> ab = {"a", "b"};
  EXPECT_EQ(s.Choose(ab, 0, 10, 0), 1u);
  EXPECT_EQ(s.Choose(ab, 0, 10, 0), 1u);
  EXPECT_DOUBLE_EQ(s.Load("b", 0), 20.0);
}

TEST(ReadSpread, ReadsWithAChoiceEvenOutReadsWithout) {
  // Worker a holds a cold object every reader must read; a hot object is on
  // a and b. The hot reads go to b until the loads even out.
  ReadSpread s;
  const std::array<std::string_view, 1> a = {"a"};
  const std::array<std::string_view, 2> ab = {"a", "b"};
  std::map<size_t, int> hot;
  for (uint64_t i = 0; i < 300; ++i) {
    if (i % 3 == 0) s.Choose(a, i, 100, 0);
    ++hot[s.Choose(ab, i, 100, 0)];
  }
  EXPECT_NEAR(s.Load("a", 0), s.Load("b", 0), 100.0);
  EXPECT_EQ(hot[0] + hot[1], 300);
  EXPECT_EQ(hot[1] - hot[0], 100);
}

TEST(ReadSpread, LoadDecaysWithTime) {
  ReadSpread s(kSecond);
  const std::array<std::string_view, 1> a = {"a"};
  s.Choose(a, 0, 1000, 0);
  EXPECT_NEAR(s.Load("a", kSecond), 1000 / 2.718281828, 0.01);
  EXPECT_NEAR(s.Load("a", 20 * kSecond), 0, 1e-5);
  EXPECT_EQ(s.Load("unknown", kSecond), 0.0);
}

TEST(ReadSpread, RemembersABoundedNumberOfWorkers) {
  ReadSpread s;
  std::vector<std::string> names;
  for (size_t i = 0; i < ReadSpread::kMaxWorkers + 10; ++i)
    names.push_back("w" + std::to_string(i));
  for (size_t i = 0; i < names.size(); ++i) {
    const std::array<std::string_view, 1> one = {names[i]};
    s.Choose(one, 0, 1 + i, static_cast<int64_t>(i));
  }
  size_t known = 0;
  for (const std::string& n : names) known += s.Load(n, static_cast<int64_t>(names.size())) > 0;
  EXPECT_LE(known, ReadSpread::kMaxWorkers);
  EXPECT_GT(s.Load(names.back(), static_cast<int64_t>(names.size())), 0.0) << "the newest stays";
}

TEST(ReadSpread, TheWorkerWithTheFewestBytesInFlightWinsOverTheDecayedLoad) {
  InFlightReads flying;
  ReadSpread s(kSecond, &flying);
  const std::array<std::string_view, 1> only_b = {"b"};
  s.Choose(only_b, 0, 1000, 0);  // b read a lot lately, nothing now
  const std::array<InFlightReads::Read, 1> on_a = {{{"a", 4096}}};
  const std::array<std::string_view, 2> ab = {"a", "b"};
  {
    const InFlightScope scope(&flying, on_a);
    EXPECT_EQ(flying.Bytes("a"), 4096u);
    EXPECT_EQ(s.Choose(ab, 0, 10, 0), 1u) << "a has a read in flight";
  }
  EXPECT_EQ(flying.Bytes("a"), 0u);
  EXPECT_EQ(flying.size(), 0u) << "a worker leaves the table when its reads settle";
  EXPECT_EQ(s.Choose(ab, 1, 10, 0), 0u) << "nothing in flight: the decayed load decides";
}

TEST(ReadSpread, ClientsSharingATableAvoidEachOthersBusyWorkers) {
  InFlightReads flying;
  ReadSpread one(kSecond, &flying), two(kSecond, &flying);
  const std::array<std::string_view, 3> abc = {"a", "b", "c"};
  const std::array<InFlightReads::Read, 3> busy = {{{"a", 1 << 20}, {"b", 1 << 20}, {"a", 1}}};
  const InFlightScope scope(&flying, busy);
  EXPECT_EQ(flying.Bytes("a"), (1u << 20) + 1);
  for (uint64_t turn = 0; turn < 3; ++turn) {
    EXPECT_EQ(one.Choose(abc, turn, 100, 0), 2u);
    EXPECT_EQ(two.Choose(abc, turn, 100, 0), 2u);
  }
  // The least bytes in flight wins, not the fewest reads.
  const std::array<InFlightReads::Read, 1> small_on_c = {{{"c", (1 << 20) + 2}}};
  const InFlightScope more(&flying, small_on_c);
  EXPECT_EQ(one.Choose(abc, 0, 100, 0), 1u);
}

TEST(ReadSpread, OneCandidateNeedsNoTable) {
  InFlightReads flying;
  ReadSpread s(kSecond, &flying);
  const std::array<InFlightReads::Read, 1> on_a = {{{"a", 10}}};
  const InFlightScope scope(&flying, on_a);
  const std::array<std::string_view, 1> only_a = {"a"};
  EXPECT_EQ(s.Choose(only_a, 7, 10, 0), 0u);
  EXPECT_DOUBLE_EQ(s.Load("a", 0), 10.0);
}

}  // namespace
}  // namespace mooncake::client
