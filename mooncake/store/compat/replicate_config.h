// ReplicateConfig: Mooncake's per-put options (replicas, pins, preferred
// segments), and their translation to this store's client::PutOptions.
//
//   replica_num                 copies on distinct segments, 1..kMaxReplicas
//   soft_pin_action             kPreserve (default): a new object is not
//                               pinned; an upsert keeps the replaced object's
//                               pin. kEnable: soft-pinned (evicted only after
//                               every unpinned object), for soft_pin_ttl_ms
//                               when given, else for its life. kDisable: not
//                               pinned (an upsert drops the old pin).
//   soft_pin_ttl_ms             only with kEnable; else INVALID_ARGUMENT
//   with_hard_pin               never evicted (removed only explicitly)
//   preferred_segment(s)        segment names (a client's get_hostname()):
//                               the first replica goes to the first named
//                               segment that fits, then normal placement
//   prefer_alloc_in_same_node   placement already prefers the writer's host
//                               (every put names it); accepted for
//                               compatibility
//   group_ids                   object groups the keys join (invisible until
//                               commit_group; evicted, expired and removed
//                               as one): none; one id, which every key of
//                               the call joins; or, in a batch put, one id
//                               per key (key i joins group_ids[i]; "" = no
//                               group). Any other count: INVALID_ARGUMENT.
//                               Not with upsert.
//
// Thread-safety: plain values and pure functions.
#ifndef MOONCAKE_STORE_COMPAT_REPLICATE_CONFIG_H_
#define MOONCAKE_STORE_COMPAT_REPLICATE_CONFIG_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/store/client/client_options.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::compat {

enum class SoftPinAction { kPreserve = 0, kEnable = 1, kDisable = 2 };

inline constexpr uint32_t kMaxReplicas = 16;

struct ReplicateConfig {
  uint32_t replica_num = 1;
  SoftPinAction soft_pin_action = SoftPinAction::kPreserve;
  std::optional<uint64_t> soft_pin_ttl_ms;
  bool with_hard_pin = false;
  std::string preferred_segment;
  std::vector<std::string> preferred_segments;
  bool prefer_alloc_in_same_node = false;
  std::vector<std::string> group_ids;
};

inline std::string_view SoftPinActionName(SoftPinAction a) {
  switch (a) {
    case SoftPinAction::kPreserve:
      return "PRESERVE";
    case SoftPinAction::kEnable:
      return "ENABLE";
    case SoftPinAction::kDisable:
      return "DISABLE";
  }
  return "?";
}

// What str(ReplicateConfig) shows in Python.
inline std::string DescribeReplicateConfig(const ReplicateConfig& c) {
  return absl::StrCat(
      "ReplicateConfig(replica_num=", c.replica_num, ", soft_pin_action=SoftPinAction.",
      AbslView(SoftPinActionName(c.soft_pin_action)), ", soft_pin_ttl_ms=",
      c.soft_pin_ttl_ms.has_value() ? absl::StrCat(*c.soft_pin_ttl_ms) : std::string("None"),
      ", with_hard_pin=", c.with_hard_pin ? "True" : "False", ", preferred_segment='",
      c.preferred_segment, "', preferred_segments=[", absl::StrJoin(c.preferred_segments, ", "),
      "], prefer_alloc_in_same_node=", c.prefer_alloc_in_same_node ? "True" : "False",
      ", group_ids=[", absl::StrJoin(c.group_ids, ", "), "])");
}

// INVALID_ARGUMENT: replica_num outside 1..kMaxReplicas, a TTL without kEnable.
inline absl::StatusOr<client::PutOptions> ToPutOptions(const ReplicateConfig& c, bool upsert) {
  if (c.replica_num == 0 || c.replica_num > kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_num ", c.replica_num, " is outside 1..", kMaxReplicas));
  }
  if (c.soft_pin_ttl_ms.has_value() && c.soft_pin_action != SoftPinAction::kEnable) {
    return absl::InvalidArgumentError(
        "soft_pin_ttl_ms is given but soft_pin_action is not SoftPinAction.ENABLE");
  }
  client::PutOptions o;
  o.replica_count = c.replica_num;
  o.replace = upsert;
  if (c.with_hard_pin) {
    o.pin = store::proto::PIN_HARD;
  } else if (c.soft_pin_action == SoftPinAction::kEnable) {
    o.pin = store::proto::PIN_SOFT;
    // A given TTL of 0 lapses at once (0 on the wire means "for its life").
    if (c.soft_pin_ttl_ms.has_value()) o.pin_ttl_ms = std::max<uint64_t>(*c.soft_pin_ttl_ms, 1);
  } else if (c.soft_pin_action == SoftPinAction::kPreserve) {
    o.keep_pin = upsert;
  }
  if (!c.preferred_segment.empty()) o.preferred_segment_names.push_back(c.preferred_segment);
  for (const std::string& s : c.preferred_segments) {
    if (!s.empty()) o.preferred_segment_names.push_back(s);
  }
  return o;
}

// The group each of `keys` keys joins ("" = none), per ReplicateConfig's
// group_ids rule above. INVALID_ARGUMENT: a count other than 0, 1 or `keys`;
// an id over rpc::kMaxGroupIdBytes; ids with upsert.
inline absl::StatusOr<std::vector<std::string>> GroupIdsFor(const ReplicateConfig& c, size_t keys,
                                                            bool upsert) {
  if (c.group_ids.empty()) return std::vector<std::string>(keys);
  if (upsert) return absl::InvalidArgumentError("group_ids cannot be given to an upsert");
  for (const std::string& g : c.group_ids) {
    if (g.size() > rpc::kMaxGroupIdBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("a group id of ", g.size(), " bytes; at most ", rpc::kMaxGroupIdBytes));
    }
  }
  if (c.group_ids.size() == 1) return std::vector<std::string>(keys, c.group_ids.front());
  if (c.group_ids.size() == keys) return c.group_ids;
  return absl::InvalidArgumentError(absl::StrCat("group_ids has ", c.group_ids.size(), " ids for ",
                                                 keys, " keys: give one id, or one per key"));
}

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_REPLICATE_CONFIG_H_
