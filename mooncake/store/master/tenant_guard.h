// The master's request guard for authenticated connections (rpc/service.h
// RequestGuard; docs/security.md "What a token grants").
//
//   registry.SetRequestGuard(master::GuardMasterRequest);
//
// A "cluster" principal (workers, masters, operators) may call every method as
// it is. A "tenant:T" principal:
//   - may call only the client methods (TenantMayCall): puts, reads, leases,
//     reports of cached reads, removes, prefix queries, clones, groups,
//     object queries, replica copy/move of its own objects, segment
//     descriptions; a worker's or operator's method (mount, heartbeat, tier
//     and copy sync, drain) is PERMISSION_DENIED;
//   - acts as tenant T only: the request's tenant (its `tenant` field, or
//     `options.tenant` for PutStart) is set to T when empty, and a different
//     one is PERMISSION_DENIED. PutEnd, PutRevoke and ReleaseLeases carry T
//     the same way, so the master checks the put or lease is T's.
// The master itself then hides every other tenant's objects (NOT_FOUND), as
// it does for any request naming a tenant.
//
//   registry.SetResponseGuard(master::CapabilityIssuer(key));
//
// CapabilityIssuer gives every replica a tenant's connection is told about a
// range capability (base/capability.h) in Replica.capability: read access
// until the read lease ends (GetReplicas, BatchGetReplicas, PrefixQuery),
// write access until the put times out (PutStart, BatchPutStart). A worker
// whose transport checks tenants (WorkerOptions::auth) serves a tenant's
// connection only the ranges such capabilities cover.
//
// GuardMasterRegistry sets both on a registry.
//
// Thread-safety: GuardMasterRequest is a pure function; CapabilityIssuer is
// thread-safe.
#ifndef MOONCAKE_STORE_MASTER_TENANT_GUARD_H_
#define MOONCAKE_STORE_MASTER_TENANT_GUARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message_lite.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::master {

// Makes `request` act as tenant `who.tenant`: its tenant field (`tenant` at
// the top, or `options.tenant`) is set when empty; a different one is
// PERMISSION_DENIED. A request without one names no tenant's data (segment
// descriptions). Resolved at compile time: no reflection on the call path.
template <typename Request>
absl::Status ActAsTenant(const auth::Principal& who, Request& request) {
  std::string* tenant = nullptr;
  if constexpr (requires { request.mutable_tenant()->assign(""); }) {
    tenant = request.mutable_tenant();
  } else if constexpr (requires { request.mutable_options()->mutable_tenant()->assign(""); }) {
    tenant = request.mutable_options()->mutable_tenant();
  } else {
    return absl::OkStatus();
  }
  if (tenant->empty()) {
    *tenant = who.tenant;
  } else if (*tenant != who.tenant) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", who.name, "' may not act for tenant '", *tenant, "'"));
  }
  return absl::OkStatus();
}

// The client methods a tenant may call (the request is then made to act as
// the tenant), or null: a worker's or operator's method.
using TenantGuardFn = absl::Status (*)(const auth::Principal&, google::protobuf::MessageLite&);
template <typename Method>
absl::Status GuardAs(const auth::Principal& who, google::protobuf::MessageLite& request) {
  // The registry decodes a call's request as its method's Request; checked (a
  // type_info compare) so that a registry serving another type under a master
  // method's id gets an error, not a wrong cast.
  if (typeid(request) != typeid(typename Method::Request)) {
    const std::string name(Method::kName);
    return absl::InternalError(
        absl::StrCat("master method ", name, ": the request is not a ", name, "Request"));
  }
  return ActAsTenant(who, static_cast<typename Method::Request&>(request));
}
inline TenantGuardFn TenantGuardOf(uint16_t method_id) {
  namespace p = store::proto;
  switch (static_cast<p::MasterMethodId>(method_id)) {
    case p::PUT_START:
      return GuardAs<rpc::PutStartMethod>;
    case p::PUT_END:
      return GuardAs<rpc::PutEndMethod>;
    case p::PUT_REVOKE:
      return GuardAs<rpc::PutRevokeMethod>;
    case p::GET_REPLICAS:
      return GuardAs<rpc::GetReplicasMethod>;
    case p::RELEASE_LEASES:
      return GuardAs<rpc::ReleaseLeasesMethod>;
    case p::REMOVE:
      return GuardAs<rpc::RemoveMethod>;
    case p::EXISTS:
      return GuardAs<rpc::ExistsMethod>;
    case p::BATCH_EXISTS:
      return GuardAs<rpc::BatchExistsMethod>;
    case p::PREFIX_QUERY:
      return GuardAs<rpc::PrefixQueryMethod>;
    case p::DESCRIBE_SEGMENTS:
      return GuardAs<rpc::DescribeSegmentsMethod>;
    case p::REMOVE_ALL:
      return GuardAs<rpc::RemoveAllMethod>;
    case p::CREATE_COPY_TASK:
      return GuardAs<rpc::CreateCopyTaskMethod>;
    case p::CREATE_MOVE_TASK:
      return GuardAs<rpc::CreateMoveTaskMethod>;
    case p::CLONE:
      return GuardAs<rpc::CloneMethod>;
    case p::COMMIT_GROUP:
      return GuardAs<rpc::CommitGroupMethod>;
    case p::REMOVE_GROUP:
      return GuardAs<rpc::RemoveGroupMethod>;
    case p::QUERY_OBJECTS:
      return GuardAs<rpc::QueryObjectsMethod>;
    case p::BATCH_GET_REPLICAS:
      return GuardAs<rpc::BatchGetReplicasMethod>;
    case p::BATCH_PUT_START:
      return GuardAs<rpc::BatchPutStartMethod>;
    case p::BATCH_PUT_END:
      return GuardAs<rpc::BatchPutEndMethod>;
    case p::TOUCH_OBJECTS:
      return GuardAs<rpc::TouchObjectsMethod>;
    default:
      return nullptr;
  }
}

inline bool TenantMayCall(uint16_t method_id) { return TenantGuardOf(method_id) != nullptr; }

inline absl::Status GuardMasterRequest(const rpc::ServerCallContext& ctx,
                                       google::protobuf::MessageLite& request) {
  const auth::Principal& who = *ctx.principal;
  if (who.cluster()) return absl::OkStatus();
  const TenantGuardFn guard = TenantGuardOf(ctx.method_id);
  if (guard == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", who.name, "' may not call master method ", ctx.method_id,
                     ": a worker's or operator's method (the 'cluster' token only)"));
  }
  return guard(who, request);
}

// How long a read capability lives when the answer carries no lease (a
// replica listed without one): the range may be reused soon after.
inline constexpr int64_t kUnleasedReadCapabilityMs = 1'000;

class CapabilityIssuer {
 public:
  explicit CapabilityIssuer(std::shared_ptr<const auth::CapabilityKey> key)
      : issued_(std::make_shared<auth::IssuedCapabilities>(std::move(key))) {}

  void operator()(const rpc::ServerCallContext& ctx,
                  google::protobuf::MessageLite& response) const {
    if (ctx.principal == nullptr || ctx.principal->cluster()) return;
    namespace p = store::proto;
    const std::string& who = ctx.principal->name;
    const int64_t now = auth::NowUnixMs();
    switch (static_cast<p::MasterMethodId>(ctx.method_id)) {
      case p::PUT_START:
        Put(who, now, static_cast<p::PutStartResponse&>(response));
        break;
      case p::BATCH_PUT_START:
        for (p::PutStartResponse& item :
             *static_cast<p::BatchPutStartResponse&>(response).mutable_items()) {
          Put(who, now, item);
        }
        break;
      case p::GET_REPLICAS:
        Get(who, now, static_cast<p::GetReplicasResponse&>(response));
        break;
      case p::BATCH_GET_REPLICAS:
        for (p::GetReplicasResponse& item :
             *static_cast<p::BatchGetReplicasResponse&>(response).mutable_items()) {
          Get(who, now, item);
        }
        break;
      case p::PREFIX_QUERY: {
        auto& r = static_cast<p::PrefixQueryResponse&>(response);
        const int64_t expiry = ReadExpiry(now, r.lease());
        for (p::BlockReplicas& b : *r.mutable_blocks()) {
          Sign(who, auth::kCapRead, expiry, b.mutable_replicas());
        }
        break;
      }
      default:
        break;  // no replica ranges in the answer
    }
  }

 private:
  // Within the lease (or the put's time), rounded down to a second so
  // that reads of one object in one second get the same capability (the
  // worker verifies it once).
  static int64_t ReadExpiry(int64_t now, const store::proto::Lease& lease) {
    return auth::QuantizedExpiry(now, lease.lease_id() != 0
                                          ? static_cast<int64_t>(lease.expires_in_ms())
                                          : kUnleasedReadCapabilityMs);
  }
  void Put(const std::string& who, int64_t now, store::proto::PutStartResponse& r) const {
    Sign(who, auth::kCapWrite, auth::QuantizedExpiry(now, static_cast<int64_t>(r.put_timeout_ms())),
         r.mutable_replicas());
  }
  void Get(const std::string& who, int64_t now, store::proto::GetReplicasResponse& r) const {
    Sign(who, auth::kCapRead, ReadExpiry(now, r.lease()), r.mutable_replicas());
  }
  void Sign(const std::string& who, uint8_t rights, int64_t expiry,
            google::protobuf::RepeatedPtrField<store::proto::Replica>* replicas) const {
    for (store::proto::Replica& rep : *replicas) {
      if (rep.length() == 0) continue;
      const auth::IssuedCapabilities::Bytes cap = issued_->IssueBytes(
          rep.worker_id(), who, rep.segment_id(), {rights, rep.offset(), rep.length(), expiry});
      rep.set_capability(cap.data(), cap.size());
    }
  }

  // Shared by the copies a registry keeps (a std::function copies us).
  std::shared_ptr<auth::IssuedCapabilities> issued_;
};

// Both guards of a master whose RPC server has `creds` (a token file that
// lists "cluster"): requests bound to their tenant, replicas with capabilities.
// Errors: FAILED_PRECONDITION (no "cluster" line), or the registry's (it serves).
inline absl::Status GuardMasterRegistry(rpc::ServiceRegistry* registry,
                                        const auth::Credentials& creds) {
  absl::StatusOr<auth::CapabilityKey> key = auth::CapabilityKey::FromCredentials(creds);
  if (!key.ok()) return key.status();
  if (absl::Status s = registry->SetRequestGuard(GuardMasterRequest); !s.ok()) return s;
  return registry->SetResponseGuard(
      CapabilityIssuer(std::make_shared<const auth::CapabilityKey>(*std::move(key))));
}

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_TENANT_GUARD_H_
