// ClientCore's get path; included only by client_core.h.
//
// GetMany: (1) cache lookups, then the misses' GetReplicas in one
// BatchGetReplicas (one GetReplicas for a single miss);
// (2) every object's nearest replica read in one transport batch, checksums
// verified; (3) an object whose first read failed tries its other replicas in
// order; (4) fresh answers enter the cache (or their leases are released);
// (5) an object served from the cache that failed everywhere is dropped from
// the cache and read once more through the master.
// IWYU pragma: private, include "mooncake/store/client.h"
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_GET_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_GET_H_

#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_CORE_H_
#error "include mooncake/store/client.h instead"
#endif

namespace mooncake::client_internal {

template <rpc::RpcChannel C>
void ClientCore<C>::LookupMany(std::span<GetTarget> t, const std::string& tenant, bool bypass,
                               ResolvedList* res, std::vector<absl::Status>* st) {
  std::vector<size_t> misses;
  std::vector<proto::GetReplicasRequest> reqs;
  // A cached entry is used only if a read can still finish inside its lease.
  const int64_t min_left =
      MarginNs() + std::min<int64_t>(options_.transfer_timeout_ms, 100) * 1'000'000;
  for (size_t i = 0; i < t.size(); ++i) {
    if (absl::Status s = ValidateObjectKey(t[i].key); !s.ok()) {
      (*st)[i] = Annotate(s, "Get", t[i].key);
      continue;
    }
    uint32_t served = 0;  // reads the cache served before this miss
    if (options_.cache_enabled && !bypass) {
      if (auto hit = cache_.Lookup(tenant, t[i].key, min_left, &served); hit.has_value()) {
        Add(stats_.cache_hits);
        NoteCachedRead(tenant, t[i].key);
        SpreadRead(&*hit);
        (*res)[i] = Resolved{true, true, std::move(*hit)};
        continue;
      }
    }
    Add(stats_.cache_misses);
    proto::GetReplicasRequest& r = reqs.emplace_back();
    r.set_key(std::string(t[i].key));
    r.set_tenant(tenant);
    r.set_client_host_id(options_.host_id);
    r.set_lease_ms(options_.lease_ms);
    // Reported as they happened, or counted now.
    r.set_cached_reads(ReportingReads() ? 0 : std::min(served, rpc::kMaxCachedReads));
    misses.push_back(i);
  }
  if (misses.empty()) return;
  // Objects only on a worker's SSD are being loaded into DRAM by the master:
  // ask again (real time: the sleeps are real) until they are, or give up.
  const absl::Time give_up = absl::Now() + absl::Milliseconds(options_.ssd_load_wait_ms);
  absl::Duration backoff = absl::Microseconds(200);
  for (;;) {
    const int64_t sent_ns = NowNs();  // leases count from no earlier than this
    auto answers = CallBatched<rpc::GetReplicasMethod, rpc::BatchGetReplicasMethod>(reqs, tenant);
    std::vector<size_t> loading;
    std::vector<proto::GetReplicasRequest> again;
    for (size_t j = 0; j < misses.size(); ++j) {
      const size_t i = misses[j];
      if (!answers[j].ok()) {
        (*st)[i] = Annotate(answers[j].status(), "Get", t[i].key);
        continue;
      }
      proto::GetReplicasResponse& a = *answers[j];
      if (a.loading()) {
        loading.push_back(i);
        again.push_back(std::move(reqs[j]));
        continue;
      }
      Resolved& r = (*res)[i];
      r.have = true;
      r.obj.size_bytes = a.object().size_bytes();
      r.obj.checksum = a.object().checksum();
      r.obj.checksum_format = static_cast<uint32_t>(a.object().checksum_format());
      r.obj.version = a.object().version();
      if (a.object().has_tensor()) {
        r.obj.tensor = std::make_shared<const proto::TensorMeta>(
            std::move(*a.mutable_object()->mutable_tensor()));
      }
      r.obj.lease_id = a.lease().lease_id();
      r.obj.lease_end_ns =
          sent_ns +
          static_cast<int64_t>(std::min<uint64_t>(a.lease().expires_in_ms(), 1u << 30)) * 1'000'000;
      TakeReplicas(a.mutable_replicas(), &r.obj);
      SpreadRead(&r.obj);
    }
    if (loading.empty()) return;
    Add(stats_.ssd_load_waits);
    if (absl::Now() + backoff > give_up) {
      for (const size_t i : loading) {
        (*st)[i] = Annotate(absl::UnavailableError(absl::StrCat(
                                "still loading from a worker's SSD tier after ",
                                options_.ssd_load_wait_ms, " ms (ClientOptions.ssd_load_wait_ms)")),
                            "Get", t[i].key);
      }
      return;
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(5));
    misses = std::move(loading);
    reqs = std::move(again);
  }
}

// The complete replicas, same host first (SHM), the master's order otherwise.
template <rpc::RpcChannel C>
void ClientCore<C>::TakeReplicas(google::protobuf::RepeatedPtrField<proto::Replica>* from,
                                 CachedObject* obj) {
  std::vector<proto::Replica> complete;
  for (proto::Replica& rep : *from) {
    if (rep.state() == proto::REPLICA_COMPLETE) complete.push_back(std::move(rep));
  }
  const auto remote =
      std::stable_partition(complete.begin(), complete.end(), [&](const proto::Replica& rep) {
        auto w = rpc::ParseWorkerId(rep.worker_id());
        return w.ok() && w->host == options_.host_id;
      });
  obj->local_replicas = static_cast<uint32_t>(remote - complete.begin());
  obj->replicas = client::ReplicaOrder(std::move(complete));
}

// A read goes to the nearest replica (those on this host if any, else all)
// whose worker has the fewest bytes of this process's reads in flight, then
// the one this client loaded least lately, ties in turn by the entry's read
// count, then the master's order (client::ReadSpread says why); the others
// stay behind it in order, for the fallback.
template <rpc::RpcChannel C>
void ClientCore<C>::SpreadRead(CachedObject* obj) {
  client::ReplicaOrder& v = obj->replicas;
  if (v.empty()) return;
  const size_t n =
      obj->local_replicas > 0 ? std::min<size_t>(obj->local_replicas, v.size()) : v.size();
  absl::InlinedVector<std::string_view, 4> workers;
  for (size_t i = 0; i < n; ++i) workers.push_back(v[i].worker_id());
  const size_t pick = spread_.Choose(workers, obj->cached_reads, obj->size_bytes, NowNs());
  if (pick != 0) v.Rotate(pick, workers.size());
}

template <rpc::RpcChannel C>
absl::StatusOr<size_t> ClientCore<C>::ReadPrefixChunk(std::span<const Hash128> chain,
                                                      std::span<const client::BlockBuffer> buffers,
                                                      const std::string& tenant) {
  MC_ASSERT(chain.size() == buffers.size() && chain.size() <= rpc::kMaxChainBlocks,
            "ReadPrefixChunk: one chunk, one buffer per block");
  proto::PrefixQueryRequest req;
  req.set_tenant(tenant);
  req.set_with_replicas(true);
  req.set_client_host_id(options_.host_id);
  req.set_lease_ms(options_.lease_ms);
  for (const Hash128& block : chain) rpc::ToProto(block, req.add_chain());
  // Blocks only on a worker's SSD are being loaded: ask again until they are
  // in DRAM, or read the prefix up to the first one still loading.
  const absl::Time give_up = absl::Now() + absl::Milliseconds(options_.ssd_load_wait_ms);
  absl::Duration backoff = absl::Microseconds(200);
  int64_t sent_ns = 0;  // the lease counts from no earlier than this
  proto::PrefixQueryResponse resp;
  size_t matched = 0;
  for (;;) {
    sent_ns = NowNs();
    ASSIGN_OR_RETURN(resp, CallMaster<rpc::PrefixQueryMethod>(req));
    matched = resp.matched();
    if (matched > chain.size() || static_cast<size_t>(resp.blocks_size()) != matched) {
      return absl::InternalError(absl::StrCat("the master matched ", matched, " of ", chain.size(),
                                              " blocks with ", resp.blocks_size(),
                                              " descriptions"));
    }
    size_t ready = 0;
    while (ready < matched && !resp.blocks(static_cast<int>(ready)).loading()) ++ready;
    if (ready == matched) break;
    Add(stats_.ssd_load_waits);
    if (absl::Now() + backoff > give_up) {
      matched = ready;
      break;
    }
    if (resp.lease().lease_id() != 0) ReleaseAsync({resp.lease().lease_id()});
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(5));
  }
  std::vector<std::string> keys(matched);
  std::vector<GetTarget> targets(matched);
  ResolvedList res(matched);
  std::vector<absl::Status> st(matched);
  const int64_t lease_end_ns =
      sent_ns +
      static_cast<int64_t>(std::min<uint64_t>(resp.lease().expires_in_ms(), 1u << 30)) * 1'000'000;
  for (size_t i = 0; i < matched; ++i) {
    keys[i] = rpc::BlockObjectKey(chain[i]);
    targets[i] = GetTarget{keys[i], buffers[i].buffer, buffers[i].capacity};
    proto::BlockReplicas& b = *resp.mutable_blocks(static_cast<int>(i));
    res[i].have = true;
    res[i].obj.size_bytes = b.object().size_bytes();
    res[i].obj.checksum = b.object().checksum();
    res[i].obj.checksum_format = static_cast<uint32_t>(b.object().checksum_format());
    res[i].obj.version = b.object().version();
    if (b.object().has_tensor()) {
      res[i].obj.tensor = std::make_shared<const proto::TensorMeta>(b.object().tensor());
    }
    res[i].obj.lease_end_ns = lease_end_ns;  // lease_id stays 0: one lease for all, below
    TakeReplicas(b.mutable_replicas(), &res[i].obj);
    CheckTarget(targets[i], res[i].obj, &st[i]);
  }
  ReadAll(targets, res, &st);
  if (resp.lease().lease_id() != 0) ReleaseAsync({resp.lease().lease_id()});
  size_t read = 0;
  for (; read < matched; ++read) {
    if (absl::IsOutOfRange(st[read]) || absl::IsInvalidArgument(st[read])) {
      return Annotate(st[read], "GetPrefixInto", keys[read]);  // the caller's buffer
    }
    if (!st[read].ok()) break;  // unreadable: the usable prefix ends here
    const uint64_t bytes = ValueBytes(targets[read], res[read].obj);
    Add(stats_.bytes_read, bytes);
    if (buffers_.Contains(buffers[read].buffer, bytes)) {
      Add(stats_.registered_bytes_moved, bytes);
    }
  }
  return read;
}

template <rpc::RpcChannel C>
void ClientCore<C>::CheckTarget(GetTarget& t, const CachedObject& obj, absl::Status* st) const {
  t.staging.reset();
  t.packed = false;
  t.raw_bytes = 0;
  const bool packed = obj.tensor != nullptr && obj.tensor->codec() != 0;
  uint64_t value_bytes = obj.size_bytes;
  if (packed) {
    // Stored compressed (network_codec.h): the caller gets shape x dtype bytes.
    const std::optional<uint64_t> raw = client::RawTensorBytes(*obj.tensor);
    if (!raw.has_value()) {
      *st = absl::FailedPreconditionError(absl::StrCat(
          "Get '", absl::CEscape(AbslView(t.key)), "': stored compressed (codec ",
          obj.tensor->codec(), ") but its TensorMeta's shape x dtype gives no raw size"));
      return;
    }
    value_bytes = *raw;
  }
  if (t.owned != nullptr) {
    t.owned->resize(value_bytes);
  } else if (value_bytes > t.capacity) {
    *st = absl::OutOfRangeError(absl::StrCat(
        "GetInto '", absl::CEscape(AbslView(t.key)), "': object of ", value_bytes,
        packed ? absl::StrCat(" bytes (stored compressed in ", obj.size_bytes, ")") : " bytes",
        " does not fit the buffer of ", t.capacity));
  } else if (t.buffer == nullptr) {
    *st = absl::InvalidArgumentError("GetInto with a null buffer");
  }
  if (st->ok() && packed) {
    t.staging.reset(new char[obj.size_bytes]);  // no zero fill: the read overwrites it
    t.packed = true;
    t.raw_bytes = value_bytes;
  }
  if (st->ok() && options_.verify_checksums && !KnownChecksumFormat(obj.checksum_format)) {
    *st = absl::FailedPreconditionError(
        absl::StrCat("Get '", absl::CEscape(AbslView(t.key)), "': checksum format ",
                     obj.checksum_format, " is unknown to this client (written by a newer one?)"));
  }
}

// One replica into `dst`, checksum verified.
template <rpc::RpcChannel C>
absl::Status ClientCore<C>::ReadReplica(const CachedObject& obj, size_t r, void* dst,
                                        absl::Time deadline) {
  const proto::Replica& rep = obj.replicas[r];
  if (rep.length() != obj.size_bytes) {
    return absl::DataLossError("replica length differs from the object's size");
  }
  ASSIGN_OR_RETURN(const client::OpenedSegment seg,
                   resolver_.Resolve(rep.worker_id(), rep.segment_id(), deadline));
  absl::InlinedVector<uint64_t, 64> digests;
  if (WantsDigests(obj)) digests.assign(DigestChunkCount(obj.size_bytes), kNoDigest);
  const transport::TransferRequest req{transport::OpCode::kRead,
                                       dst,
                                       seg.handle,
                                       rep.offset(),
                                       obj.size_bytes,
                                       digests.empty() ? nullptr : digests.data(),
                                       CapabilityOf(rep)};
  absl::Status s =
      client::RunTransfers(*router_, std::span<const transport::TransferRequest>(&req, 1), deadline)
          .front();
  if (!s.ok()) {
    resolver_.Forget(rep.segment_id());
    return absl::IsDeadlineExceeded(s) ? s : absl::UnavailableError(s.message());
  }
  if (options_.verify_checksums &&
      !ChecksumMatches(obj.checksum_format, dst, obj.size_bytes, digests.data(), obj.checksum)) {
    Add(stats_.checksum_mismatches);
    return absl::DataLossError(
        absl::StrCat("replica on segment ", rep.segment_id(), " failed the checksum"));
  }
  return absl::OkStatus();
}

// Replicas [first, n) in order until one reads; the error says why all failed.
// `earlier`: how the replicas before `first` failed, if they were tried.
template <rpc::RpcChannel C>
absl::Status ClientCore<C>::ReadFrom(const CachedObject& obj, size_t first, void* dst,
                                     absl::Time deadline, absl::Status earlier) {
  absl::Status last = earlier.ok()
                          ? absl::UnavailableError("the object has no complete replica left")
                          : std::move(earlier);
  bool corrupt = absl::IsDataLoss(last);
  for (size_t r = first; r < obj.replicas.size(); ++r) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("read deadline (or lease end) passed; last error: ", last.message()));
    }
    if (r > 0) Add(stats_.replica_fallbacks);
    absl::Status s = ReadReplica(obj, r, dst, deadline);
    if (s.ok()) return s;
    corrupt |= absl::IsDataLoss(s);
    last = s;
  }
  if (corrupt) {
    return absl::DataLossError(absl::StrCat("no replica passed the checksum: ", last.message()));
  }
  if (absl::IsDeadlineExceeded(last)) return last;
  return absl::UnavailableError(
      absl::StrCat("every replica failed (worker gone?): ", last.message()));
}

// Step 2 and 3: the nearest replica of every object in one batch, then the
// others one by one for the objects whose first read failed.
template <rpc::RpcChannel C>
void ClientCore<C>::ReadAll(std::span<GetTarget> t, ResolvedList& res,
                            std::vector<absl::Status>* st) {
  // Inline: a get of a few objects allocates none of these.
  absl::InlinedVector<transport::TransferRequest, 1> reqs;
  absl::InlinedVector<size_t, 4> who;
  absl::InlinedVector<size_t, 4> first_digest;       // per request: its slots in `digests`
  absl::InlinedVector<size_t, 4> next(t.size(), 0);  // first replica to try in step 3
  absl::Time deadline = absl::InfiniteFuture();
  size_t slots = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!(*st)[i].ok() || !res[i].have) continue;
    const CachedObject& obj = res[i].obj;
    const absl::Time d = ReadDeadline(obj);
    deadline = std::min(deadline, d);
    if (obj.replicas.empty() || obj.replicas[0].length() != obj.size_bytes) continue;
    auto seg = resolver_.Resolve(obj.replicas[0].worker_id(), obj.replicas[0].segment_id(), d);
    next[i] = 1;
    if (!seg.ok()) continue;
    reqs.push_back({transport::OpCode::kRead, Destination(t[i]), seg->handle,
                    obj.replicas[0].offset(), obj.size_bytes, nullptr,
                    CapabilityOf(obj.replicas[0])});
    who.push_back(i);
    first_digest.push_back(slots);
    if (WantsDigests(obj)) slots += DigestChunkCount(obj.size_bytes);
  }
  // The transports digest each chunk as it lands (transport.h); the checks
  // below only combine those and digest what they left.
  absl::InlinedVector<uint64_t, 64> digests(slots, kNoDigest);  // 4 MiB without a heap block
  for (size_t j = 0; j < reqs.size(); ++j) {
    if (WantsDigests(res[who[j]].obj)) reqs[j].chunk_digests = &digests[first_digest[j]];
  }
  absl::InlinedVector<bool, 4> done(t.size(), false);
  absl::InlinedVector<absl::Status, 4> first_error(t.size());  // of a failed step-2 read
  const absl::Time started = absl::Now();
  std::vector<absl::Status> rs;
  {
    // In flight until the batch settles: other reads of this process choose
    // among replicas by it (client::ReadSpread).
    absl::InlinedVector<client::InFlightReads::Read, 4> flying;
    flying.reserve(who.size());
    for (size_t j = 0; j < who.size(); ++j) {
      flying.push_back({res[who[j]].obj.replicas[0].worker_id(), reqs[j].length});
    }
    const client::InFlightScope scope(&spread_.in_flight(), flying);
    rs = client::RunTransfers(*router_, reqs, deadline);
  }
  ObserveLink(reqs, rs, started);
  for (size_t j = 0; j < who.size(); ++j) {
    const size_t i = who[j];
    const CachedObject& obj = res[i].obj;
    if (!rs[j].ok()) {
      if (absl::IsDeadlineExceeded(rs[j]) && absl::Now() < ReadDeadline(obj)) {
        next[i] = 0;  // the batch's deadline was another object's: try this replica again
        continue;
      }
      resolver_.Forget(obj.replicas[0].segment_id());
      first_error[i] = rs[j];
      continue;
    }
    if (options_.verify_checksums &&
        !ChecksumMatches(obj.checksum_format, Destination(t[i]), obj.size_bytes,
                         digests.data() + first_digest[j], obj.checksum)) {
      Add(stats_.checksum_mismatches);
      first_error[i] = absl::DataLossError(absl::StrCat(
          "replica on segment ", obj.replicas[0].segment_id(), " failed the checksum"));
      continue;
    }
    done[i] = true;
  }
  for (size_t i = 0; i < t.size(); ++i) {
    if (!(*st)[i].ok() || !res[i].have || done[i]) continue;
    (*st)[i] = ReadFrom(res[i].obj, next[i], Destination(t[i]), ReadDeadline(res[i].obj),
                        std::move(first_error[i]));
  }
  DecodeStaged(t, res, st);
}

template <rpc::RpcChannel C>
void ClientCore<C>::DecodeStaged(std::span<GetTarget> t, const ResolvedList& res,
                                 std::vector<absl::Status>* st) {
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].packed || t[i].staging == nullptr || !(*st)[i].ok() || !res[i].have) continue;
    const CachedObject& obj = res[i].obj;
    MC_ASSERT(obj.tensor != nullptr && obj.tensor->codec() != 0, "only packed objects stage");
    // The stored bytes passed the object's checksum (over what is stored);
    // the frame checks each chunk's raw bytes again as it decodes.
    absl::Status s = client::DecompressValue(
        std::as_bytes(std::span<const char>(t[i].staging.get(), obj.size_bytes)),
        obj.tensor->codec(), obj.tensor->dtype(), t[i].raw_bytes,
        std::span<std::byte>(static_cast<std::byte*>(FinalDestination(t[i])), t[i].raw_bytes));
    t[i].staging.reset();
    if (s.ok()) {
      Add(stats_.decompressed_gets);
    } else {
      (*st)[i] = std::move(s);
    }
  }
}

template <rpc::RpcChannel C>
std::vector<absl::Status> ClientCore<C>::GetMany(std::span<GetTarget> t,
                                                 const client::GetOptions& o) {
  const std::string tenant = Tenant(o.tenant);
  std::vector<absl::Status> st(t.size());
  ResolvedList res(t.size());
  LookupMany(t, tenant, o.bypass_cache, &res, &st);
  for (size_t i = 0; i < t.size(); ++i) {
    if (st[i].ok() && res[i].have) CheckTarget(t[i], res[i].obj, &st[i]);
  }
  ReadAll(t, res, &st);
  std::vector<uint64_t> release;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!res[i].have) continue;
    Resolved& r = res[i];
    if (st[i].ok()) {
      t[i].size = ValueBytes(t[i], r.obj);
      t[i].tensor = r.obj.tensor;
      if (t[i].packed) {
        // The caller holds the raw tensor: describe it as such.
        auto raw = std::make_shared<proto::TensorMeta>(*r.obj.tensor);
        raw->set_codec(0);
        t[i].tensor = std::move(raw);
      }
      t[i].version = r.obj.version;
      Add(stats_.bytes_read, t[i].size);
      if (t[i].owned == nullptr && buffers_.Contains(t[i].buffer, t[i].size)) {
        Add(stats_.registered_bytes_moved, t[i].size);
      }
      if (r.from_cache) continue;
      if (options_.cache_enabled && r.obj.lease_id != 0) {
        for (uint64_t id : cache_.Insert(tenant, t[i].key, std::move(r.obj))) {
          release.push_back(id);
        }
      } else if (r.obj.lease_id != 0) {
        release.push_back(r.obj.lease_id);
      }
      continue;
    }
    if (!r.from_cache) {
      if (r.obj.lease_id != 0) release.push_back(r.obj.lease_id);
      st[i] = Annotate(st[i], "Get", t[i].key);
      continue;
    }
    // A cached answer failed on every replica: forget it, ask the master once.
    if (auto lease = cache_.Erase(tenant, t[i].key); lease.has_value()) release.push_back(*lease);
    client::GetOptions again = o;
    again.bypass_cache = true;
    st[i] = GetMany(t.subspan(i, 1), again).front();
  }
  ReleaseAsync(std::move(release));
  return st;
}

template <rpc::RpcChannel C>
std::vector<absl::Status> ClientCore<C>::RemoveMany(std::span<const std::string_view> keys,
                                                    const client::RemoveOptions& o) {
  const std::string tenant = Tenant(o.tenant);
  std::vector<absl::Status> st(keys.size());
  std::vector<proto::RemoveRequest> reqs;
  std::vector<size_t> who;
  std::vector<uint64_t> own;  // refuse_if_leased: our own leases must not refuse us
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status s = ValidateObjectKey(keys[i]); !s.ok()) {
      st[i] = Annotate(s, "Remove", keys[i]);
      continue;
    }
    // Before the master forgets it: read-your-removes.
    if (o.refuse_if_leased && !o.force) {
      if (auto lease = cache_.Erase(tenant, keys[i]); lease.has_value()) own.push_back(*lease);
    } else {
      Invalidate(tenant, keys[i]);
    }
    proto::RemoveRequest& r = reqs.emplace_back();
    r.set_key(std::string(keys[i]));
    r.set_tenant(tenant);
    r.set_force(o.force);
    r.set_refuse_if_leased(o.refuse_if_leased);
    who.push_back(i);
  }
  // Settled before the removes are sent; a lost release only means ABORTED.
  for (size_t begin = 0; begin < own.size(); begin += rpc::kMaxBatchKeys) {
    proto::ReleaseLeasesRequest rel;
    const size_t end = std::min(own.size(), begin + rpc::kMaxBatchKeys);
    for (size_t i = begin; i < end; ++i) rel.add_lease_ids(own[i]);
    CallMaster<rpc::ReleaseLeasesMethod>(rel).IgnoreError();
  }
  auto answers = CallMany<rpc::RemoveMethod>(reqs);
  for (size_t j = 0; j < who.size(); ++j) {
    // Again after: a get of ours that raced the remove may have cached it.
    Invalidate(tenant, keys[who[j]]);
    st[who[j]] = Annotate(answers[j].status(), "Remove", keys[who[j]]);
  }
  return st;
}

template <rpc::RpcChannel C>
absl::StatusOr<uint64_t> ClientCore<C>::GetSize(std::string_view key, std::string_view t) {
  RETURN_IF_ERROR(Annotate(ValidateObjectKey(key), "GetSize", key));
  const std::string tenant = Tenant(t);
  if (options_.cache_enabled) {
    if (auto hit = cache_.Lookup(tenant, key, MarginNs()); hit.has_value()) {
      return rpc::ValueBytes(hit->size_bytes, hit->tensor.get());
    }
  }
  proto::ExistsRequest req;
  req.set_key(std::string(key));
  req.set_tenant(tenant);
  auto resp = CallMaster<rpc::ExistsMethod>(req);
  if (!resp.ok()) return Annotate(resp.status(), "GetSize", key);
  if (!resp->exists()) {
    return absl::NotFoundError(
        absl::StrCat("GetSize '", absl::CEscape(AbslView(key)), "': not found"));
  }
  return resp->value_bytes() != 0 ? resp->value_bytes() : resp->size_bytes();
}

template <rpc::RpcChannel C>
absl::StatusOr<uint64_t> ClientCore<C>::RemoveAll(const client::RemoveAllOptions& o) {
  ClearCacheNow();  // our own leases must not keep our objects
  proto::RemoveAllRequest req;
  req.set_tenant(Tenant(o.tenant));
  req.set_key_regex(o.key_regex);
  req.set_force(o.force);
  uint64_t removed = 0;
  absl::Status status;
  for (;;) {
    auto resp = CallMaster<rpc::RemoveAllMethod>(req);
    if (!resp.ok()) {
      status =
          absl::Status(resp.status().code(), absl::StrCat("RemoveAll: ", resp.status().message()));
      break;
    }
    removed += resp->removed();
    if (!resp->more()) break;
    // Each answer walks at least one shard: the loop ends within shard_count calls.
    if (resp->next_shard() <= req.start_shard()) {
      status = absl::InternalError("RemoveAll: the master's walk did not advance");
      break;
    }
    req.set_start_shard(resp->next_shard());
  }
  ClearCacheNow();  // a get of ours that raced the walk may have cached a removed object
  if (!status.ok()) return status;
  return removed;
}

}  // namespace mooncake::client_internal

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_GET_H_
