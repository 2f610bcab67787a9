// The master's request guard for authenticated connections (rpc/service.h
// RequestGuard; docs/security.md "What a token grants").
//
//   registry.SetRequestGuard(master::GuardMasterRequest);
//
// A "cluster" principal (workers, masters, operators) may call every method as
// it is. A "tenant:T" principal:
//   - may call only the client methods (TenantMayCall): puts, reads, leases,
//     removes, prefix queries, clones, groups, object queries, replica
//     copy/move of its own objects, segment descriptions; a worker's or
//     operator's method (mount, heartbeat, tier and copy sync, drain) is
//     PERMISSION_DENIED;
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
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/capability.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/service.h"

namespace mooncake::master {

inline bool TenantMayCall(uint16_t method_id) {
  namespace p = store::proto;
  switch (static_cast<p::MasterMethodId>(method_id)) {
    case p::PUT_START:
    case p::PUT_END:
    case p::PUT_REVOKE:
    case p::GET_REPLICAS:
    case p::RELEASE_LEASES:
    case p::REMOVE:
    case p::EXISTS:
    case p::BATCH_EXISTS:
    case p::PREFIX_QUERY:
    case p::DESCRIBE_SEGMENTS:
    case p::REMOVE_ALL:
    case p::CREATE_COPY_TASK:
    case p::CREATE_MOVE_TASK:
    case p::CLONE:
    case p::COMMIT_GROUP:
    case p::REMOVE_GROUP:
    case p::QUERY_OBJECTS:
    case p::BATCH_GET_REPLICAS:
    case p::BATCH_PUT_START:
    case p::BATCH_PUT_END:
      return true;
    default:
      return false;
  }
}

// The request's tenant field: `tenant` at the top, or inside `options`.
// Null when the message has none.
inline const google::protobuf::FieldDescriptor* TenantField(const google::protobuf::Descriptor* d,
                                                            google::protobuf::Message** holder,
                                                            google::protobuf::Message* msg) {
  using google::protobuf::FieldDescriptor;
  if (const FieldDescriptor* f = d->FindFieldByName("tenant");
      f != nullptr && f->type() == FieldDescriptor::TYPE_STRING && !f->is_repeated()) {
    *holder = msg;
    return f;
  }
  const FieldDescriptor* opts = d->FindFieldByName("options");
  if (opts == nullptr || opts->type() != FieldDescriptor::TYPE_MESSAGE || opts->is_repeated()) {
    return nullptr;
  }
  const FieldDescriptor* f = opts->message_type()->FindFieldByName("tenant");
  if (f == nullptr || f->type() != FieldDescriptor::TYPE_STRING || f->is_repeated()) {
    return nullptr;
  }
  *holder = msg->GetReflection()->MutableMessage(msg, opts);
  return f;
}

inline absl::Status GuardMasterRequest(const rpc::ServerCallContext& ctx,
                                       google::protobuf::MessageLite& request) {
  const auth::Principal& who = *ctx.principal;
  if (who.cluster()) return absl::OkStatus();
  if (!TenantMayCall(ctx.method_id)) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", who.name, "' may not call master method ", ctx.method_id,
                     ": a worker's or operator's method (the 'cluster' token only)"));
  }
  auto* msg = dynamic_cast<google::protobuf::Message*>(&request);
  if (msg == nullptr) return absl::InternalError("master request without reflection");
  google::protobuf::Message* holder = nullptr;
  const google::protobuf::FieldDescriptor* f = TenantField(msg->GetDescriptor(), &holder, msg);
  if (f == nullptr) return absl::OkStatus();  // names no tenant's data (segment descriptions)
  const google::protobuf::Reflection* r = holder->GetReflection();
  std::string scratch;
  const std::string& asked = r->GetStringReference(*holder, f, &scratch);
  if (asked.empty()) {
    r->SetString(holder, f, who.tenant);
  } else if (asked != who.tenant) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", who.name, "' may not act for tenant '", asked, "'"));
  }
  return absl::OkStatus();
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
      rep.set_capability(issued_->Issue(rep.worker_id(), who, rep.segment_id(),
                                        {rights, rep.offset(), rep.length(), expiry}));
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
