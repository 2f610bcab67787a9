// Reads and removal: GetReplicas, PrefixQuery, Exists, BatchExists,
// ReleaseLeases, TouchObjects, Remove, RemoveAll, and the TTL sweep.
//
// Visibility: only committed objects within their TTL whose tenant is the
// request's tenant; everything else (absent, pending, expired, another
// tenant's) reads as NOT_FOUND / false, so tenants cannot probe each other.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_READ_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_READ_PATH_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/index/match_prefix.h"
#include "mooncake/store/master/block_object_probe.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/master/internal/replication_path.h"
#include "mooncake/store/master/internal/tier_path.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

template <typename A, typename P>
int64_t LeaseNs(const MasterState<A, P>& s, uint64_t lease_ms) {
  const int64_t ms =
      lease_ms == 0 ? s.options.default_lease_ms
                    : std::min<int64_t>(
                          static_cast<int64_t>(std::min<uint64_t>(lease_ms, INT64_MAX / kNsPerMs)),
                          s.options.max_lease_ms);
  return ms * kNsPerMs;
}

// Under the shard lock: describes `m` and takes a lease reference on it.
// Replicas come nearest first (on the reader's host), then by the load of
// their segment (reads the master sent there lately), so readers that take
// the first replica spread over an object's workers; the chosen segment's
// load counts this read.
template <typename A, typename P>
void DescribeAndLease(MasterState<A, P>& s, ObjectMeta& m, std::string_view client_host_id,
                      int64_t lease_until, proto::ObjectInfo* info,
                      google::protobuf::RepeatedPtrField<proto::Replica>* replicas) {
  master::ToProto(m, info);
  const int first = replicas->size();
  master::AppendReadableReplicas(m, client_host_id, replicas, m.window_reads);
  const bool has_local =
      !client_host_id.empty() &&
      std::any_of(m.replicas.begin(), m.replicas.end(), [&](const Replica& r) {
        return r.state == master::ReplicaState::kComplete && r.host_id == client_host_id;
      });
  if (replicas->size() - first >= 2 && !has_local) {
    // Remote replicas only (a local one stays first): least loaded first.
    int best = first;
    uint64_t best_load = UINT64_MAX;
    for (int i = first; i < replicas->size(); ++i) {
      const uint64_t load = s.pool.ReadLoad(replicas->Get(i).segment_id(), false);
      if (load < best_load) {
        best_load = load;
        best = i;
      }
    }
    if (best != first) replicas->SwapElements(first, best);
  }
  if (replicas->size() > first) s.pool.ReadLoad(replicas->Get(first).segment_id(), true);
  ++m.lease_refs;
  m.lease_until_ns = std::max(m.lease_until_ns, lease_until);
}

template <typename A, typename P>
absl::StatusOr<proto::GetReplicasResponse> GetReplicas(MasterState<A, P>& s,
                                                       const proto::GetReplicasRequest& req) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(req.key()));
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const int64_t now = s.Now();
  const int64_t lease_ns = LeaseNs(s, req.lease_ms());
  proto::GetReplicasResponse resp;
  uint64_t version = 0;
  bool on_ssd = false, start_load = false;
  s.table.With(req.key(), [&](ObjectTable::Shard& sh) {
    ObjectMeta* m = sh.Find(req.key());
    if (m == nullptr || !m->Visible(now) || m->tenant != tenant) return;
    version = m->version;
    if (!m->HasComplete()) {
      // Only on a worker's SSD tier (or being loaded from it).
      on_ssd = m->ssd == master::SsdState::kStored || m->Loading();
      start_load = on_ssd && !m->Loading();
      if (on_ssd) master::ToProto(*m, resp.mutable_object());
      return;
    }
    DescribeAndLease(s, *m, req.client_host_id(), now + lease_ns, resp.mutable_object(),
                     resp.mutable_replicas());
    NoteRead(s, req.key(), *m, now,
             1 + std::min(req.cached_reads(), rpc::kMaxCachedReads));  // reads served from a cache
  });
  if (version == 0 || (resp.replicas().empty() && !on_ssd)) {
    s.metrics.gets_miss->Increment();
    return absl::NotFoundError(absl::StrCat("key '", absl::CEscape(req.key()), "' not found"));
  }
  if (on_ssd) {
    if (start_load) {
      // No DRAM room yet: eviction has started making some (offloads finish
      // asynchronously), so the client's next ask starts the load.
      if (absl::Status st = StartLoad(s, req.key(), version);
          !st.ok() && !absl::IsUnavailable(st)) {
        return st;
      }
    }
    resp.set_loading(true);
    s.metrics.gets_hit->Increment();
    return resp;
  }
  const uint64_t lease_id = s.leases.Grant(now + lease_ns, {{req.key(), version}}, tenant);
  resp.mutable_lease()->set_lease_id(lease_id);
  resp.mutable_lease()->set_expires_in_ms(static_cast<uint64_t>(lease_ns / kNsPerMs));
  s.evictor.Touch(std::span<const std::string>(&req.key(), 1));
  s.metrics.gets_hit->Increment();
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::PrefixQueryResponse> PrefixQuery(MasterState<A, P>& s,
                                                       const proto::PrefixQueryRequest& req) {
  if (static_cast<size_t>(req.chain_size()) > rpc::kMaxChainBlocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chain of ", req.chain_size(), " blocks exceeds the limit of ", rpc::kMaxChainBlocks));
  }
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const int64_t now = s.Now();
  const int64_t lease_ns = LeaseNs(s, req.lease_ms());
  proto::PrefixQueryResponse resp;
  std::vector<master::LeasedObject> leased;
  std::vector<std::pair<uint32_t, master::LeasedObject>> to_load;  // SSD-only blocks: (index, _)
  // The one longest-prefix walk (index/match_prefix.h) over the chain's block
  // objects; a hit is recorded under its shard lock, a miss records nothing.
  master::BlockObjectProbe probe(
      s.table, tenant, now, [&](size_t i, const std::string& key, ObjectMeta& m) {
        if (!req.with_replicas()) return true;
        if (!m.HasComplete()) {
          if (m.ssd != master::SsdState::kStored && !m.Loading()) return false;
          proto::BlockReplicas* b = resp.add_blocks();
          master::ToProto(m, b->mutable_object());
          b->set_loading(true);
          if (!m.Loading()) to_load.push_back({static_cast<uint32_t>(i), {key, m.version}});
          return true;
        }
        proto::BlockReplicas* b = resp.add_blocks();
        DescribeAndLease(s, m, req.client_host_id(), now + lease_ns, b->mutable_object(),
                         b->mutable_replicas());
        NoteRead(s, key, m, now);
        leased.push_back({key, m.version});
        return true;
      });
  uint32_t matched = static_cast<uint32_t>(index::MatchPrefix(req.chain(), probe));
  MC_DASSERT(!req.with_replicas() || static_cast<uint32_t>(resp.blocks_size()) == matched,
             "one block description per matched block");
  resp.set_matched(matched);
  // Loads start outside the shard locks.
  for (const auto& [index, o] : to_load) {
    // UNAVAILABLE (no DRAM room yet): still loading, the client asks again.
    // Anything else (the tenant's quota) ends the usable prefix there.
    const absl::Status st = StartLoad(s, o.key, o.version);
    if (st.ok() || absl::IsUnavailable(st)) continue;
    matched = index;
    resp.set_matched(matched);
    while (static_cast<uint32_t>(resp.blocks_size()) > matched) resp.mutable_blocks()->RemoveLast();
    break;
  }
  if (!leased.empty()) {
    // A read of the whole matched prefix: refresh it for the policy too. A
    // probe without replicas (like Exists) leaves eviction order alone.
    std::vector<std::string> keys;
    keys.reserve(leased.size());
    for (const master::LeasedObject& o : leased) keys.push_back(o.key);
    s.evictor.Touch(keys);
    resp.mutable_lease()->set_lease_id(s.leases.Grant(now + lease_ns, std::move(leased), tenant));
    resp.mutable_lease()->set_expires_in_ms(static_cast<uint64_t>(lease_ns / kNsPerMs));
  }
  s.metrics.prefix_queries->Increment();
  s.metrics.prefix_blocks_matched->Increment(matched);
  return resp;
}

// `seen` non-null: notes the group of the object (its gen read before its
// phase) as key `index` of a batch that must see each group whole or not at
// all; `found`: whether the key is in the table at all.
template <typename A, typename P>
bool VisibleTo(MasterState<A, P>& s, const std::string& key, std::string_view tenant, int64_t now,
               master::GroupObservations* seen = nullptr, size_t index = 0, bool* found = nullptr) {
  return s.table.With(key, [&](ObjectTable::Shard& sh) {
    const ObjectMeta* m = sh.Find(key);
    if (found != nullptr) *found = m != nullptr;
    if (m == nullptr) return false;
    if (seen != nullptr && m->group() != nullptr) seen->Saw(index, m->group(), m->group()->Gen());
    return m->Visible(now) && m->tenant == tenant;
  });
}

template <typename A, typename P>
absl::StatusOr<proto::ExistsResponse> Exists(MasterState<A, P>& s,
                                             const proto::ExistsRequest& req) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(req.key()));
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const int64_t now = s.Now();
  proto::ExistsResponse resp;
  s.table.With(req.key(), [&](ObjectTable::Shard& sh) {
    const ObjectMeta* m = sh.Find(req.key());
    if (m == nullptr || !m->Visible(now) || m->tenant != tenant) return;
    resp.set_exists(true);
    resp.set_size_bytes(m->size_bytes);
    resp.set_value_bytes(rpc::ValueBytes(m->size_bytes, m->tensor()));
  });
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::BatchExistsResponse> BatchExists(MasterState<A, P>& s,
                                                       const proto::BatchExistsRequest& req) {
  if (static_cast<size_t>(req.keys_size()) > rpc::kMaxBatchKeys) {
    return absl::InvalidArgumentError(absl::StrCat(req.keys_size(), " keys exceed the limit of ",
                                                   rpc::kMaxBatchKeys, " per BatchExists"));
  }
  for (int i = 0; i < req.keys_size(); ++i) {
    if (absl::Status st = rpc::ValidateObjectKey(req.keys(i)); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "]: ", st.message()));
    }
  }
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const int64_t now = s.Now();
  proto::BatchExistsResponse resp;
  // Every group whole or not at all: a group that changed while its keys
  // were read is read again; after a few tries its keys answer false (it was
  // not visible at one moment of the call).
  for (int attempt = 0;; ++attempt) {
    master::GroupObservations seen;
    std::vector<const std::string*> absent;
    resp.clear_exists();
    resp.mutable_exists()->Reserve(req.keys_size());
    for (int i = 0; i < req.keys_size(); ++i) {
      const std::string& key = req.keys(i);
      bool found = false;
      resp.add_exists(VisibleTo(s, key, tenant, now, &seen, static_cast<size_t>(i), &found));
      if (!found) absent.push_back(&key);
    }
    const std::vector<size_t> unsettled = seen.Unsettled(absent);
    if (unsettled.empty()) break;
    if (attempt >= 3) {
      for (const size_t i : unsettled) resp.set_exists(static_cast<int>(i), false);
      break;
    }
  }
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::ReleaseLeasesResponse> ReleaseLeases(MasterState<A, P>& s,
                                                           const proto::ReleaseLeasesRequest& req) {
  if (static_cast<size_t>(req.lease_ids_size()) > rpc::kMaxBatchKeys) {
    return absl::InvalidArgumentError(absl::StrCat(
        req.lease_ids_size(), " lease ids exceed the limit of ", rpc::kMaxBatchKeys, " per call"));
  }
  std::string_view tenant;
  if (!req.tenant().empty()) {
    ASSIGN_OR_RETURN(tenant, s.ResolveTenant(req.tenant()));
  }
  const int64_t now = s.Now();
  uint64_t released = 0;
  for (const uint64_t id : req.lease_ids()) {
    std::optional<std::vector<master::LeasedObject>> objs =
        s.leases.Take(id, req.tenant().empty() ? nullptr : &tenant);
    if (!objs.has_value()) continue;
    s.ReleaseLeaseObjects(*objs, now);
    ++released;
  }
  proto::ReleaseLeasesResponse resp;
  resp.set_released(released);
  return resp;
}

// Reads a client served from its metadata cache: each found object counts
// them as reads now (last use, read window, eviction order), as GetReplicas
// does for its own read.
template <typename A, typename P>
absl::StatusOr<proto::TouchObjectsResponse> TouchObjects(MasterState<A, P>& s,
                                                         const proto::TouchObjectsRequest& req) {
  if (static_cast<size_t>(req.keys_size()) > rpc::kMaxBatchItems) {
    return absl::InvalidArgumentError(absl::StrCat(req.keys_size(), " keys exceed the limit of ",
                                                   rpc::kMaxBatchItems, " per TouchObjects call"));
  }
  if (req.reads_size() != req.keys_size()) {
    return absl::InvalidArgumentError(absl::StrCat("TouchObjects: ", req.reads_size(),
                                                   " read counts for ", req.keys_size(), " keys"));
  }
  for (const std::string& key : req.keys()) RETURN_IF_ERROR(rpc::ValidateObjectKey(key));
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const int64_t now = s.Now();
  uint32_t touched = 0;
  for (int i = 0; i < req.keys_size(); ++i) {
    const std::string& key = req.keys(i);
    const uint32_t reads = std::clamp<uint32_t>(req.reads(i), 1, rpc::kMaxCachedReads);
    bool found = false;
    s.table.With(key, [&](ObjectTable::Shard& sh) {
      ObjectMeta* m = sh.Find(key);
      if (m == nullptr || !m->Visible(now) || m->tenant != tenant || !m->HasComplete()) return;
      NoteRead(s, key, *m, now, reads);
      found = true;
    });
    if (!found) continue;
    s.evictor.Touch(std::span<const std::string>(&key, 1));  // after the shard lock, as GetReplicas
    ++touched;
  }
  proto::TouchObjectsResponse resp;
  resp.set_touched(touched);
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::RemoveResponse> Remove(MasterState<A, P>& s,
                                             const proto::RemoveRequest& req) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(req.key()));
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const int64_t now = s.Now();
  std::optional<Retired> r;
  absl::Status status = s.table.With(req.key(), [&](ObjectTable::Shard& sh) -> absl::Status {
    auto it = sh.objects.find(req.key());
    if (it == sh.objects.end() || !it->second.committed() || it->second.tenant != tenant) {
      return absl::NotFoundError(absl::StrCat("key '", absl::CEscape(req.key()), "' not found"));
    }
    if (it->second.EffectivePin(now) != PinLevel::kNone && !req.force()) {
      return absl::FailedPreconditionError(
          absl::StrCat("key '", absl::CEscape(req.key()), "' is pinned; pass force to remove it"));
    }
    if (req.refuse_if_leased() && !req.force() && it->second.Leased(now)) {
      return absl::AbortedError(absl::StrCat("key '", absl::CEscape(req.key()),
                                             "' has a live read lease; retry after it ends ",
                                             "or pass force"));
    }
    r = s.RetireLocked(sh, it, now, 0);  // leased: the free waits (deferred)
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  s.FinishRetired(*r, req.key(), /*erase_from_evictor=*/true);
  s.metrics.removes->Increment();
  return proto::RemoveResponse();
}

// What RemoveAll may take: a committed object of `tenant`, not leased, not
// pinned unless `force`.
inline bool RemoveAllMayTake(const ObjectMeta& m, std::string_view tenant, bool force,
                             int64_t now) {
  return m.committed() && m.tenant == tenant && !m.Leased(now) &&
         (force || m.EffectivePin(now) == PinLevel::kNone);
}

// Per shard: the candidates are listed under the lock, the regex runs outside
// it, and the matches are retired under the lock again (re-checked). Cost:
// O(objects in the shards walked) per call, at most one shard's worth past
// kRemoveAllObjectsPerCall; each shard lock is held for one pass over it.
template <typename A, typename P>
absl::StatusOr<proto::RemoveAllResponse> RemoveAll(MasterState<A, P>& s,
                                                   const proto::RemoveAllRequest& req) {
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(req.tenant()));
  const size_t shards = s.table.shard_count();
  if (req.start_shard() >= shards) {
    return absl::InvalidArgumentError(absl::StrCat("start_shard ", req.start_shard(),
                                                   " is past the master's ", shards, " shards"));
  }
  if (req.key_regex().size() > rpc::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key_regex of ", req.key_regex().size(),
                                                   " bytes exceeds the limit of ",
                                                   rpc::kMaxKeyBytes));
  }
  std::optional<std::regex> re;
  if (!req.key_regex().empty()) {
    try {
      re.emplace(req.key_regex(), std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("key_regex '", absl::CEscape(req.key_regex()), "': ", e.what()));
    }
  }
  proto::RemoveAllResponse resp;
  size_t looked = 0;
  size_t shard = req.start_shard();
  for (; shard < shards && looked < rpc::kRemoveAllObjectsPerCall; ++shard) {
    int64_t now = s.Now();
    std::vector<std::string> keys;
    s.table.WithShard(shard, [&](ObjectTable::Shard& sh) {
      looked += sh.objects.size();
      for (const auto& [key, m] : sh.objects) {
        if (RemoveAllMayTake(m, tenant, req.force(), now)) keys.push_back(key.str());
      }
    });
    if (re.has_value()) {
      std::erase_if(keys, [&](const std::string& k) {
        return (!k.empty() && k[0] == '\0') || !std::regex_match(k, *re);
      });
    }
    if (keys.empty()) continue;
    now = s.Now();
    std::vector<std::pair<std::string, Retired>> gone;
    s.table.WithShard(shard, [&](ObjectTable::Shard& sh) {
      for (std::string& key : keys) {
        auto it = sh.objects.find(key);
        if (it == sh.objects.end() || !RemoveAllMayTake(it->second, tenant, req.force(), now)) {
          continue;
        }
        gone.emplace_back(std::move(key), s.RetireLocked(sh, it, now, 0));
      }
    });
    for (auto& [key, r] : gone) s.FinishRetired(r, key, /*erase_from_evictor=*/true);
    resp.set_removed(resp.removed() + gone.size());
  }
  MC_ASSERT(shard > req.start_shard(), "every call walks at least one shard");
  resp.set_more(shard < shards);
  resp.set_next_shard(static_cast<uint32_t>(shard < shards ? shard : 0));
  s.metrics.removes->Increment(resp.removed());
  return resp;
}

// Tick: removes objects whose TTL passed (leases still defer their space).
template <typename A, typename P>
uint64_t ExpireObjects(MasterState<A, P>& s, int64_t now) {
  uint64_t n = 0;
  for (DeadlineEntry& e : s.ttl_deadlines.PopDue(now, s.options.tick_batch_max)) {
    std::optional<Retired> r;
    s.table.With(e.key, [&](ObjectTable::Shard& sh) {
      auto it = sh.objects.find(e.key);
      if (it == sh.objects.end() || it->second.version != e.id || !it->second.Expired(now)) return;
      r = s.RetireLocked(sh, it, now, 0);
    });
    if (!r.has_value()) continue;
    s.FinishRetired(*r, e.key, /*erase_from_evictor=*/true);
    s.metrics.expired->Increment();
    ++n;
  }
  return n;
}

// Tick: ends the leases whose time is up.
template <typename A, typename P>
uint64_t ExpireLeases(MasterState<A, P>& s, int64_t now) {
  uint64_t n = 0;
  for (auto& objs : s.leases.TakeExpired(now, s.options.tick_batch_max)) {
    s.ReleaseLeaseObjects(objs, now);
    ++n;
  }
  return n;
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_READ_PATH_H_
