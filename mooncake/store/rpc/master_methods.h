// The master's RPC methods (master.proto) as RpcMethod types, and the limits
// every master implementation and caller shares. The keys requests name
// follow object_key.h, included here for every speaker of these methods.
//
//   rpc::Call<GetReplicasMethod>(channel, request);      // caller
//   registry.Register<GetReplicasMethod>(handler);        // master
//
// Method ids are MasterMethodId values from master.proto and never change.
#ifndef MOONCAKE_STORE_RPC_MASTER_METHODS_H_
#define MOONCAKE_STORE_RPC_MASTER_METHODS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mooncake/base/hash.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::rpc {

// BatchExists keys and PrefixQuery chain blocks per call.
inline constexpr size_t kMaxBatchKeys = 16384;
inline constexpr size_t kMaxChainBlocks = 16384;
// Items of one BatchGetReplicas, BatchPutStart or BatchPutEnd call, and keys
// of one TouchObjects call.
inline constexpr size_t kMaxBatchItems = 1024;
// DescribeSegments ids per call.
inline constexpr size_t kMaxDescribeSegments = 4096;
// TierSync tasks per answer and results per report.
inline constexpr size_t kMaxTierTasks = 4096;
// RemoveAll: objects one call looks at before it answers `more` (it finishes
// the shard it is in).
inline constexpr size_t kRemoveAllObjectsPerCall = 65536;
// PutOptions.preferred_segment_names per put.
inline constexpr size_t kMaxPreferredSegmentNames = 64;
// PutOptions.excluded_segment_ids per put.
inline constexpr size_t kMaxExcludedSegments = 64;
// CopySync tasks per answer and results per report.
inline constexpr size_t kMaxCopyTasks = 1024;
// GetReplicasRequest.cached_reads the master counts from one request.
inline constexpr uint32_t kMaxCachedReads = 1u << 20;
// CreateCopyTask target segment names per call.
inline constexpr size_t kMaxCopyTargets = 16;
// PutOptions.group_id bytes.
inline constexpr size_t kMaxGroupIdBytes = 256;
// QueryObjects answers per call.
inline constexpr size_t kMaxQueryObjects = 10000;

#define MOONCAKE_MASTER_METHOD_(Type, Id, Name)                              \
  struct Type##Method {                                                      \
    static constexpr uint16_t kId = static_cast<uint16_t>(store::proto::Id); \
    static constexpr std::string_view kName = Name;                          \
    using Request = store::proto::Type##Request;                             \
    using Response = store::proto::Type##Response;                           \
  };                                                                         \
  static_assert(RpcMethod<Type##Method>)

MOONCAKE_MASTER_METHOD_(MountSegment, MOUNT_SEGMENT, "MountSegment");
MOONCAKE_MASTER_METHOD_(UnmountSegment, UNMOUNT_SEGMENT, "UnmountSegment");
MOONCAKE_MASTER_METHOD_(Heartbeat, HEARTBEAT, "Heartbeat");
MOONCAKE_MASTER_METHOD_(PutStart, PUT_START, "PutStart");
MOONCAKE_MASTER_METHOD_(PutEnd, PUT_END, "PutEnd");
MOONCAKE_MASTER_METHOD_(PutRevoke, PUT_REVOKE, "PutRevoke");
MOONCAKE_MASTER_METHOD_(GetReplicas, GET_REPLICAS, "GetReplicas");
MOONCAKE_MASTER_METHOD_(ReleaseLeases, RELEASE_LEASES, "ReleaseLeases");
MOONCAKE_MASTER_METHOD_(Remove, REMOVE, "Remove");
MOONCAKE_MASTER_METHOD_(Exists, EXISTS, "Exists");
MOONCAKE_MASTER_METHOD_(BatchExists, BATCH_EXISTS, "BatchExists");
MOONCAKE_MASTER_METHOD_(PrefixQuery, PREFIX_QUERY, "PrefixQuery");
MOONCAKE_MASTER_METHOD_(DescribeSegments, DESCRIBE_SEGMENTS, "DescribeSegments");
MOONCAKE_MASTER_METHOD_(TierSync, TIER_SYNC, "TierSync");
MOONCAKE_MASTER_METHOD_(TierReport, TIER_REPORT, "TierReport");
MOONCAKE_MASTER_METHOD_(RemoveAll, REMOVE_ALL, "RemoveAll");
MOONCAKE_MASTER_METHOD_(CopySync, COPY_SYNC, "CopySync");
MOONCAKE_MASTER_METHOD_(DrainWorker, DRAIN_WORKER, "DrainWorker");
MOONCAKE_MASTER_METHOD_(DrainStatus, DRAIN_STATUS, "DrainStatus");
MOONCAKE_MASTER_METHOD_(CreateCopyTask, CREATE_COPY_TASK, "CreateCopyTask");
MOONCAKE_MASTER_METHOD_(CreateMoveTask, CREATE_MOVE_TASK, "CreateMoveTask");
MOONCAKE_MASTER_METHOD_(QueryTask, QUERY_TASK, "QueryTask");
MOONCAKE_MASTER_METHOD_(Clone, CLONE, "Clone");
MOONCAKE_MASTER_METHOD_(CommitGroup, COMMIT_GROUP, "CommitGroup");
MOONCAKE_MASTER_METHOD_(RemoveGroup, REMOVE_GROUP, "RemoveGroup");
MOONCAKE_MASTER_METHOD_(QueryObjects, QUERY_OBJECTS, "QueryObjects");
MOONCAKE_MASTER_METHOD_(BatchGetReplicas, BATCH_GET_REPLICAS, "BatchGetReplicas");
MOONCAKE_MASTER_METHOD_(BatchPutStart, BATCH_PUT_START, "BatchPutStart");
MOONCAKE_MASTER_METHOD_(BatchPutEnd, BATCH_PUT_END, "BatchPutEnd");
MOONCAKE_MASTER_METHOD_(TouchObjects, TOUCH_OBJECTS, "TouchObjects");

#undef MOONCAKE_MASTER_METHOD_

inline Hash128 FromProto(const store::proto::BlockKey& k) { return {k.low(), k.high()}; }
inline void ToProto(const Hash128& h, store::proto::BlockKey* k) {
  k->set_low(h.low);
  k->set_high(h.high);
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_MASTER_METHODS_H_
