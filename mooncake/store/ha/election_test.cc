#include "mooncake/store/ha/election.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/store/ha/oplog_store.h"
#include "mooncake/store/ha/testing/etcd_process.h"

namespace mooncake::ha {
namespace {

// What one candidate's callbacks saw.
struct Events {
  std::mutex mu;
  std::vector<int64_t> elected ABSL_GUARDED_BY(mu);
  std::vector<std::string> lost ABSL_GUARDED_BY(mu);
  absl::Time lost_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();

  size_t lost_count() {
    std::lock_guard<std::mutex> l(mu);
    return lost.size();
  }
};

class ElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> p = EtcdProcess::Start();
    if (absl::IsFailedPrecondition(p.status())) GTEST_SKIP() << p.status();
    ASSERT_TRUE(p.ok()) << p.status();
    etcd_ = *std::move(p);
    absl::StatusOr<EtcdClient> c = EtcdClient::Create(etcd_->endpoint());
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*c);
  }

  std::unique_ptr<LeaderElection> Candidate(const std::string& id, Events* events,
                                            int64_t ttl_ms = 2000) {
    absl::StatusOr<std::unique_ptr<LeaderElection>> e =
        LeaderElection::Create(*client_, {.cluster = "c1",
                                          .candidate_id = id,
                                          .ttl_ms = ttl_ms,
                                          .poll_ms = 50,
                                          .on_elected =
                                              [events](int64_t epoch) {
                                                std::lock_guard<std::mutex> l(events->mu);
                                                events->elected.push_back(epoch);
                                              },
                                          .on_lost =
                                              [events](std::string_view reason) {
                                                std::lock_guard<std::mutex> l(events->mu);
                                                events->lost.emplace_back(reason);
                                                events->lost_at = absl::Now();
                                              }});
    EXPECT_TRUE(e.ok()) << e.status();
    EXPECT_TRUE((*e)->Start().ok());
    return *std::move(e);
  }

  // Waits until `pred` holds, at most `timeout`.
  template <typename Pred>
  static bool WaitUntil(Pred pred, absl::Duration timeout = absl::Seconds(5)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!pred()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::optional<EtcdClient> client_;
};

TEST(ElectionCreateTest, RejectsBadOptions) {
  const EtcdClient c = *EtcdClient::Create("127.0.0.1:1");
  EXPECT_TRUE(absl::IsInvalidArgument(
      LeaderElection::Create(c, {.cluster = "a/b", .candidate_id = "x"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LeaderElection::Create(c, {.cluster = "a"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      LeaderElection::Create(c, {.cluster = "a", .candidate_id = "x", .ttl_ms = 0}).status()));
}

TEST_F(ElectionTest, TwoCandidatesElectExactlyOneLeader) {
  Events ea, eb;
  std::unique_ptr<LeaderElection> a = Candidate("a:1", &ea);
  std::unique_ptr<LeaderElection> b = Candidate("b:1", &eb);
  ASSERT_TRUE(WaitUntil([&] { return a->IsLeader() || b->IsLeader(); }));
  // Stays exactly one over several renewal periods.
  for (int i = 0; i < 30; ++i) {
    EXPECT_NE(a->IsLeader(), b->IsLeader());
    absl::SleepFor(absl::Milliseconds(100));
  }
  LeaderElection& leader = a->IsLeader() ? *a : *b;
  absl::StatusOr<std::optional<LeaderInfo>> info = leader.CurrentLeader();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_TRUE(info->has_value());
  EXPECT_EQ((*info)->id, leader.options().candidate_id);
  EXPECT_EQ((*info)->epoch, leader.epoch());
  EXPECT_GT(leader.epoch(), 0);
  EXPECT_EQ(ReadLeader(*client_, "c1")->value().epoch, leader.epoch());
  EXPECT_FALSE(ReadLeader(*client_, "other")->has_value());
  {
    std::scoped_lock both(ea.mu, eb.mu);
    EXPECT_EQ(ea.elected.size() + eb.elected.size(), 1u);
    EXPECT_TRUE(ea.lost.empty() && eb.lost.empty());
  }
}

TEST_F(ElectionTest, ResignHandsOverAtOnceWithALargerEpoch) {
  Events ea, eb;
  std::unique_ptr<LeaderElection> a = Candidate("a:1", &ea);
  ASSERT_TRUE(WaitUntil([&] { return a->IsLeader(); }));
  const int64_t first = a->epoch();
  std::unique_ptr<LeaderElection> b = Candidate("b:1", &eb);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(b->IsLeader());

  const absl::Time resigned = absl::Now();
  ASSERT_TRUE(a->Resign().ok());
  EXPECT_FALSE(a->IsLeader());
  EXPECT_EQ(a->epoch(), 0);
  ASSERT_TRUE(WaitUntil([&] { return b->IsLeader(); }));
  EXPECT_LT(absl::Now() - resigned, absl::Seconds(1));  // not a lease expiry
  EXPECT_GT(b->epoch(), first);
  std::lock_guard<std::mutex> l(ea.mu);
  ASSERT_EQ(ea.lost.size(), 1u);
  EXPECT_EQ(ea.lost[0], "stopped");
}

TEST_F(ElectionTest, StoppedLeadersLeaseExpiresAndTheStandbyWins) {
  Events ea, eb;
  std::unique_ptr<LeaderElection> a = Candidate("a:1", &ea);
  ASSERT_TRUE(WaitUntil([&] { return a->IsLeader(); }));
  const int64_t first = a->epoch();
  std::unique_ptr<LeaderElection> b = Candidate("b:1", &eb);
  a->Stop();
  EXPECT_FALSE(a->IsLeader());
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(WaitUntil([&] { return b->IsLeader(); }, absl::Seconds(6)));
  EXPECT_GT(absl::Now() - stopped, absl::Milliseconds(300));  // waited for the lease
  EXPECT_GT(b->epoch(), first);
  EXPECT_EQ(b->CurrentLeader()->value().id, "b:1");
}

// A leader cut off from etcd steps down before its lease can have expired at
// etcd (last successful renewal + ttl), so two leaders never both believe.
TEST_F(ElectionTest, LeaderCutOffFromEtcdStepsDownBeforeItsLeaseExpires) {
  Events ea;
  constexpr int64_t kTtlMs = 2000;
  std::unique_ptr<LeaderElection> a = Candidate("a:1", &ea, kTtlMs);
  ASSERT_TRUE(WaitUntil([&] { return a->IsLeader(); }));
  absl::SleepFor(absl::Milliseconds(1000));  // a few renewals
  ASSERT_TRUE(a->IsLeader());

  const absl::Time paused = absl::Now();
  etcd_->Pause();
  const bool lost = WaitUntil([&] { return ea.lost_count() > 0; }, absl::Seconds(4));
  etcd_->Resume();
  ASSERT_TRUE(lost);
  EXPECT_FALSE(a->IsLeader());
  const absl::Time last = a->last_renewal();
  std::lock_guard<std::mutex> l(ea.mu);
  EXPECT_LE(last, paused);
  EXPECT_GE(ea.lost_at, paused);
  EXPECT_LT(ea.lost_at, last + absl::Milliseconds(kTtlMs))
      << "stepped down " << (ea.lost_at - last) << " after the last renewal";
  EXPECT_NE(ea.lost[0].find("not renewed"), std::string::npos) << ea.lost[0];
}

TEST_F(ElectionTest, DeposedLeadersWritesAreFenced) {
  Events ea, eb;
  std::unique_ptr<LeaderElection> a = Candidate("a:1", &ea);
  ASSERT_TRUE(WaitUntil([&] { return a->IsLeader(); }));
  const int64_t old_epoch = a->epoch();
  const OplogStore oplog(*client_, "c1");
  ASSERT_TRUE(oplog.Append(old_epoch, 1, "by a").ok());

  std::unique_ptr<LeaderElection> b = Candidate("b:1", &eb);
  ASSERT_TRUE(a->Resign().ok());
  ASSERT_TRUE(WaitUntil([&] { return b->IsLeader(); }));

  absl::Status s = oplog.Append(old_epoch, 2, "by a, deposed");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("fenced"), absl::string_view::npos) << s;
  EXPECT_TRUE(oplog.Append(b->epoch(), 2, "by b").ok());
  absl::StatusOr<std::vector<OplogStore::Batch>> all = oplog.ReadFrom(0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].second, "by b");
}

}  // namespace
}  // namespace mooncake::ha
