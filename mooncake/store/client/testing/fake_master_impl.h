// FakeMaster member definitions; included only by fake_master.h.
// IWYU pragma: private, include "mooncake/store/client/testing/fake_master.h"
#ifndef MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_IMPL_H_
#define MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_IMPL_H_

#ifndef MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_H_
#error "include mooncake/store/client/testing/fake_master.h instead"
#endif

namespace mooncake::store_testing {

inline absl::Status FakeMaster::RegisterOn(rpc::ServiceRegistry* registry) {
#define MOONCAKE_FAKE_REGISTER_(Type)                    \
  RETURN_IF_ERROR(registry->Register<rpc::Type##Method>( \
      [this](const proto::Type##Request& r) { return Type(r); }, {rpc::ExecutionMode::kWorker}))
  MOONCAKE_FAKE_REGISTER_(MountSegment);
  MOONCAKE_FAKE_REGISTER_(UnmountSegment);
  MOONCAKE_FAKE_REGISTER_(Heartbeat);
  MOONCAKE_FAKE_REGISTER_(PutStart);
  MOONCAKE_FAKE_REGISTER_(PutEnd);
  MOONCAKE_FAKE_REGISTER_(PutRevoke);
  MOONCAKE_FAKE_REGISTER_(GetReplicas);
  MOONCAKE_FAKE_REGISTER_(ReleaseLeases);
  MOONCAKE_FAKE_REGISTER_(Remove);
  MOONCAKE_FAKE_REGISTER_(Exists);
  MOONCAKE_FAKE_REGISTER_(BatchExists);
  MOONCAKE_FAKE_REGISTER_(PrefixQuery);
  MOONCAKE_FAKE_REGISTER_(DescribeSegments);
  MOONCAKE_FAKE_REGISTER_(RemoveAll);
#undef MOONCAKE_FAKE_REGISTER_
  return absl::OkStatus();
}

inline absl::Status FakeMaster::CheckTenant(const std::string& tenant) const {
  if (!options_.tenants.contains(tenant)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown tenant '", tenant, "'"));
  }
  return absl::OkStatus();
}

inline void FakeMaster::SweepLocked() {
  const int64_t now = Now();
  std::vector<uint64_t> expired;
  for (const auto& [id, l] : leases_) {
    if (l.until_ns <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    Lease l = std::move(leases_[id]);
    leases_.erase(id);
    EndLeaseLocked(l);
  }
  std::vector<std::string> dead;
  for (const auto& [w, beat] : workers_) {
    if (now - beat > static_cast<int64_t>(options_.heartbeat_timeout_ms) * 1'000'000) {
      dead.push_back(w);
    }
  }
  for (const std::string& w : dead) DropWorkerLocked(w);
  std::vector<std::string> stale_puts;
  for (const auto& [k, o] : objects_) {
    if (!o.committed() && o.put_deadline_ns <= now) stale_puts.push_back(k);
  }
  for (const std::string& k : stale_puts) RetireLocked(k);
}

inline std::optional<uint64_t> FakeMaster::AllocLocked(uint64_t segment_id, uint64_t size) {
  Segment& s = segments_.at(segment_id);
  const uint64_t need = (size + 63) & ~uint64_t{63};
  for (auto it = s.free.begin(); it != s.free.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t off = it->first;
    const uint64_t len = it->second;
    s.free.erase(it);
    if (len > need) s.free.emplace(off + need, len - need);
    s.used += need;
    return off;
  }
  return std::nullopt;
}

inline void FakeMaster::FreeLocked(const proto::Replica& r) {
  auto it = segments_.find(r.segment_id());
  if (it == segments_.end()) return;  // unmounted: nothing to give back
  Segment& s = it->second;
  const uint64_t need = (r.length() + 63) & ~uint64_t{63};
  s.used -= need;
  auto [pos, inserted] = s.free.emplace(r.offset(), need);
  MC_ASSERT(inserted, "double free in the fake master");
  if (auto next = std::next(pos); next != s.free.end() && pos->first + pos->second == next->first) {
    pos->second += next->second;
    s.free.erase(next);
  }
  if (pos != s.free.begin()) {
    auto prev = std::prev(pos);
    if (prev->first + prev->second == pos->first) {
      prev->second += pos->second;
      s.free.erase(pos);
    }
  }
}

// Removes the object under `map_key`; its space waits for its leases.
inline void FakeMaster::RetireLocked(const std::string& map_key) {
  auto it = objects_.find(map_key);
  if (it == objects_.end()) return;
  Object& o = it->second;
  tenant_used_[o.tenant] -= o.size * o.replicas.size();
  if (o.leases == 0) {
    for (const proto::Replica& r : o.replicas) FreeLocked(r);
  } else {
    retired_[{map_key, o.version}] = Retired{std::move(o.replicas), o.leases};
  }
  objects_.erase(it);
}

inline void FakeMaster::DropWorkerLocked(const std::string& worker_id) {
  workers_.erase(worker_id);
  absl::flat_hash_set<uint64_t> dead;
  for (auto it = segments_.begin(); it != segments_.end();) {
    if (it->second.worker_id == worker_id) {
      dead.insert(it->first);
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
  auto on_dead = [&](const proto::Replica& r) { return dead.contains(r.segment_id()); };
  std::vector<std::string> lost;
  for (auto& [k, o] : objects_) {
    const size_t before = o.replicas.size();
    std::erase_if(o.replicas, on_dead);
    tenant_used_[o.tenant] -= o.size * (before - o.replicas.size());
    if (o.replicas.empty()) lost.push_back(k);
  }
  for (const std::string& k : lost) RetireLocked(k);
  for (auto& [k, r] : retired_) std::erase_if(r.replicas, on_dead);
}

inline uint64_t FakeMaster::GrantLocked(std::vector<std::pair<std::string, uint64_t>> objs,
                                        uint64_t lease_ms, proto::Lease* out) {
  const uint64_t ms =
      lease_ms == 0 ? options_.default_lease_ms : std::min(lease_ms, options_.max_lease_ms);
  for (const auto& [k, v] : objs) ++objects_.at(k).leases;
  const uint64_t id = next_lease_++;
  leases_[id] = Lease{std::move(objs), Now() + static_cast<int64_t>(ms) * 1'000'000};
  out->set_lease_id(id);
  out->set_expires_in_ms(ms);
  return id;
}

inline void FakeMaster::EndLeaseLocked(const Lease& l) {
  for (const auto& [k, v] : l.objects) {
    if (auto it = objects_.find(k); it != objects_.end() && it->second.version == v) {
      --it->second.leases;
      continue;
    }
    auto r = retired_.find({k, v});
    if (r == retired_.end()) continue;
    if (--r->second.leases == 0) {
      for (const proto::Replica& rep : r->second.replicas) FreeLocked(rep);
      retired_.erase(r);
    }
  }
}

inline void FakeMaster::Describe(const Object& o, const std::string& host, proto::ObjectInfo* info,
                                 google::protobuf::RepeatedPtrField<proto::Replica>* out) {
  info->set_size_bytes(o.size);
  info->set_checksum(o.checksum);
  info->set_checksum_format(static_cast<store::proto::ChecksumFormat>(o.checksum_format));
  info->set_version(o.version);
  info->set_tenant(o.tenant);
  std::vector<proto::Replica> near, far;
  for (const proto::Replica& r : o.replicas) {
    auto s = segments_.find(r.segment_id());
    (s != segments_.end() && s->second.host_id == host ? near : far).push_back(r);
  }
  for (auto* v : {&near, &far}) {
    for (proto::Replica& r : *v) *out->Add() = std::move(r);
  }
}

inline absl::StatusOr<proto::MountSegmentResponse> FakeMaster::MountSegment(
    const proto::MountSegmentRequest& r) {
  Count(rpc::MountSegmentMethod::kId);
  const proto::SegmentDescriptor& d = r.segment();
  if (d.worker_id().empty() || d.name().empty() || d.size_bytes() == 0) {
    return absl::InvalidArgumentError("segment needs a worker_id, a name and size_bytes > 0");
  }
  MutexLock lock(&mu_);
  SweepLocked();
  const uint64_t id = next_segment_++;
  Segment& s = segments_[id];
  s.worker_id = d.worker_id();
  s.host_id = d.endpoint().host_id();
  s.desc = d;
  s.size = d.size_bytes();
  s.free.emplace(0, d.size_bytes() & ~uint64_t{63});
  workers_[d.worker_id()] = Now();
  proto::MountSegmentResponse resp;
  resp.set_segment_id(id);
  resp.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return resp;
}

inline absl::StatusOr<proto::DescribeSegmentsResponse> FakeMaster::DescribeSegments(
    const proto::DescribeSegmentsRequest& r) {
  Count(rpc::DescribeSegmentsMethod::kId);
  if (r.segment_ids().empty() ||
      static_cast<size_t>(r.segment_ids_size()) > rpc::kMaxDescribeSegments) {
    return absl::InvalidArgumentError("DescribeSegments needs 1..kMaxDescribeSegments ids");
  }
  MutexLock lock(&mu_);
  SweepLocked();
  proto::DescribeSegmentsResponse resp;
  for (const uint64_t id : r.segment_ids()) {
    proto::SegmentInfo* info = resp.add_segments();
    info->set_segment_id(id);
    if (auto it = segments_.find(id); it != segments_.end()) {
      info->set_state(proto::SEGMENT_MOUNTED);
      *info->mutable_segment() = it->second.desc;
    } else {
      info->set_state(id != 0 && id < next_segment_ ? proto::SEGMENT_UNMOUNTED
                                                    : proto::SEGMENT_UNKNOWN);
    }
  }
  return resp;
}

inline absl::StatusOr<proto::UnmountSegmentResponse> FakeMaster::UnmountSegment(
    const proto::UnmountSegmentRequest& r) {
  Count(rpc::UnmountSegmentMethod::kId);
  MutexLock lock(&mu_);
  auto it = segments_.find(r.segment_id());
  if (it == segments_.end() || it->second.worker_id != r.worker_id()) {
    return absl::NotFoundError(absl::StrCat("segment ", r.segment_id(), " is not mounted"));
  }
  uint64_t dropped = 0;
  std::vector<std::string> lost;
  for (auto& [k, o] : objects_) {
    const size_t before = o.replicas.size();
    std::erase_if(o.replicas,
                  [&](const proto::Replica& x) { return x.segment_id() == r.segment_id(); });
    dropped += before - o.replicas.size();
    tenant_used_[o.tenant] -= o.size * (before - o.replicas.size());
    if (o.replicas.empty()) lost.push_back(k);
  }
  segments_.erase(it);
  for (const std::string& k : lost) RetireLocked(k);
  proto::UnmountSegmentResponse resp;
  resp.set_dropped_replicas(dropped);
  return resp;
}

inline absl::StatusOr<proto::HeartbeatResponse> FakeMaster::Heartbeat(
    const proto::HeartbeatRequest& r) {
  Count(rpc::HeartbeatMethod::kId);
  MutexLock lock(&mu_);
  SweepLocked();
  proto::HeartbeatResponse resp;
  auto it = workers_.find(r.worker_id());
  resp.set_remount_required(it == workers_.end());
  if (it != workers_.end()) it->second = Now();
  resp.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return resp;
}

inline absl::StatusOr<proto::PutStartResponse> FakeMaster::PutStart(
    const proto::PutStartRequest& r) {
  Count(rpc::PutStartMethod::kId);
  RETURN_IF_ERROR(rpc::ValidateUserKey(r.key()));
  const std::string& tenant = r.options().tenant();
  if (r.size_bytes() == 0 || r.size_bytes() > options_.max_object_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object of ", r.size_bytes(), " bytes: sizes are 1..", options_.max_object_bytes));
  }
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckTenant(tenant));
  SweepLocked();
  const std::string mk = MapKey(tenant, r.key());
  if (auto it = objects_.find(mk); it != objects_.end()) {
    if (r.options().replace() && it->second.committed()) {
      return absl::UnimplementedError(
          "the fake master does not replace objects (master::Master does)");
    }
    return absl::AlreadyExistsError(absl::StrCat("key '", r.key(), "' exists or is being put"));
  }
  const uint32_t n = r.options().replica_count() == 0 ? options_.default_replica_count
                                                      : r.options().replica_count();
  if (tenant_used_[tenant] + r.size_bytes() * n > options_.tenants.at(tenant)) {
    return absl::ResourceExhaustedError(absl::StrCat("tenant '", tenant, "' is over its quota"));
  }
  std::vector<uint64_t> order;  // preferred, then the client's host, then the rest
  for (int pass = 0; pass < 3; ++pass) {
    for (const auto& [id, s] : segments_) {
      const bool pref = id == r.options().preferred_segment_id();
      const bool local = s.host_id == r.client_host_id();
      if ((pass == 0 && pref) || (pass == 1 && !pref && local) || (pass == 2 && !pref && !local)) {
        order.push_back(id);
      }
    }
  }
  Object o;
  o.tenant = tenant;
  o.size = r.size_bytes();
  o.checksum = r.checksum();
  o.checksum_format = static_cast<uint32_t>(r.checksum_format());
  absl::flat_hash_set<std::string> used_workers;
  for (uint64_t id : order) {
    if (o.replicas.size() == n) break;
    if (used_workers.contains(segments_.at(id).worker_id)) continue;
    const std::optional<uint64_t> off = AllocLocked(id, r.size_bytes());
    if (!off.has_value()) continue;
    used_workers.insert(segments_.at(id).worker_id);
    proto::Replica& rep = o.replicas.emplace_back();
    rep.set_segment_id(id);
    rep.set_worker_id(segments_.at(id).worker_id);
    rep.set_offset(*off);
    rep.set_length(r.size_bytes());
    rep.set_state(proto::REPLICA_ALLOCATED);
  }
  if (o.replicas.size() < n) {
    for (const proto::Replica& rep : o.replicas) FreeLocked(rep);
    return absl::ResourceExhaustedError(
        absl::StrCat("no space for ", n, " replicas of ", r.size_bytes(), " bytes"));
  }
  tenant_used_[tenant] += r.size_bytes() * n;
  o.put_id = next_put_++;
  o.put_deadline_ns = Now() + static_cast<int64_t>(options_.put_timeout_ms) * 1'000'000;
  proto::PutStartResponse resp;
  resp.set_put_id(o.put_id);
  resp.set_put_timeout_ms(options_.put_timeout_ms);
  for (const proto::Replica& rep : o.replicas) *resp.add_replicas() = rep;
  objects_.emplace(mk, std::move(o));
  return resp;
}

inline absl::StatusOr<proto::PutEndResponse> FakeMaster::PutEnd(const proto::PutEndRequest& r) {
  Count(rpc::PutEndMethod::kId);
  MutexLock lock(&mu_);
  SweepLocked();
  // Puts are keyed by (tenant, key); find the pending put by id.
  for (auto& [mk, o] : objects_) {
    if (o.put_id != r.put_id() || o.committed()) continue;
    absl::flat_hash_set<uint64_t> failed(r.failed_segment_ids().begin(),
                                         r.failed_segment_ids().end());
    std::vector<proto::Replica> keep;
    for (proto::Replica& rep : o.replicas) {
      if (failed.contains(rep.segment_id())) {
        FreeLocked(rep);
        tenant_used_[o.tenant] -= o.size;
      } else {
        rep.set_state(proto::REPLICA_COMPLETE);
        keep.push_back(rep);
      }
    }
    o.replicas = std::move(keep);
    if (o.replicas.empty()) {
      objects_.erase(mk);
      return absl::AbortedError("every replica of the put failed; nothing committed");
    }
    o.put_id = 0;
    o.version = next_version_++;
    proto::PutEndResponse resp;
    resp.mutable_object()->set_size_bytes(o.size);
    resp.mutable_object()->set_checksum(o.checksum);
    resp.mutable_object()->set_checksum_format(
        static_cast<store::proto::ChecksumFormat>(o.checksum_format));
    resp.mutable_object()->set_version(o.version);
    resp.mutable_object()->set_tenant(o.tenant);
    return resp;
  }
  return absl::NotFoundError(absl::StrCat("no pending put ", r.put_id()));
}

inline absl::StatusOr<proto::PutRevokeResponse> FakeMaster::PutRevoke(
    const proto::PutRevokeRequest& r) {
  Count(rpc::PutRevokeMethod::kId);
  MutexLock lock(&mu_);
  for (auto& [mk, o] : objects_) {
    if (o.put_id == r.put_id() && !o.committed()) {
      RetireLocked(std::string(mk));
      return proto::PutRevokeResponse();
    }
  }
  return absl::NotFoundError(absl::StrCat("no pending put ", r.put_id()));
}

inline absl::StatusOr<proto::GetReplicasResponse> FakeMaster::GetReplicas(
    const proto::GetReplicasRequest& r) {
  Count(rpc::GetReplicasMethod::kId);
  RETURN_IF_ERROR(rpc::ValidateUserKey(r.key()));
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckTenant(r.tenant()));
  SweepLocked();
  const std::string mk = MapKey(r.tenant(), r.key());
  auto it = objects_.find(mk);
  if (it == objects_.end() || !it->second.committed()) {
    return absl::NotFoundError(absl::StrCat("key '", r.key(), "' not found"));
  }
  proto::GetReplicasResponse resp;
  Describe(it->second, r.client_host_id(), resp.mutable_object(), resp.mutable_replicas());
  GrantLocked({{mk, it->second.version}}, r.lease_ms(), resp.mutable_lease());
  return resp;
}

inline absl::StatusOr<proto::ReleaseLeasesResponse> FakeMaster::ReleaseLeases(
    const proto::ReleaseLeasesRequest& r) {
  Count(rpc::ReleaseLeasesMethod::kId);
  MutexLock lock(&mu_);
  proto::ReleaseLeasesResponse resp;
  for (uint64_t id : r.lease_ids()) {
    auto it = leases_.find(id);
    if (it == leases_.end()) continue;
    Lease l = std::move(it->second);
    leases_.erase(it);
    EndLeaseLocked(l);
    resp.set_released(resp.released() + 1);
  }
  return resp;
}

inline absl::StatusOr<proto::RemoveResponse> FakeMaster::Remove(const proto::RemoveRequest& r) {
  Count(rpc::RemoveMethod::kId);
  RETURN_IF_ERROR(rpc::ValidateUserKey(r.key()));
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckTenant(r.tenant()));
  SweepLocked();
  const std::string mk = MapKey(r.tenant(), r.key());
  auto it = objects_.find(mk);
  if (it == objects_.end() || !it->second.committed()) {
    return absl::NotFoundError(absl::StrCat("key '", r.key(), "' not found"));
  }
  if (r.refuse_if_leased() && !r.force() && it->second.leases > 0) {
    return absl::AbortedError(absl::StrCat("key '", r.key(), "' has a live read lease"));
  }
  RetireLocked(mk);
  return proto::RemoveResponse();
}

inline absl::StatusOr<proto::RemoveAllResponse> FakeMaster::RemoveAll(
    const proto::RemoveAllRequest&) {
  Count(rpc::RemoveAllMethod::kId);
  return absl::UnimplementedError("the fake master has no RemoveAll (master::Master does)");
}

inline absl::StatusOr<proto::ExistsResponse> FakeMaster::Exists(const proto::ExistsRequest& r) {
  Count(rpc::ExistsMethod::kId);
  RETURN_IF_ERROR(rpc::ValidateUserKey(r.key()));
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckTenant(r.tenant()));
  SweepLocked();
  auto it = objects_.find(MapKey(r.tenant(), r.key()));
  proto::ExistsResponse resp;
  resp.set_exists(it != objects_.end() && it->second.committed());
  if (resp.exists()) resp.set_size_bytes(it->second.size);
  return resp;
}

inline absl::StatusOr<proto::BatchExistsResponse> FakeMaster::BatchExists(
    const proto::BatchExistsRequest& r) {
  Count(rpc::BatchExistsMethod::kId);
  for (const std::string& k : r.keys()) RETURN_IF_ERROR(rpc::ValidateUserKey(k));
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckTenant(r.tenant()));
  SweepLocked();
  proto::BatchExistsResponse resp;
  for (const std::string& k : r.keys()) {
    auto it = objects_.find(MapKey(r.tenant(), k));
    resp.add_exists(it != objects_.end() && it->second.committed());
  }
  return resp;
}

inline absl::StatusOr<proto::PrefixQueryResponse> FakeMaster::PrefixQuery(
    const proto::PrefixQueryRequest& r) {
  Count(rpc::PrefixQueryMethod::kId);
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckTenant(r.tenant()));
  SweepLocked();
  proto::PrefixQueryResponse resp;
  std::vector<std::pair<std::string, uint64_t>> leased;
  for (const proto::BlockKey& b : r.chain()) {
    const std::string mk = MapKey(r.tenant(), rpc::BlockObjectKey(rpc::FromProto(b)));
    auto it = objects_.find(mk);
    if (it == objects_.end() || !it->second.committed()) break;
    resp.set_matched(resp.matched() + 1);
    if (r.with_replicas()) {
      proto::BlockReplicas* br = resp.add_blocks();
      Describe(it->second, r.client_host_id(), br->mutable_object(), br->mutable_replicas());
      leased.emplace_back(mk, it->second.version);
    }
  }
  if (!leased.empty()) GrantLocked(std::move(leased), r.lease_ms(), resp.mutable_lease());
  return resp;
}

inline absl::Status FakeMaster::Evict(const std::string& key, const std::string& tenant) {
  MutexLock lock(&mu_);
  SweepLocked();
  const std::string mk = MapKey(tenant, key);
  auto it = objects_.find(mk);
  if (it == objects_.end()) return absl::NotFoundError("no such object");
  if (!it->second.committed() || it->second.leases > 0) {
    return absl::FailedPreconditionError("leased or pending objects are not evicted");
  }
  RetireLocked(mk);
  return absl::OkStatus();
}

inline void FakeMaster::ExpireWorker(const std::string& worker_id) {
  MutexLock lock(&mu_);
  DropWorkerLocked(worker_id);
}

}  // namespace mooncake::store_testing

#endif  // MOONCAKE_STORE_CLIENT_TESTING_FAKE_MASTER_IMPL_H_
