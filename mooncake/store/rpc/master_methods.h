// The master's RPC methods (master.proto) as RpcMethod types, and the limits
// and key conventions every master implementation and caller shares.
//
//   rpc::Call<GetReplicasMethod>(channel, request);      // caller
//   registry.Register<GetReplicasMethod>(handler);        // master
//
// Method ids are MasterMethodId values from master.proto and never change.
#ifndef MOONCAKE_STORE_RPC_MASTER_METHODS_H_
#define MOONCAKE_STORE_RPC_MASTER_METHODS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/hash.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::rpc {

// Object keys are 1..kMaxKeyBytes bytes; user keys must not start with 0x00
// (reserved for block keys).
inline constexpr size_t kMaxKeyBytes = 4096;
// BatchExists keys and PrefixQuery chain blocks per call.
inline constexpr size_t kMaxBatchKeys = 16384;
inline constexpr size_t kMaxChainBlocks = 16384;
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

#undef MOONCAKE_MASTER_METHOD_

// The object key of a block: 0x00, 'b', then low and high little-endian (18
// bytes). Stable: it is what PrefixQuery looks up.
inline std::string BlockObjectKey(const Hash128& block) {
  std::string key(18, '\0');
  key[1] = 'b';
  for (int i = 0; i < 8; ++i) {
    key[2 + i] = static_cast<char>(block.low >> (8 * i));
    key[10 + i] = static_cast<char>(block.high >> (8 * i));
  }
  return key;
}

inline Hash128 FromProto(const store::proto::BlockKey& k) { return {k.low(), k.high()}; }
inline void ToProto(const Hash128& h, store::proto::BlockKey* k) {
  k->set_low(h.low);
  k->set_high(h.high);
}

// Checks a key a client chose (not a block key). INVALID_ARGUMENT with the
// reason otherwise.
inline absl::Status ValidateUserKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty object key");
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("object key of ", key.size(), " bytes exceeds the limit of ", kMaxKeyBytes));
  }
  if (key[0] == '\0') {
    return absl::InvalidArgumentError(
        "object keys starting with byte 0x00 are reserved for block keys (BlockObjectKey)");
  }
  return absl::OkStatus();
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_MASTER_METHODS_H_
