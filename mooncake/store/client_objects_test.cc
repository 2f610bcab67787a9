// Client's clone, object-group and tensor-query calls against a scripted
// master: what each call sends, how QueryObjects follows pages, what is
// refused before any RPC, and how the master's errors come back.
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"
#include "mooncake/store/client.h"
#include "mooncake/store/client/testing/counting_channel.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake {
namespace {

namespace proto = store::proto;
using Channel = store_testing::CountingChannel<rpc::InProcessChannel>;
using TestClient = client::Client<Channel>;

// Answers the four calls from `table` (key order), recording each request.
class ScriptedMaster {
 public:
  ScriptedMaster() {
    EXPECT_TRUE(
        registry_
            .Register<rpc::CloneMethod>(
                [this](const proto::CloneRequest& r) -> absl::StatusOr<proto::CloneResponse> {
                  MutexLock lock(&mu_);
                  clones_.push_back(r);
                  if (!error_.ok()) return error_;
                  proto::CloneResponse resp;
                  resp.set_cloned(r.source_keys_size() > 0 ? r.source_keys_size() : 3);
                  resp.set_shared_bytes(4096);
                  return resp;
                })
            .ok());
    EXPECT_TRUE(
        registry_
            .Register<rpc::CommitGroupMethod>([this](const proto::CommitGroupRequest& r)
                                                  -> absl::StatusOr<proto::CommitGroupResponse> {
              MutexLock lock(&mu_);
              commits_.push_back(r);
              if (!error_.ok()) return error_;
              proto::CommitGroupResponse resp;
              resp.set_objects(2);
              resp.set_bytes(200);
              return resp;
            })
            .ok());
    EXPECT_TRUE(
        registry_
            .Register<rpc::RemoveGroupMethod>([this](const proto::RemoveGroupRequest& r)
                                                  -> absl::StatusOr<proto::RemoveGroupResponse> {
              MutexLock lock(&mu_);
              removes_.push_back(r);
              if (!error_.ok()) return error_;
              proto::RemoveGroupResponse resp;
              resp.set_removed(5);
              return resp;
            })
            .ok());
    EXPECT_TRUE(
        registry_
            .Register<rpc::QueryObjectsMethod>([this](const proto::QueryObjectsRequest& r)
                                                   -> absl::StatusOr<proto::QueryObjectsResponse> {
              MutexLock lock(&mu_);
              queries_.push_back(r);
              if (!error_.ok()) return error_;
              const uint32_t limit = r.limit() == 0 ? 1000 : r.limit();
              proto::QueryObjectsResponse resp;
              auto it = table_.upper_bound(r.start_after());
              for (; it != table_.end() && resp.objects_size() < static_cast<int>(limit); ++it) {
                proto::ObjectEntry* e = resp.add_objects();
                e->set_key(it->first);
                e->mutable_object()->set_size_bytes(it->second);
              }
              resp.set_more(it != table_.end());
              return resp;
            })
            .ok());
    inproc_ = std::make_unique<rpc::InProcessChannel>(&registry_);
    channel_ = std::make_unique<Channel>(inproc_.get());
    client::ClientOptions o;
    o.use_shm = false;
    o.tenant = "t1";
    auto c = TestClient::Create(o, channel_.get());
    EXPECT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  TestClient& client() { return *client_; }
  uint64_t calls() const { return channel_->total(); }
  void Fill(size_t n) {
    for (size_t i = 0; i < n; ++i) table_[absl::StrCat("obj/", 100000 + i)] = i + 1;
  }
  void Fail(absl::Status s) {
    MutexLock lock(&mu_);
    error_ = std::move(s);
  }
  std::vector<proto::CloneRequest> clones() {
    MutexLock lock(&mu_);
    return clones_;
  }
  std::vector<proto::CommitGroupRequest> commits() {
    MutexLock lock(&mu_);
    return commits_;
  }
  std::vector<proto::RemoveGroupRequest> removes() {
    MutexLock lock(&mu_);
    return removes_;
  }
  std::vector<proto::QueryObjectsRequest> queries() {
    MutexLock lock(&mu_);
    return queries_;
  }

 private:
  std::map<std::string, uint64_t> table_;  // written before any call
  Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::CloneRequest> clones_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::CommitGroupRequest> commits_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::RemoveGroupRequest> removes_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::QueryObjectsRequest> queries_ ABSL_GUARDED_BY(mu_);
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::InProcessChannel> inproc_;
  std::unique_ptr<Channel> channel_;
  std::unique_ptr<TestClient> client_;
};

TEST(ClientObjects, CloneSendsPairsTenantAndTtl) {
  ScriptedMaster m;
  const std::vector<std::string_view> src = {"a", "b"}, dst = {"a2", "b2"};
  auto r = m.client().Clone(src, dst, {.tenant = "", .ttl_ms = 500});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cloned, 2u);
  EXPECT_EQ(r->shared_bytes, 4096u);
  ASSERT_EQ(m.clones().size(), 1u);
  const proto::CloneRequest req = m.clones()[0];
  EXPECT_EQ(req.tenant(), "t1");
  EXPECT_EQ(req.ttl_ms(), 500u);
  ASSERT_EQ(req.source_keys_size(), 2);
  EXPECT_EQ(req.source_keys(1), "b");
  EXPECT_EQ(req.destination_keys(1), "b2");
  EXPECT_TRUE(req.source_prefix().empty());
}

TEST(ClientObjects, ClonePrefixSendsPrefixesOnly) {
  ScriptedMaster m;
  auto r = m.client().ClonePrefix("model-a/", "model-b/", {.tenant = "t2"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cloned, 3u);
  const proto::CloneRequest req = m.clones().at(0);
  EXPECT_EQ(req.tenant(), "t2");
  EXPECT_EQ(req.source_prefix(), "model-a/");
  EXPECT_EQ(req.destination_prefix(), "model-b/");
  EXPECT_EQ(req.source_keys_size(), 0);
}

TEST(ClientObjects, BadClonesAreRefusedBeforeAnyRpc) {
  ScriptedMaster m;
  const uint64_t before = m.calls();
  const std::vector<std::string_view> one = {"a"}, two = {"a", "b"}, empty_key = {""};
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().Clone(one, two).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      m.client()
          .Clone(std::span<const std::string_view>(), std::span<const std::string_view>())
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().Clone(one, empty_key).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().ClonePrefix("", "b/").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().ClonePrefix("a/", "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().ClonePrefix("a/", "a/").status()));
  EXPECT_EQ(m.calls(), before);
  EXPECT_TRUE(m.clones().empty());
}

TEST(ClientObjects, CloneErrorsKeepTheMastersCode) {
  ScriptedMaster m;
  m.Fail(absl::AlreadyExistsError("destination 'x' exists"));
  auto r = m.client().Clone("s", "x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(r.status().message().find("Clone"), std::string_view::npos) << r.status();
  m.Fail(absl::FailedPreconditionError("only on SSD"));
  EXPECT_TRUE(absl::IsFailedPrecondition(m.client().ClonePrefix("p/", "q/").status()));
}

TEST(ClientObjects, CommitAndRemoveGroup) {
  ScriptedMaster m;
  auto c = m.client().CommitGroup("g1");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->objects, 2u);
  EXPECT_EQ(c->bytes, 200u);
  EXPECT_EQ(m.commits().at(0).group_id(), "g1");
  EXPECT_EQ(m.commits().at(0).tenant(), "t1");
  auto r = m.client().RemoveGroup("g1", {.tenant = "t3", .force = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 5u);
  EXPECT_EQ(m.removes().at(0).tenant(), "t3");
  EXPECT_TRUE(m.removes().at(0).force());
  m.Fail(absl::NotFoundError("no group"));
  EXPECT_TRUE(absl::IsNotFound(m.client().CommitGroup("g2").status()));
  EXPECT_TRUE(absl::IsNotFound(m.client().RemoveGroup("g2").status()));
}

TEST(ClientObjects, GroupIdsAreCheckedHere) {
  ScriptedMaster m;
  const uint64_t before = m.calls();
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().CommitGroup("").status()));
  const std::string too_long(rpc::kMaxGroupIdBytes + 1, 'g');
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().CommitGroup(too_long).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().RemoveGroup(too_long).status()));
  client::PutOptions o;
  o.group_id = too_long;
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().Put("k", "v", o)));
  o.group_id = "g";
  o.replace = true;
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().Put("k", "v", o)));
  EXPECT_EQ(m.calls(), before);
}

TEST(ClientObjects, QueryObjectsFollowsPagesToTheEnd) {
  ScriptedMaster m;
  const size_t n = rpc::kMaxQueryObjects + 7;
  m.Fill(n);
  client::ObjectQuery q;
  q.model = "llama";
  q.layers = std::make_pair(4u, 8u);
  q.tp_rank = 1;
  auto r = m.client().QueryObjects(q);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->objects.size(), n);
  EXPECT_FALSE(r->more);
  EXPECT_EQ(r->objects.front().key, "obj/100000");
  EXPECT_EQ(r->objects.back().info.size_bytes(), n);
  const std::vector<proto::QueryObjectsRequest> qs = m.queries();
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_EQ(qs[0].limit(), rpc::kMaxQueryObjects);
  EXPECT_EQ(qs[0].model(), "llama");
  EXPECT_TRUE(qs[0].has_layer_range());
  EXPECT_EQ(qs[0].layer_begin(), 4u);
  EXPECT_EQ(qs[0].layer_end(), 8u);
  EXPECT_EQ(qs[0].tp_rank(), 1);
  EXPECT_EQ(qs[0].tenant(), "t1");
  EXPECT_EQ(qs[1].start_after(), r->objects[rpc::kMaxQueryObjects - 1].key);
}

TEST(ClientObjects, QueryObjectsStopsAtObjectsMax) {
  ScriptedMaster m;
  m.Fill(50);
  client::ObjectQuery q;
  q.objects_max = 20;
  auto r = m.client().QueryObjects(q);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->objects.size(), 20u);
  EXPECT_TRUE(r->more);
  EXPECT_FALSE(m.queries().at(0).has_layer_range());
  EXPECT_EQ(m.queries().at(0).tp_rank(), -1);
  q.start_after = r->objects.back().key;  // the next page, as documented
  q.objects_max = 100;
  auto rest = m.client().QueryObjects(q);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->objects.size(), 30u);
  EXPECT_FALSE(rest->more);
  EXPECT_EQ(rest->objects.front().key, "obj/100020");
}

TEST(ClientObjects, BadQueriesAreRefusedBeforeAnyRpc) {
  ScriptedMaster m;
  client::ObjectQuery q;
  q.objects_max = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().QueryObjects(q).status()));
  q = {};
  q.tp_rank = -2;
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().QueryObjects(q).status()));
  q = {};
  q.layers = std::make_pair(9u, 3u);
  EXPECT_TRUE(absl::IsInvalidArgument(m.client().QueryObjects(q).status()));
  EXPECT_TRUE(m.queries().empty());
}

}  // namespace
}  // namespace mooncake
