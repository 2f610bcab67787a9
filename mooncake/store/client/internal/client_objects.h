// ClientCore's clones, object groups and tensor queries; included only by
// client_core.h. Each call is metadata only (no bytes move): one master RPC,
// or one per page for QueryObjects.
// IWYU pragma: private, include "mooncake/store/client.h"
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_OBJECTS_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_OBJECTS_H_

#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_CORE_H_
#error "include mooncake/store/client.h instead"
#endif

namespace mooncake::client_internal {

inline absl::Status WithContext(const absl::Status& s, std::string_view op) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(AbslView(op), ": ", s.message()));
}

inline absl::Status CheckGroupName(std::string_view group_id) {
  if (group_id.empty()) return absl::InvalidArgumentError("empty group_id");
  return CheckGroupId(group_id, /*replace=*/false);
}

template <rpc::RpcChannel C>
absl::StatusOr<client::CloneResult> ClientCore<C>::Clone(
    std::span<const std::string_view> sources, std::span<const std::string_view> destinations,
    const client::CloneOptions& o) {
  if (sources.empty() || sources.size() != destinations.size() ||
      sources.size() > rpc::kMaxBatchKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat("Clone: 1 to ", rpc::kMaxBatchKeys, " source keys, one destination each; got ",
                     sources.size(), " sources and ", destinations.size(), " destinations"));
  }
  const std::string tenant = Tenant(o.tenant);
  proto::CloneRequest req;
  req.set_tenant(tenant);
  req.set_ttl_ms(o.ttl_ms);
  for (size_t i = 0; i < sources.size(); ++i) {
    RETURN_IF_ERROR(Annotate(ValidateObjectKey(sources[i]), "Clone", sources[i]));
    RETURN_IF_ERROR(Annotate(ValidateObjectKey(destinations[i]), "Clone", destinations[i]));
    req.add_source_keys(std::string(sources[i]));
    req.add_destination_keys(std::string(destinations[i]));
    Invalidate(tenant, destinations[i]);
  }
  auto resp = CallMaster<rpc::CloneMethod>(req);
  if (!resp.ok()) return WithContext(resp.status(), "Clone");
  return client::CloneResult{resp->cloned(), resp->shared_bytes()};
}

template <rpc::RpcChannel C>
absl::StatusOr<client::CloneResult> ClientCore<C>::ClonePrefix(std::string_view source_prefix,
                                                               std::string_view destination_prefix,
                                                               const client::CloneOptions& o) {
  if (source_prefix.empty() || destination_prefix.empty() ||
      source_prefix.size() > rpc::kMaxKeyBytes || destination_prefix.size() > rpc::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClonePrefix: both prefixes must be 1 to ", rpc::kMaxKeyBytes, " bytes"));
  }
  if (source_prefix == destination_prefix) {
    return absl::InvalidArgumentError("ClonePrefix: the source and destination prefixes are equal");
  }
  proto::CloneRequest req;
  req.set_tenant(Tenant(o.tenant));
  req.set_ttl_ms(o.ttl_ms);
  req.set_source_prefix(std::string(source_prefix));
  req.set_destination_prefix(std::string(destination_prefix));
  // The new keys are not known here; none can be cached (they did not exist),
  // but a cached entry of an older object under one of them could be.
  ClearCacheNow();
  auto resp = CallMaster<rpc::CloneMethod>(req);
  if (!resp.ok()) return WithContext(resp.status(), "ClonePrefix");
  return client::CloneResult{resp->cloned(), resp->shared_bytes()};
}

template <rpc::RpcChannel C>
absl::StatusOr<client::GroupCommit> ClientCore<C>::CommitGroup(std::string_view group_id,
                                                               const client::GroupOptions& o) {
  RETURN_IF_ERROR(WithContext(CheckGroupName(group_id), "CommitGroup"));
  proto::CommitGroupRequest req;
  req.set_group_id(std::string(group_id));
  req.set_tenant(Tenant(o.tenant));
  auto resp = CallMaster<rpc::CommitGroupMethod>(req);
  if (!resp.ok()) return WithContext(resp.status(), "CommitGroup");
  return client::GroupCommit{resp->objects(), resp->bytes()};
}

template <rpc::RpcChannel C>
absl::StatusOr<uint64_t> ClientCore<C>::RemoveGroup(std::string_view group_id,
                                                    const client::GroupOptions& o) {
  RETURN_IF_ERROR(WithContext(CheckGroupName(group_id), "RemoveGroup"));
  proto::RemoveGroupRequest req;
  req.set_group_id(std::string(group_id));
  req.set_tenant(Tenant(o.tenant));
  req.set_force(o.force);
  // The members' keys are not known here: no cached entry may outlive them.
  ClearCacheNow();
  auto resp = CallMaster<rpc::RemoveGroupMethod>(req);
  ClearCacheNow();  // a get that raced the removal
  if (!resp.ok()) return WithContext(resp.status(), "RemoveGroup");
  return resp->removed();
}

template <rpc::RpcChannel C>
absl::StatusOr<client::QueriedObjects> ClientCore<C>::QueryObjects(const client::ObjectQuery& q) {
  if (q.objects_max == 0) return absl::InvalidArgumentError("QueryObjects: objects_max is 0");
  if (q.tp_rank < -1) return absl::InvalidArgumentError("QueryObjects: tp_rank below -1");
  if (q.layers.has_value() && q.layers->first > q.layers->second) {
    return absl::InvalidArgumentError(absl::StrCat("QueryObjects: layer range [", q.layers->first,
                                                   ", ", q.layers->second, ") is reversed"));
  }
  proto::QueryObjectsRequest req;
  req.set_tenant(Tenant(q.tenant));
  req.set_model(q.model);
  if (q.layers.has_value()) {
    req.set_has_layer_range(true);
    req.set_layer_begin(q.layers->first);
    req.set_layer_end(q.layers->second);
  }
  req.set_tp_rank(q.tp_rank);
  req.set_start_after(q.start_after);
  client::QueriedObjects out;
  // Ends: a page that says `more` adds at least one object (else INTERNAL),
  // and objects_max bounds the objects.
  for (;;) {
    MC_ASSERT(out.objects.size() < q.objects_max, "the walk stops at objects_max");
    const size_t want = std::min(q.objects_max - out.objects.size(), rpc::kMaxQueryObjects);
    req.set_limit(static_cast<uint32_t>(want));
    auto resp = CallMaster<rpc::QueryObjectsMethod>(req);
    if (!resp.ok()) return WithContext(resp.status(), "QueryObjects");
    if (static_cast<size_t>(resp->objects_size()) > want) {
      return absl::InternalError(absl::StrCat("QueryObjects: the master answered ",
                                              resp->objects_size(), " objects for a limit of ",
                                              want));
    }
    for (proto::ObjectEntry& e : *resp->mutable_objects()) {
      if (e.key() <= req.start_after()) {
        return absl::InternalError("QueryObjects: the master's answer is not in key order");
      }
      req.set_start_after(e.key());
      const proto::ObjectInfo& info = e.object();
      const uint64_t value_bytes =
          rpc::ValueBytes(info.size_bytes(), info.has_tensor() ? &info.tensor() : nullptr);
      out.objects.push_back(
          {std::move(*e.mutable_key()), std::move(*e.mutable_object()), value_bytes});
    }
    if (!resp->more()) return out;
    if (resp->objects_size() == 0) {
      return absl::InternalError("QueryObjects: the master said `more` with an empty page");
    }
    if (out.objects.size() >= q.objects_max) {
      out.more = true;
      return out;
    }
  }
}

}  // namespace mooncake::client_internal

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_OBJECTS_H_
