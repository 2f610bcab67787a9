// Clones, object groups and tensor queries (docs/agents.md).
//
// Clone: a new key whose replicas are the source's ranges, each shared
// (SegmentPool::Share: one more reference). Nothing is copied and nothing is
// allocated; a range goes back to its allocator when the last key referring
// to it is retired, however it goes (remove, eviction, TTL, a drain's move).
// The tenant is charged for a clone as for a put (quotas count what a tenant
// may hold; the pool counts a shared range once).
//
// Groups: see object_group.h. A put joins with PutOptions.group_id
// (put_path.h, JoinGroup); CommitGroup makes the members visible in one
// step; any member leaving retires the others (MasterState::LeaveGroupLocked
// and ReapDeadGroups); an open group not committed within twice the put
// timeout of its last join ends at a Tick (ExpireGroups).
//
// QueryObjects walks the whole table (an administrative query).
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_GROUP_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_GROUP_PATH_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

// ---- Clone -------------------------------------------------------------------

// Makes `dst` share `src`'s complete replicas. Returns the bytes it refers to.
template <typename A, typename P>
absl::StatusOr<uint64_t> CloneOne(MasterState<A, P>& s, const std::string& src,
                                  const std::string& dst, std::string_view tenant, uint64_t ttl_ms,
                                  int64_t now) {
  ObjectMeta copy;
  absl::Status st = s.table.With(src, [&](ObjectTable::Shard& sh) -> absl::Status {
    const ObjectMeta* m = sh.Find(src);
    if (m == nullptr || !m->Visible(now) || m->tenant != tenant) {
      return absl::NotFoundError(absl::StrCat("clone source '", absl::CEscape(src),
                                              "' not found (or not visible to this tenant)"));
    }
    for (const Replica& r : m->replicas) {
      if (r.state != master::ReplicaState::kComplete) continue;
      // Under the source's shard lock: the range cannot be freed meanwhile.
      if (!s.pool.Share(r.segment_id, r.allocation)) continue;  // its segment just left
      Replica& c = copy.replicas.emplace_back(r);
      c.hot_extra = false;
    }
    if (copy.replicas.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("clone source '", absl::CEscape(src),
                       "' has no replica in DRAM (it is on a worker's SSD tier): read it "
                       "first, then clone"));
    }
    copy.state = master::ObjectState::kCommitted;
    copy.size_bytes = m->size_bytes;
    copy.checksum = m->checksum;
    copy.checksum_format = m->checksum_format;
    copy.tenant = m->tenant;
    if (m->tensor() != nullptr) copy.extras.mut().tensor = m->extras.get().tensor;
    copy.replica_target = m->replica_target;
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  const uint64_t charge = copy.ChargeBytes();
  if (absl::Status a = s.AdmitCharge(tenant, PinLevel::kNone, charge); !a.ok()) {
    s.FreeReplicas(copy.replicas);
    return a;
  }
  copy.version = s.ids.Next();
  copy.put_id = copy.version;
  if (ttl_ms != 0) copy.extras.mut().expire_at_ns = now + static_cast<int64_t>(ttl_ms) * kNsPerMs;
  const uint64_t version = copy.version;
  const int64_t expire_at = copy.expire_at_ns();
  const uint64_t size = copy.size_bytes;
  const bool inserted = s.table.With(dst, [&](ObjectTable::Shard& sh) {
    if (sh.objects.contains(dst)) return false;
    s.models.Add(copy, +1);
    sh.objects.emplace(dst, std::move(copy));
    return true;
  });
  if (!inserted) {
    s.FreeReplicas(copy.replicas);
    s.ReleaseCharge(tenant, PinLevel::kNone, charge);
    return absl::AlreadyExistsError(
        absl::StrCat("clone destination '", absl::CEscape(dst), "' exists (or is being put)"));
  }
  s.objects.fetch_add(1, std::memory_order_relaxed);
  s.object_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  s.evictor.Admit(dst, charge);
  if (expire_at != 0) s.ttl_deadlines.Push(expire_at, version, dst);
  return charge;
}

// Retires clones made by a Clone that failed later on.
template <typename A, typename P>
void UndoClones(MasterState<A, P>& s, const std::vector<std::string>& made) {
  const int64_t now = s.Now();
  for (const std::string& key : made) {
    std::optional<Retired> r;
    s.table.With(key, [&](ObjectTable::Shard& sh) {
      auto it = sh.objects.find(key);
      if (it != sh.objects.end()) r = s.RetireLocked(sh, it, now, 0);
    });
    if (r.has_value()) s.FinishRetired(*r, key, /*erase_from_evictor=*/true);
  }
}

// The (source, destination) pairs a CloneRequest names.
template <typename A, typename P>
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ClonePairs(
    MasterState<A, P>& s, const proto::CloneRequest& req, std::string_view tenant, int64_t now) {
  std::vector<std::pair<std::string, std::string>> pairs;
  const bool by_keys = req.source_keys_size() > 0 || req.destination_keys_size() > 0;
  if (by_keys) {
    if (!req.source_prefix().empty() || !req.destination_prefix().empty()) {
      return absl::InvalidArgumentError("Clone takes keys or prefixes, not both");
    }
    if (req.source_keys_size() != req.destination_keys_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(req.source_keys_size(), " source keys but ", req.destination_keys_size(),
                       " destination keys: give one destination per source"));
    }
    if (static_cast<size_t>(req.source_keys_size()) > rpc::kMaxBatchKeys) {
      return absl::InvalidArgumentError(absl::StrCat(
          req.source_keys_size(), " keys exceed the limit of ", rpc::kMaxBatchKeys, " per Clone"));
    }
    for (int i = 0; i < req.source_keys_size(); ++i) {
      pairs.emplace_back(req.source_keys(i), req.destination_keys(i));
    }
  } else {
    if (req.source_prefix().empty()) {
      return absl::InvalidArgumentError("Clone needs source keys or a non-empty source_prefix");
    }
    const std::string& prefix = req.source_prefix();
    bool too_many = false;
    s.table.ForEach([&](ObjectTable::Shard& sh) {
      for (const auto& [key, m] : sh.objects) {
        if (!key.starts_with(prefix) || !m.Visible(now) || m.tenant != tenant) continue;
        if (pairs.size() >= rpc::kMaxBatchKeys) {
          too_many = true;
          return;
        }
        std::string dst = req.destination_prefix();
        dst.append(key, prefix.size());
        pairs.emplace_back(key, std::move(dst));
      }
    });
    if (too_many) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", rpc::kMaxBatchKeys, " keys start with the source prefix"));
    }
    if (pairs.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no visible key starts with '", absl::CEscape(prefix), "'"));
    }
    std::sort(pairs.begin(), pairs.end());
  }
  absl::flat_hash_set<std::string_view> dsts;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [src, dst] = pairs[i];
    if (absl::Status st = rpc::ValidateObjectKey(src); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("source ", i, ": ", st.message()));
    }
    if (absl::Status st = rpc::ValidateObjectKey(dst); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("destination ", i, ": ", st.message()));
    }
    if (!dsts.insert(dst).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("destination '", absl::CEscape(dst), "' is named twice"));
    }
  }
  return pairs;
}

template <typename A, typename P>
absl::StatusOr<proto::CloneResponse> Clone(MasterState<A, P>& s, const proto::CloneRequest& req) {
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  if (s.log != nullptr) {
    return absl::FailedPreconditionError(
        "clones are not available with metadata HA (shared ranges are not in the oplog)");
  }
  const int64_t now = s.Now();
  ASSIGN_OR_RETURN(auto pairs, ClonePairs(s, req, tenant, now));
  std::vector<std::string> made;
  made.reserve(pairs.size());
  uint64_t bytes = 0;
  for (const auto& [src, dst] : pairs) {
    absl::StatusOr<uint64_t> one = CloneOne(s, src, dst, tenant, req.ttl_ms(), now);
    if (!one.ok()) {
      UndoClones(s, made);
      return one.status();
    }
    made.push_back(dst);
    bytes += *one;
  }
  s.metrics.clones->Increment(made.size());
  s.metrics.cloned_bytes->Increment(bytes);
  proto::CloneResponse resp;
  resp.set_cloned(made.size());
  resp.set_shared_bytes(bytes);
  return resp;
}

// ---- Groups ------------------------------------------------------------------

inline absl::Status ValidateGroupId(std::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("group_id is empty");
  if (id.size() > rpc::kMaxGroupIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group_id of ", id.size(), " bytes exceeds the limit of ", rpc::kMaxGroupIdBytes));
  }
  return absl::OkStatus();
}

inline absl::Status UnknownGroup(std::string_view id) {
  return absl::NotFoundError(absl::StrCat(
      "no object group '", absl::CEscape(AbslView(id)),
      "' (never put, removed, or ended: a member left or it was not committed in time)"));
}

// The live group `id` of the tenant a request names. NOT_FOUND: never put,
// removed, or ended.
template <typename A, typename P>
absl::StatusOr<std::shared_ptr<master::ObjectGroup>> FindGroup(MasterState<A, P>& s,
                                                               const std::string& id,
                                                               const std::string& tenant_asked) {
  RETURN_IF_ERROR(ValidateGroupId(id));
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(tenant_asked));
  std::shared_ptr<master::ObjectGroup> g = s.groups.Find(tenant, id);
  if (g == nullptr || g->Phase() == master::GroupPhase::kGone) return UnknownGroup(id);
  return g;
}

template <typename A, typename P>
absl::StatusOr<proto::CommitGroupResponse> CommitGroup(MasterState<A, P>& s,
                                                       const proto::CommitGroupRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<master::ObjectGroup> g,
                   FindGroup(s, req.group_id(), req.tenant()));
  std::vector<std::string> members;
  bool fresh = false;
  {
    MutexLock lock(&g->mu);
    switch (g->Phase()) {
      case master::GroupPhase::kGone:
        return UnknownGroup(req.group_id());
      case master::GroupPhase::kOpen:
        if (g->pending > 0) {
          return absl::FailedPreconditionError(
              absl::StrCat("object group '", absl::CEscape(req.group_id()), "' has ", g->pending,
                           " member(s) still being put: end those puts first"));
        }
        if (g->members.empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("object group '", absl::CEscape(req.group_id()), "' has no members"));
        }
        fresh = s.groups.AdvanceLocked(*g, master::GroupPhase::kVisible);
        break;
      case master::GroupPhase::kVisible:
        break;  // committed already: the same answer again
    }
    members.assign(g->members.begin(), g->members.end());
  }
  if (fresh) s.metrics.groups_committed->Increment();
  proto::CommitGroupResponse resp;
  uint64_t bytes = 0;
  for (const std::string& key : members) {
    s.table.With(key, [&](ObjectTable::Shard& sh) {
      if (const ObjectMeta* m = sh.Find(key); m != nullptr && m->group() == g) {
        bytes += m->size_bytes;
      }
    });
  }
  resp.set_objects(members.size());
  resp.set_bytes(bytes);
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::RemoveGroupResponse> RemoveGroup(MasterState<A, P>& s,
                                                       const proto::RemoveGroupRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<master::ObjectGroup> g,
                   FindGroup(s, req.group_id(), req.tenant()));
  if (g->pin != static_cast<uint8_t>(PinLevel::kNone) && !req.force()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object group '", absl::CEscape(req.group_id()), "' is pinned: remove it with force"));
  }
  uint64_t members = 0;
  {
    MutexLock lock(&g->mu);
    members = g->members.size();
  }
  s.groups.Kill(g);
  s.ReapDeadGroups();
  s.metrics.removes->Increment(members);
  proto::RemoveGroupResponse resp;
  resp.set_removed(members);
  return resp;
}

// Tick: ends the open groups past their deadline. Returns how many.
template <typename A, typename P>
uint64_t ExpireGroups(MasterState<A, P>& s, int64_t now) {
  uint64_t n = 0;
  for (const std::shared_ptr<master::ObjectGroup>& g : s.groups.OpenPast(now)) {
    n += s.groups.Kill(g) ? 1 : 0;
  }
  s.ReapDeadGroups();  // also any a retirement left (none: FinishRetired reaps)
  return n;
}

// ---- Tensor queries ----------------------------------------------------------

inline bool TensorMatches(const ObjectMeta& m, const proto::QueryObjectsRequest& req) {
  const proto::TensorMeta* t = m.tensor();
  if (!req.model().empty() && (t == nullptr || t->model() != req.model())) return false;
  if (req.has_layer_range()) {
    if (t == nullptr || t->layer_begin() >= t->layer_end()) return false;
    if (t->layer_end() <= req.layer_begin() || req.layer_end() <= t->layer_begin()) return false;
  }
  if (req.tp_rank() >= 0 && (t == nullptr || t->tp_rank() != static_cast<uint32_t>(req.tp_rank())))
    return false;
  return true;
}

template <typename A, typename P>
absl::StatusOr<proto::QueryObjectsResponse> QueryObjects(MasterState<A, P>& s,
                                                         const proto::QueryObjectsRequest& req) {
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  if (req.has_layer_range() && req.layer_end() <= req.layer_begin()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer range [", req.layer_begin(), ", ", req.layer_end(), ") is empty"));
  }
  const size_t limit =
      req.limit() == 0 ? 1000 : std::min<size_t>(req.limit(), rpc::kMaxQueryObjects);
  const int64_t now = s.Now();
  std::vector<std::string> keys;
  s.table.ForEach([&](ObjectTable::Shard& sh) {
    for (const auto& [key, m] : sh.objects) {
      if (key <= req.start_after() || master::IsReplacementKey(key)) continue;
      if (!m.Visible(now) || m.tenant != tenant || !TensorMatches(m, req)) continue;
      keys.push_back(key.str());
    }
  });
  const bool more = keys.size() > limit;
  if (more) {
    std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(limit), keys.end());
    keys.resize(limit);
  }
  std::sort(keys.begin(), keys.end());
  proto::QueryObjectsResponse resp;
  for (const std::string& key : keys) {
    s.table.With(key, [&](ObjectTable::Shard& sh) {
      const ObjectMeta* m = sh.Find(key);
      if (m == nullptr || !m->Visible(now) || m->tenant != tenant) return;  // went meanwhile
      proto::ObjectEntry* e = resp.add_objects();
      e->set_key(key);
      master::ToProto(*m, e->mutable_object());
    });
  }
  resp.set_more(more);
  return resp;
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_GROUP_PATH_H_
