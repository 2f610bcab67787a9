// Master: clones (shared ranges, reference counts), object groups (visible
// together, gone together) and tensor queries.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

namespace {

using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::MountReq;
using testing_internal::PutReq;

class MasterGroupTest : public MasterFixture {
 protected:
  using MasterFixture::Put;

  static proto::PutStartRequest InGroup(const std::string& key, uint64_t size,
                                        const std::string& group) {
    proto::PutStartRequest r = PutReq(key, size);
    r.mutable_options()->set_group_id(group);
    return r;
  }
  uint64_t Put(const std::string& key, uint64_t size = 4096, uint32_t replicas = 1) {
    return Put(PutReq(key, size, replicas));
  }
  absl::StatusOr<proto::CloneResponse> Clone(const std::vector<std::string>& src,
                                             const std::vector<std::string>& dst) {
    proto::CloneRequest r;
    for (const auto& k : src) r.add_source_keys(k);
    for (const auto& k : dst) r.add_destination_keys(k);
    return master_->Clone(r);
  }
  absl::StatusOr<proto::CommitGroupResponse> Commit(const std::string& group) {
    proto::CommitGroupRequest r;
    r.set_group_id(group);
    return master_->CommitGroup(r);
  }
  // Every segment's allocator agrees that nothing is allocated.
  void ExpectPoolEmpty() {
    EXPECT_EQ(master_->Stats().used_bytes, 0u);
    EXPECT_EQ(master_->SharedBytes(), 0u);
    for (const SegmentView& v : master_->Segments()) {
      auto st = master_->SegmentAllocatorStats(v.id);
      ASSERT_TRUE(st.has_value());
      EXPECT_EQ(st->used_bytes, 0u) << "segment " << v.id;
      EXPECT_EQ(st->live_allocations, 0u) << "segment " << v.id;
    }
  }
};

// ---- Clone -------------------------------------------------------------------

TEST_F(MasterGroupTest, CloneSharesTheSourceRangesAndAllocatesNothing) {
  Mount("w1");
  Mount("w2");
  ASSERT_NE(Put("src", 4096, 2), 0u);
  const uint64_t used = master_->Stats().used_bytes;
  auto c = Clone({"src"}, {"dst"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cloned(), 1u);
  EXPECT_EQ(c->shared_bytes(), 2u * 4096);
  EXPECT_EQ(master_->Stats().used_bytes, used);  // nothing allocated
  EXPECT_EQ(master_->SharedBytes(), 2u * 4096);
  auto a = master_->GetReplicas(GetReq("src"));
  auto b = master_->GetReplicas(GetReq("dst"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(b->replicas_size(), 2);
  std::set<std::pair<uint64_t, uint64_t>> ra, rb;
  for (const auto& r : a->replicas()) ra.insert({r.segment_id(), r.offset()});
  for (const auto& r : b->replicas()) rb.insert({r.segment_id(), r.offset()});
  EXPECT_EQ(ra, rb);
  EXPECT_EQ(b->object().checksum(), a->object().checksum());
  EXPECT_NE(b->object().version(), a->object().version());
  proto::ReleaseLeasesRequest rel;
  rel.add_lease_ids(a->lease().lease_id());
  rel.add_lease_ids(b->lease().lease_id());
  ASSERT_TRUE(master_->ReleaseLeases(rel).ok());

  // The source goes: the clone still holds the ranges.
  ASSERT_TRUE(Remove("src").ok());
  EXPECT_EQ(master_->Stats().used_bytes, used);
  EXPECT_TRUE(Exists("dst"));
  // The last key goes: the ranges go back.
  ASSERT_TRUE(Remove("dst").ok());
  ExpectPoolEmpty();
}

TEST_F(MasterGroupTest, CloneIsAllOrNothing) {
  Mount("w1");
  ASSERT_NE(Put("a"), 0u);
  ASSERT_NE(Put("b"), 0u);
  ASSERT_NE(Put("taken"), 0u);
  const uint64_t used = master_->Stats().used_bytes;
  // The second destination exists: the first clone is undone.
  auto c = Clone({"a", "b"}, {"a2", "taken"});
  EXPECT_TRUE(absl::IsAlreadyExists(c.status())) << c.status();
  EXPECT_FALSE(Exists("a2"));
  EXPECT_EQ(master_->SharedBytes(), 0u);
  EXPECT_EQ(master_->Stats().used_bytes, used);
  EXPECT_EQ(master_->Stats().objects, 3);
  // A missing source.
  c = Clone({"a", "nope"}, {"a2", "n2"});
  EXPECT_TRUE(absl::IsNotFound(c.status())) << c.status();
  EXPECT_FALSE(Exists("a2"));
  // Malformed requests.
  EXPECT_TRUE(absl::IsInvalidArgument(Clone({"a"}, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Clone({"a", "b"}, {"x", "x"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Clone({"a"}, {""}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(master_->Clone(proto::CloneRequest()).status()));
  // Another tenant does not see the source.
  proto::CloneRequest other;
  other.add_source_keys("a");
  other.add_destination_keys("a3");
  other.set_tenant("other");
  EXPECT_TRUE(absl::IsNotFound(master_->Clone(other).status()));
}

TEST_F(MasterGroupTest, ClonePrefixFormRenamesEveryMatchingKey) {
  Mount("w1");
  for (int l = 0; l < 3; ++l) ASSERT_NE(Put(absl::StrCat("ctx/L", l)), 0u);
  ASSERT_NE(Put("ctxother"), 0u);
  proto::CloneRequest r;
  r.set_source_prefix("ctx/");
  r.set_destination_prefix("branch1/");
  auto c = master_->Clone(r);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cloned(), 3u);
  for (int l = 0; l < 3; ++l) EXPECT_TRUE(Exists(absl::StrCat("branch1/L", l)));
  EXPECT_FALSE(Exists("branch1other"));
  // Again: the destinations exist now.
  EXPECT_TRUE(absl::IsAlreadyExists(master_->Clone(r).status()));
  r.set_source_prefix("none/");
  EXPECT_TRUE(absl::IsNotFound(master_->Clone(r).status()));
}

TEST_F(MasterGroupTest, ACloneOfACloneAndEvictionCountSharedRangesOnce) {
  Mount("w1");
  ASSERT_NE(Put("k"), 0u);
  ASSERT_TRUE(Clone({"k"}, {"k1"}).ok());
  ASSERT_TRUE(Clone({"k1"}, {"k2"}).ok());
  EXPECT_EQ(master_->Stats().used_bytes, 4096u);
  EXPECT_EQ(master_->SharedBytes(), 2u * 4096);
  // Evicting everything: the range is freed once, when its last key goes
  // (the evictor counts as victims the objects that gave bytes back).
  const EvictionResult e = master_->EvictBytes(3 * 4096);
  EXPECT_EQ(e.victims, 1u);
  EXPECT_EQ(e.freed_bytes, 4096u);
  EXPECT_EQ(master_->Stats().objects, 0);
  ExpectPoolEmpty();
}

TEST_F(MasterGroupTest, ACloneExpiresAtItsOwnTtl) {
  Mount("w1");
  ASSERT_NE(Put("k"), 0u);
  proto::CloneRequest r;
  r.add_source_keys("k");
  r.add_destination_keys("t");
  r.set_ttl_ms(100);
  ASSERT_TRUE(master_->Clone(r).ok());
  clock_.AdvanceMs(101);
  master_->Tick();
  EXPECT_FALSE(Exists("t"));
  EXPECT_TRUE(Exists("k"));
  EXPECT_EQ(master_->SharedBytes(), 0u);
  ASSERT_TRUE(Remove("k").ok());
  ExpectPoolEmpty();
}

// 10,000 randomized clones, removes, evictions and puts; then everything is
// removed and every allocator is back at zero.
TEST_F(MasterGroupTest, RandomizedClonesLeakNothing) {
  Mount("w1", "seg0", 1024 * 4096);
  Mount("w2", "seg0", 1024 * 4096);
  std::mt19937_64 rng(42);
  std::vector<std::string> live;
  int next = 0;
  uint64_t clones = 0, evictions = 0;
  for (int op = 0; op < 10000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (live.empty() || kind < 3) {
      const std::string k = absl::StrCat("p", next++);
      auto start = master_->PutStart(PutReq(k, 512 + rng() % 8192, 1 + rng() % 2));
      if (start.ok() && master_->PutEnd(EndReq(k, start->put_id())).ok()) live.push_back(k);
    } else if (kind < 7) {
      const std::string& src = live[rng() % live.size()];
      const std::string k = absl::StrCat("c", next++);
      if (Clone({src}, {k}).ok()) {
        live.push_back(k);
        ++clones;
      }
    } else if (kind < 9) {
      const size_t i = rng() % live.size();
      EXPECT_TRUE(Remove(live[i]).ok());
      live[i] = live.back();
      live.pop_back();
    } else {
      evictions += master_->EvictBytes(4096 * (1 + rng() % 8)).victims;
      live.erase(std::remove_if(live.begin(), live.end(),
                                [&](const std::string& k) { return !Exists(k); }),
                 live.end());
    }
    if (op % 1000 == 999) master_->Tick();
  }
  EXPECT_GT(clones, 1000u);
  EXPECT_GT(evictions, 100u);
  for (const std::string& k : live) EXPECT_TRUE(Remove(k).ok()) << k;
  master_->Tick();
  EXPECT_EQ(master_->Stats().objects, 0);
  ExpectPoolEmpty();
}

// ---- Groups --------------------------------------------------------------------

TEST_F(MasterGroupTest, MembersAreInvisibleUntilTheGroupCommits) {
  Mount("w1");
  auto s1 = master_->PutStart(InGroup("g/a", 4096, "req1"));
  ASSERT_TRUE(s1.ok()) << s1.status();
  ASSERT_NE(Put(InGroup("g/b", 4096, "req1")), 0u);
  EXPECT_FALSE(Exists("g/b"));
  EXPECT_TRUE(absl::IsNotFound(master_->GetReplicas(GetReq("g/b")).status()));
  // One member is still being put.
  EXPECT_EQ(Commit("req1").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(master_->PutEnd(EndReq("g/a", s1->put_id())).ok());
  EXPECT_FALSE(Exists("g/a"));
  auto c = Commit("req1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->objects(), 2u);
  EXPECT_EQ(c->bytes(), 2u * 4096);
  EXPECT_TRUE(Exists("g/a"));
  EXPECT_TRUE(Exists("g/b"));
  // Committed again: the same answer. Joining now: refused.
  EXPECT_TRUE(Commit("req1").ok());
  EXPECT_EQ(master_->PutStart(InGroup("g/c", 4096, "req1")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::IsNotFound(Commit("nope").status()));
}

TEST_F(MasterGroupTest, RemovingOneMemberRemovesTheGroup) {
  Mount("w1");
  for (int i = 0; i < 4; ++i) ASSERT_NE(Put(InGroup(absl::StrCat("m", i), 4096, "G")), 0u);
  ASSERT_TRUE(Commit("G").ok());
  ASSERT_TRUE(Remove("m2").ok());
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(Exists(absl::StrCat("m", i)));
  EXPECT_EQ(master_->Stats().objects, 0);
  ExpectPoolEmpty();
  EXPECT_TRUE(absl::IsNotFound(Commit("G").status()));
  // The id may be used again.
  ASSERT_NE(Put(InGroup("m0", 4096, "G")), 0u);
  EXPECT_TRUE(Commit("G").ok());
  EXPECT_TRUE(Exists("m0"));
}

TEST_F(MasterGroupTest, RemoveGroupRemovesEveryMemberEvenPending) {
  Mount("w1");
  ASSERT_NE(Put(InGroup("a", 4096, "G")), 0u);
  auto pending = master_->PutStart(InGroup("b", 4096, "G"));
  ASSERT_TRUE(pending.ok());
  proto::RemoveGroupRequest r;
  r.set_group_id("G");
  auto removed = master_->RemoveGroup(r);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->removed(), 2u);
  EXPECT_TRUE(absl::IsNotFound(master_->PutEnd(EndReq("b", pending->put_id())).status()));
  ExpectPoolEmpty();
  EXPECT_TRUE(absl::IsNotFound(master_->RemoveGroup(r).status()));
}

TEST_F(MasterGroupTest, EvictionTakesTheWholeGroupAndNeverAnOpenOne) {
  Mount("w1");
  for (int i = 0; i < 3; ++i) ASSERT_NE(Put(InGroup(absl::StrCat("open", i), 4096, "O")), 0u);
  for (int i = 0; i < 3; ++i) ASSERT_NE(Put(InGroup(absl::StrCat("done", i), 4096, "D")), 0u);
  ASSERT_TRUE(Commit("D").ok());
  // One object's worth asked: the whole committed group goes, the open one stays.
  const EvictionResult e = master_->EvictBytes(4096);
  EXPECT_GE(e.freed_bytes, 3u * 4096);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Exists(absl::StrCat("done", i)));
  EXPECT_EQ(master_->Stats().objects, 3);  // the open group's members
  EXPECT_TRUE(Commit("O").ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Exists(absl::StrCat("open", i)));
}

TEST_F(MasterGroupTest, AnOpenGroupNotCommittedInTimeEnds) {
  MasterOptions o;
  o.put_timeout_ms = 1000;
  Make(o);
  Mount("w1");
  ASSERT_NE(Put(InGroup("a", 4096, "late")), 0u);
  clock_.AdvanceMs(1500);
  master_->Tick();
  EXPECT_TRUE(Commit("late").ok());  // within twice the put timeout
  ASSERT_NE(Put(InGroup("b", 4096, "later")), 0u);
  clock_.AdvanceMs(2001);
  EXPECT_EQ(master_->Tick().groups_expired, 1u);
  EXPECT_TRUE(absl::IsNotFound(Commit("later").status()));
  EXPECT_EQ(master_->Stats().objects, 1);
}

TEST_F(MasterGroupTest, GroupInputIsChecked) {
  Mount("w1");
  EXPECT_TRUE(absl::IsInvalidArgument(
      master_->PutStart(InGroup("k", 4096, std::string(rpc::kMaxGroupIdBytes + 1, 'g'))).status()));
  proto::PutStartRequest rep = InGroup("k", 4096, "G");
  rep.mutable_options()->set_replace(true);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->PutStart(rep).status()));
  ASSERT_NE(Put(InGroup("k", 4096, "G")), 0u);
  proto::PutStartRequest pinned = InGroup("k2", 4096, "G");
  pinned.mutable_options()->set_pin(proto::PIN_HARD);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->PutStart(pinned).status()));
  ASSERT_TRUE(Commit("G").ok());
  // A member cannot be replaced.
  proto::PutStartRequest again = PutReq("k", 4096);
  again.mutable_options()->set_replace(true);
  EXPECT_EQ(master_->PutStart(again).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::IsInvalidArgument(Commit("").status()));
}

// Readers never see part of a group: BatchExists over each group's members
// answers all or none while writers put, commit, remove and evict groups.
TEST_F(MasterGroupTest, ConcurrentReadersNeverSeeAPartialGroup) {
  Mount("w1", "seg0", 4096 * 4096);
  constexpr int kGroups = 16, kMembers = 4;
  auto member = [](int g, int gen, int m) { return absl::StrCat("grp", g, "/", gen, "/", m); };
  std::vector<std::atomic<int>> gens(kGroups);
  for (auto& g : gens) g.store(0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, partial{0}, whole{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load()) {
        const int g = static_cast<int>(rng() % kGroups);
        const int gen = gens[g].load();
        proto::BatchExistsRequest r;
        for (int m = 0; m < kMembers; ++m) r.add_keys(member(g, gen, m));
        auto resp = master_->BatchExists(r);
        ASSERT_TRUE(resp.ok());
        const int n =
            static_cast<int>(std::count(resp->exists().begin(), resp->exists().end(), true));
        if (n != 0 && n != kMembers) {
          if (partial.fetch_add(1) < 3) {
            std::string bits;
            for (bool b : resp->exists()) bits += b ? '1' : '0';
            ADD_FAILURE() << "partial read of group " << g << " gen " << gen << ": " << bits
                          << " now gen " << gens[g].load();
          }
        }
        if (n == kMembers) whole.fetch_add(1);
        reads.fetch_add(1);
        std::this_thread::yield();
      }
    });
  }
  std::mt19937_64 rng(7);
  uint64_t ops = 0;
  while (ops < 100000) {
    const int g = static_cast<int>(rng() % kGroups);
    const int gen = gens[g].load();
    const std::string id = absl::StrCat("G", g, "-", gen);
    // Build the group, commit it, then end it one of three ways.
    for (int m = 0; m < kMembers; ++m) {
      auto start = master_->PutStart(InGroup(member(g, gen, m), 1024, id));
      ASSERT_TRUE(start.ok()) << start.status();
      ASSERT_TRUE(master_->PutEnd(EndReq(member(g, gen, m), start->put_id())).ok());
      ops += 2;
    }
    auto committed = Commit(id);
    ASSERT_TRUE(committed.ok());
    ASSERT_EQ(committed->objects(), static_cast<uint64_t>(kMembers));
    for (int m = 0; m < kMembers; ++m) ASSERT_TRUE(Exists(member(g, gen, m))) << id << " " << m;
    ++ops;
    for (int spin = 0; spin < 20; ++spin) std::this_thread::yield();
    switch (rng() % 3) {
      case 0:
        ASSERT_TRUE(Remove(member(g, gen, static_cast<int>(rng() % kMembers))).ok());
        break;
      case 1: {
        proto::RemoveGroupRequest r;
        r.set_group_id(id);
        ASSERT_TRUE(master_->RemoveGroup(r).ok());
        break;
      }
      default:
        while (master_->Stats().objects > 0) master_->EvictBytes(1024);
        break;
    }
    ++ops;
    gens[g].store(gen + 1);
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(partial.load(), 0u) << "of " << reads.load() << " reads";
  EXPECT_GT(whole.load(), 0u);
  ExpectPoolEmpty();
}

// ---- Tensor queries and usage by model ---------------------------------------

TEST_F(MasterGroupTest, QueryObjectsFiltersByTensorMetaAndPages) {
  Mount("w1");
  auto tensor = [](const std::string& key, const std::string& model, uint32_t lb, uint32_t le,
                   uint32_t rank) {
    proto::PutStartRequest r = PutReq(key, 4096);
    r.mutable_tensor()->set_model(model);
    r.mutable_tensor()->set_layer_begin(lb);
    r.mutable_tensor()->set_layer_end(le);
    r.mutable_tensor()->set_tp_rank(rank);
    r.mutable_tensor()->set_tp_size(2);
    return r;
  };
  for (uint32_t l = 0; l < 8; ++l) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      ASSERT_NE(Put(tensor(absl::StrCat("llama/L", l, "/r", rank), "llama", l, l + 1, rank)), 0u);
    }
  }
  ASSERT_NE(Put(tensor("qwen/L0", "qwen", 0, 4, 0)), 0u);
  ASSERT_NE(Put("plain"), 0u);
  proto::QueryObjectsRequest q;
  q.set_tp_rank(-1);
  q.set_model("llama");
  EXPECT_EQ(master_->QueryObjects(q)->objects_size(), 16);
  q.set_has_layer_range(true);
  q.set_layer_begin(2);
  q.set_layer_end(4);
  EXPECT_EQ(master_->QueryObjects(q)->objects_size(), 4);
  q.set_tp_rank(1);
  auto one = master_->QueryObjects(q);
  ASSERT_EQ(one->objects_size(), 2);
  EXPECT_EQ(one->objects(0).key(), "llama/L2/r1");
  EXPECT_EQ(one->objects(0).object().tensor().model(), "llama");
  // Pages, in key order.
  proto::QueryObjectsRequest all;
  all.set_tp_rank(-1);
  all.set_limit(5);
  std::vector<std::string> keys;
  for (;;) {
    auto page = master_->QueryObjects(all);
    ASSERT_TRUE(page.ok());
    for (const auto& e : page->objects()) keys.push_back(e.key());
    if (!page->more()) break;
    all.set_start_after(keys.back());
  }
  EXPECT_EQ(keys.size(), 18u);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  q.set_layer_begin(4);
  q.set_layer_end(4);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->QueryObjects(q).status()));

  master_->Tick();
  const std::string text = metrics_.RenderPrometheus();
  EXPECT_NE(text.find("mooncake_master_model_objects{model=\"llama\"} 16"), std::string::npos)
      << text;
  EXPECT_NE(text.find("mooncake_master_model_bytes{model=\"qwen\"} 4096"), std::string::npos);
}

}  // namespace
}  // namespace mooncake::master
