// Master: the batched RPCs (BatchGetReplicas, BatchPutStart, BatchPutEnd)
// answer every item as its single-item RPC would, in order, each with its own
// status, under the batch's tenant; TouchObjects counts a client's cached
// reads of the tenant's objects.
#include <initializer_list>
#include <string>

#include "gtest/gtest.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

namespace {

using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::PutReq;

using MasterBatchTest = MasterFixture;

absl::StatusCode Code(const proto::ItemStatus& s) {
  return static_cast<absl::StatusCode>(s.code());
}

TEST_F(MasterBatchTest, PutStartAndPutEndCommitEveryItemAndAnswerFailuresInPlace) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("taken", 100)), 0u);
  proto::BatchPutStartRequest start;
  for (const char* key : {"a", "taken", "b", "a"}) *start.add_items() = PutReq(key, 1000);
  auto started = master_->BatchPutStart(start);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_EQ(started->items_size(), 4);
  ASSERT_EQ(started->status_size(), 4);
  EXPECT_EQ(Code(started->status(0)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(started->status(1)), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(started->status(1).message().empty());
  EXPECT_EQ(Code(started->status(2)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(started->status(3)), absl::StatusCode::kAlreadyExists) << "a put of a is pending";
  EXPECT_FALSE(Exists("a")) << "pending until PutEnd";

  proto::BatchPutEndRequest end;
  *end.add_items() = EndReq("a", started->items(0).put_id());
  *end.add_items() = EndReq("b", started->items(2).put_id());
  *end.add_items() = EndReq("b", started->items(2).put_id() + 1000);  // a wrong put id
  auto ended = master_->BatchPutEnd(end);
  ASSERT_TRUE(ended.ok()) << ended.status();
  ASSERT_EQ(ended->status_size(), 3);
  EXPECT_EQ(Code(ended->status(0)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(ended->status(1)), absl::StatusCode::kOk);
  EXPECT_NE(Code(ended->status(2)), absl::StatusCode::kOk);
  EXPECT_GT(ended->items(0).object().version(), 0u);
  EXPECT_TRUE(Exists("a"));
  EXPECT_TRUE(Exists("b"));
  EXPECT_EQ(master_->Stats().pending_puts, 0);
}

TEST_F(MasterBatchTest, GetReplicasAnswersEachKeyInOrderWithALeaseEach) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("x", 100)), 0u);
  ASSERT_NE(Put(PutReq("y", 200)), 0u);
  proto::BatchGetReplicasRequest get;
  for (const char* key : {"y", "missing", "x"}) *get.add_items() = GetReq(key);
  auto got = master_->BatchGetReplicas(get);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->status_size(), 3);
  EXPECT_EQ(Code(got->status(0)), absl::StatusCode::kOk);
  EXPECT_EQ(got->items(0).object().size_bytes(), 200u);
  EXPECT_EQ(Code(got->status(1)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(got->status(2)), absl::StatusCode::kOk);
  EXPECT_EQ(got->items(2).object().size_bytes(), 100u);
  EXPECT_EQ(got->items(0).replicas_size(), 1);
  EXPECT_NE(got->items(0).lease().lease_id(), got->items(2).lease().lease_id());
  // Each lease holds its object: a remove refusing leased objects is refused.
  EXPECT_TRUE(absl::IsAborted(Remove("x", false, /*refuse_if_leased=*/true)));
  Release(got->items(0).lease().lease_id());
  Release(got->items(2).lease().lease_id());
  EXPECT_TRUE(Remove("x", false, true).ok());
}

TEST_F(MasterBatchTest, TheBatchsTenantAppliesToEveryItem) {
  Mount("w1");
  proto::PutStartRequest theirs = PutReq("k", 100);
  theirs.mutable_options()->set_tenant("other");
  ASSERT_NE(Put(theirs), 0u);
  proto::BatchGetReplicasRequest get;
  get.set_tenant("other");
  *get.add_items() = GetReq("k");  // names no tenant: the batch's
  proto::GetReplicasRequest& named = *get.add_items();
  named = GetReq("k");
  named.set_tenant("other");  // the same tenant
  proto::GetReplicasRequest& elsewhere = *get.add_items();
  elsewhere = GetReq("k");
  elsewhere.set_tenant("third");  // another
  auto got = master_->BatchGetReplicas(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Code(got->status(0)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(got->status(1)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(got->status(2)), absl::StatusCode::kPermissionDenied);
  // The default tenant's batch does not see tenant other's key.
  get.clear_tenant();
  get.mutable_items(1)->clear_tenant();
  got = master_->BatchGetReplicas(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Code(got->status(0)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(got->status(1)), absl::StatusCode::kNotFound);
}

TEST_F(MasterBatchTest, EmptyAndOversizedBatches) {
  Mount("w1");
  auto empty = master_->BatchGetReplicas(proto::BatchGetReplicasRequest{});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->items_size(), 0);
  proto::BatchPutStartRequest big;
  for (size_t i = 0; i <= rpc::kMaxBatchItems; ++i) {
    *big.add_items() = PutReq("k" + std::to_string(i), 10);
  }
  auto refused = master_->BatchPutStart(big);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_EQ(master_->Stats().pending_puts, 0) << "refused whole: nothing started";
}

proto::TouchObjectsRequest TouchReq(std::initializer_list<const char*> keys,
                                    const std::string& tenant = "") {
  proto::TouchObjectsRequest r;
  r.set_tenant(tenant);
  for (const char* k : keys) {
    r.add_keys(k);
    r.add_reads(1);
  }
  return r;
}

TEST_F(MasterBatchTest, TouchObjectsCountsCachedReadsInTheEvictionOrder) {
  Mount("w1");  // room for four objects of 60 KiB
  for (const char* key : {"a", "b", "c", "d"}) {
    ASSERT_NE(Put(PutReq(key, 60 << 10)), 0u) << key;
    clock_.AdvanceMs(1);
  }
  // A client read "a" from its cache: without the report, "a" would go first.
  auto touched = master_->TouchObjects(TouchReq({"a", "missing"}));
  ASSERT_TRUE(touched.ok()) << touched.status();
  EXPECT_EQ(touched->touched(), 1u) << "keys not found are skipped";
  clock_.AdvanceMs(1);
  ASSERT_NE(Put(PutReq("e", 60 << 10)), 0u);
  EXPECT_TRUE(Exists("a")) << "touched: the most recently used";
  EXPECT_FALSE(Exists("b")) << "the least recently used went";
}

TEST_F(MasterBatchTest, TouchObjectsTouchesOnlyTheTenantsOwnObjectsWithinTheLimits) {
  Mount("w1");
  ASSERT_NE(Put(PutReq("x", 100)), 0u);
  auto other = master_->TouchObjects(TouchReq({"x"}, "other"));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->touched(), 0u) << "another tenant's object is not found";
  EXPECT_FALSE(master_->TouchObjects(TouchReq({"x"}, "nobody")).ok()) << "unknown tenant";
  proto::TouchObjectsRequest uneven = TouchReq({"x"});
  uneven.add_reads(1);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TouchObjects(uneven).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TouchObjects(TouchReq({""})).status()));
  proto::TouchObjectsRequest many;
  for (size_t i = 0; i <= rpc::kMaxBatchItems; ++i) {
    many.add_keys("x");
    many.add_reads(1);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(master_->TouchObjects(many).status()));
  many.mutable_keys()->RemoveLast();
  many.mutable_reads()->RemoveLast();
  auto full = master_->TouchObjects(many);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->touched(), rpc::kMaxBatchItems);
}

}  // namespace
}  // namespace mooncake::master
