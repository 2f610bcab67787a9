#include "mooncake/store/rpc/master_methods.h"

#include <set>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::rpc {
namespace {

namespace proto = store::proto;

TEST(MasterMethodsTest, IdsMatchTheProtoEnum) {
  EXPECT_EQ(GetReplicasMethod::kId, proto::GET_REPLICAS);
  EXPECT_EQ(PrefixQueryMethod::kId, proto::PREFIX_QUERY);
  EXPECT_EQ(MountSegmentMethod::kId, 1);
  EXPECT_EQ(DescribeSegmentsMethod::kId, 13);
  EXPECT_EQ(TierSyncMethod::kId, 14);
  EXPECT_EQ(TierReportMethod::kId, 15);
  EXPECT_EQ(RemoveAllMethod::kId, 16);
  EXPECT_EQ(CopySyncMethod::kId, 17);
  EXPECT_EQ(DrainWorkerMethod::kId, 18);
  EXPECT_EQ(DrainStatusMethod::kId, 19);
  EXPECT_EQ(CreateCopyTaskMethod::kId, 20);
  EXPECT_EQ(CreateMoveTaskMethod::kId, 21);
  EXPECT_EQ(QueryTaskMethod::kId, 22);
  EXPECT_EQ(CloneMethod::kId, 23);
  EXPECT_EQ(CommitGroupMethod::kId, 24);
  EXPECT_EQ(RemoveGroupMethod::kId, 25);
  EXPECT_EQ(QueryObjectsMethod::kId, 26);
  EXPECT_EQ(BatchGetReplicasMethod::kId, 27);
  EXPECT_EQ(BatchPutStartMethod::kId, 28);
  EXPECT_EQ(BatchPutEndMethod::kId, 29);
  EXPECT_EQ(TouchObjectsMethod::kId, 30);
  // Every enum value but UNSPECIFIED has a method type (30 methods).
  EXPECT_EQ(proto::MasterMethodId_MAX, 30);
}

TEST(MasterMethodsTest, FullyPopulatedMessagesSurviveTheWire) {
  proto::PutStartRequest put;
  put.set_key("k");
  put.set_size_bytes(1 << 20);
  put.set_checksum(0xDEADBEEFCAFEULL);
  put.mutable_options()->set_replica_count(2);
  put.mutable_options()->set_pin(proto::PIN_SOFT);
  put.mutable_options()->set_tenant("team-a");
  put.mutable_options()->set_ttl_ms(60000);
  proto::TensorMeta* t = put.mutable_tensor();
  t->set_model("llama-3-8b");
  t->set_layer_begin(0);
  t->set_layer_end(32);
  t->set_tp_rank(1);
  t->set_tp_size(4);
  t->set_dtype(proto::DTYPE_BF16);
  t->add_shape(2);
  t->add_shape(512);
  t->add_shape(8);
  t->add_shape(128);
  t->set_block_tokens(512);
  proto::PutStartRequest back;
  ASSERT_TRUE(back.ParseFromString(put.SerializeAsString()));
  EXPECT_EQ(back.SerializeAsString(), put.SerializeAsString());
  EXPECT_EQ(back.tensor().shape_size(), 4);
  EXPECT_EQ(back.options().tenant(), "team-a");
}

// A toy master that answers PrefixQuery from a set of present blocks: shows
// the API end to end (the real master comes with issue #8's master pieces).
TEST(MasterMethodsTest, PrefixQueryThroughAChannel) {
  absl::flat_hash_set<std::string> present;
  std::vector<Hash128> chain;
  for (uint64_t i = 1; i <= 10; ++i) chain.push_back({i, i * 31});
  for (int i = 0; i < 6; ++i) present.insert(BlockObjectKey(chain[i]));
  present.insert(BlockObjectKey(chain[8]));  // after the first miss: not counted

  ServiceRegistry registry;
  ASSERT_TRUE(registry
                  .Register<PrefixQueryMethod>(
                      [&](const proto::PrefixQueryRequest& req)
                          -> absl::StatusOr<proto::PrefixQueryResponse> {
                        if (static_cast<size_t>(req.chain_size()) > kMaxChainBlocks) {
                          return absl::InvalidArgumentError("chain too long");
                        }
                        proto::PrefixQueryResponse resp;
                        uint32_t matched = 0;
                        for (const auto& k : req.chain()) {
                          if (!present.contains(BlockObjectKey(FromProto(k)))) break;
                          ++matched;
                          if (req.with_replicas()) {
                            proto::Replica* r = resp.add_blocks()->add_replicas();
                            r->set_segment_id(1);
                            r->set_offset(matched * 4096);
                            r->set_length(4096);
                            r->set_state(proto::REPLICA_COMPLETE);
                          }
                        }
                        resp.set_matched(matched);
                        if (req.with_replicas()) resp.mutable_lease()->set_lease_id(99);
                        return resp;
                      },
                      {.mode = ExecutionMode::kInline})
                  .ok());
  InProcessChannel channel(&registry);
  proto::PrefixQueryRequest req;
  for (const Hash128& h : chain) ToProto(h, req.add_chain());
  req.set_with_replicas(true);
  auto resp = Call<PrefixQueryMethod>(channel, req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->matched(), 6u);
  EXPECT_EQ(resp->blocks_size(), 6);
  EXPECT_EQ(resp->blocks(5).replicas(0).offset(), 6u * 4096);
  EXPECT_EQ(resp->lease().lease_id(), 99u);
}

}  // namespace
}  // namespace mooncake::rpc
