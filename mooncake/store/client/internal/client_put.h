// ClientCore's put path; included only by client_core.h.
//
// PutMany: (1) validate, drop our cache entries, the items' PutStarts in one
// BatchPutStart; (2) every replica of every item written in one transport
// batch, straight from the caller's bytes; (3) the PutEnds in one BatchPutEnd,
// each naming the replicas whose write failed (the master commits the rest),
// or PutRevoke when every write of an item failed, so an item either commits on the replicas that
// hold its bytes or leaves nothing behind.
// IWYU pragma: private, include "mooncake/store/client.h"
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_PUT_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_PUT_H_

#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_CORE_H_
#error "include mooncake/store/client.h instead"
#endif

namespace mooncake::client_internal {

template <rpc::RpcChannel C>
std::vector<absl::Status> ClientCore<C>::WriteAll(
    std::span<const client::PutItem> items,
    const std::vector<absl::StatusOr<proto::PutStartResponse>>& starts,
    std::vector<std::vector<uint64_t>>* failed_segments) {
  std::vector<absl::Status> last(items.size());
  std::vector<transport::TransferRequest> reqs;
  std::vector<std::pair<size_t, uint64_t>> who;  // (item, segment id)
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.transfer_timeout_ms);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!starts[i].ok()) continue;
    for (const proto::Replica& rep : starts[i]->replicas()) {
      auto seg = resolver_.Resolve(rep.worker_id(), rep.segment_id(), deadline);
      if (!seg.ok() || rep.length() != items[i].value.size()) {
        (*failed_segments)[i].push_back(rep.segment_id());
        last[i] = seg.ok() ? absl::InternalError("master gave a replica of the wrong length")
                           : seg.status();
        continue;
      }
      reqs.push_back({transport::OpCode::kWrite, const_cast<char*>(items[i].value.data()),
                      seg->handle, rep.offset(), items[i].value.size(), nullptr,
                      CapabilityOf(rep)});
      who.emplace_back(i, rep.segment_id());
    }
  }
  const absl::Time started = absl::Now();
  const std::vector<absl::Status> rs = client::RunTransfers(*router_, reqs, deadline);
  ObserveLink(reqs, rs, started);
  for (size_t j = 0; j < who.size(); ++j) {
    if (rs[j].ok()) continue;
    (*failed_segments)[who[j].first].push_back(who[j].second);
    last[who[j].first] = rs[j];
    resolver_.Forget(who[j].second);
  }
  return last;
}

// PutStarts the master answered `retry` (DRAM full, offloads to SSD in
// flight) are asked again with a backoff until they get an answer or
// ssd_put_wait_ms passes.
template <rpc::RpcChannel C>
void ClientCore<C>::RetryTierBusy(const std::vector<proto::PutStartRequest>& reqs,
                                  const std::string& tenant,
                                  std::vector<absl::StatusOr<proto::PutStartResponse>>* starts) {
  const absl::Time give_up = absl::Now() + absl::Milliseconds(options_.ssd_put_wait_ms);
  absl::Duration backoff = absl::Microseconds(200);
  for (;;) {
    std::vector<size_t> busy;
    for (size_t j = 0; j < starts->size(); ++j) {
      if ((*starts)[j].ok() && (*starts)[j]->retry()) busy.push_back(j);
    }
    if (busy.empty()) return;
    Add(stats_.ssd_put_waits);
    if (absl::Now() + backoff > give_up) {
      for (const size_t j : busy) {
        (*starts)[j] = absl::ResourceExhaustedError(
            absl::StrCat("no DRAM room while older objects move to SSD; waited ",
                         options_.ssd_put_wait_ms, " ms (ClientOptions.ssd_put_wait_ms)"));
      }
      return;
    }
    absl::SleepFor(backoff);
    backoff = std::min(2 * backoff, absl::Milliseconds(5));
    std::vector<proto::PutStartRequest> again;
    for (const size_t j : busy) again.push_back(reqs[j]);
    auto answers = CallBatched<rpc::PutStartMethod, rpc::BatchPutStartMethod>(again, tenant);
    for (size_t k = 0; k < busy.size(); ++k) (*starts)[busy[k]] = std::move(answers[k]);
  }
}

template <rpc::RpcChannel C>
void ClientCore<C>::MarkSuspect(std::span<const uint64_t> segment_ids) {
  if (segment_ids.empty()) return;
  const int64_t until = NowNs() + options_.suspect_segment_ms * 1'000'000;
  MutexLock lock(&suspect_mu_);
  for (uint64_t id : segment_ids) {
    if (suspect_until_ns_.size() >= rpc::kMaxExcludedSegments && !suspect_until_ns_.contains(id)) {
      break;  // bounded: the master still places around the rest as it would anyway
    }
    suspect_until_ns_[id] = until;
  }
}

template <rpc::RpcChannel C>
std::vector<uint64_t> ClientCore<C>::SuspectSegments() {
  const int64_t now = NowNs();
  std::vector<uint64_t> out;
  MutexLock lock(&suspect_mu_);
  for (auto it = suspect_until_ns_.begin(); it != suspect_until_ns_.end();) {
    if (it->second <= now) {
      suspect_until_ns_.erase(it++);
    } else {
      out.push_back(it->first);
      ++it;
    }
  }
  MC_ASSERT(out.size() <= rpc::kMaxExcludedSegments, "MarkSuspect bounds the set");
  return out;
}

// ClientOptions::network_compression: each item that qualifies and shrinks
// is replaced by its frame, with a copy of its TensorMeta naming the codec.
// The stored bytes are the frame, so the checksum PutStart carries is over
// them (docs/client.md, "Compression on the network path").
template <rpc::RpcChannel C>
void ClientCore<C>::PackForNetwork(std::span<const client::PutItem> items,
                                   const client::PutOptions& o, PackedPuts* packed) {
  packed->items.assign(items.begin(), items.end());
  if (options_.network_compression == client::NetworkCompression::kOff) return;
  packed->frames.resize(items.size());  // sized once: the items point into them
  packed->tensors.resize(items.size());
  const double link = options_.network_link_bytes_per_s > 0
                          ? options_.network_link_bytes_per_s
                          : static_cast<double>(link_.bytes_per_s());
  for (size_t i = 0; i < items.size(); ++i) {
    const proto::TensorMeta* tensor = items[i].tensor != nullptr ? items[i].tensor : o.tensor;
    if (items[i].value.size() > options_.max_object_bytes) continue;  // refused as it is
    const std::optional<compress::DType> dtype =
        client::ShouldCompress(options_.network_compression, items[i].value.size(), tensor, link);
    if (!dtype.has_value()) continue;
    std::optional<std::string> frame = client::CompressValue(items[i].value, *dtype);
    if (!frame.has_value()) continue;  // would not shrink: stored raw
    packed->frames[i] = std::move(*frame);
    packed->tensors[i] = *tensor;
    packed->tensors[i].set_codec(client::kNetworkCodecId);
    packed->items[i].value = packed->frames[i];
    packed->items[i].tensor = &packed->tensors[i];
  }
}

template <rpc::RpcChannel C>
std::vector<absl::Status> ClientCore<C>::PutMany(std::span<const client::PutItem> raw_items,
                                                 const client::PutOptions& o) {
  PackedPuts packed;
  PackForNetwork(raw_items, o, &packed);
  const std::span<const client::PutItem> items = packed.items;
  std::vector<absl::Status> st(items.size());
  std::vector<size_t> todo(items.size());
  for (size_t i = 0; i < items.size(); ++i) todo[i] = i;
  for (int round = 1; !todo.empty(); ++round) {
    std::vector<client::PutItem> batch;
    batch.reserve(todo.size());
    for (size_t i : todo) batch.push_back(items[i]);
    std::vector<bool> dead(todo.size(), false);
    std::vector<absl::Status> r = PutRound(batch, o, &dead);
    std::vector<size_t> again;
    for (size_t k = 0; k < todo.size(); ++k) {
      st[todo[k]] = std::move(r[k]);
      if (dead[k] && round < options_.put_attempts) again.push_back(todo[k]);
    }
    todo = std::move(again);
  }
  for (size_t i = 0; i < packed.frames.size(); ++i) {
    if (!st[i].ok() || packed.frames[i].empty()) continue;
    // PutRound counted the stored bytes; bytes_written counts the value's.
    const uint64_t saved = raw_items[i].value.size() - packed.frames[i].size();
    Add(stats_.compressed_puts);
    Add(stats_.compression_saved_bytes, saved);
    Add(stats_.bytes_written, saved);
  }
  return st;
}

template <rpc::RpcChannel C>
std::vector<absl::Status> ClientCore<C>::PutRound(std::span<const client::PutItem> items,
                                                  const client::PutOptions& o,
                                                  std::vector<bool>* dead) {
  const std::string tenant = Tenant(o.tenant);
  const std::vector<uint64_t> suspects = SuspectSegments();
  std::vector<absl::Status> st(items.size());
  std::vector<proto::PutStartRequest> reqs;
  std::vector<size_t> who;
  for (size_t i = 0; i < items.size(); ++i) {
    const client::PutItem& it = items[i];
    absl::Status s = ValidateObjectKey(it.key);
    if (s.ok() && it.value.empty()) s = absl::InvalidArgumentError("empty value");
    const std::string_view group = it.group_id.empty() ? o.group_id : it.group_id;
    if (s.ok()) s = CheckGroupId(group, o.replace);
    if (s.ok() && it.value.size() > options_.max_object_bytes) {
      s = absl::InvalidArgumentError(absl::StrCat("value of ", it.value.size(),
                                                  " bytes exceeds max_object_bytes ",
                                                  options_.max_object_bytes));
    }
    if (!s.ok()) {
      st[i] = Annotate(s, "Put", it.key);
      continue;
    }
    Invalidate(tenant, it.key);
    proto::PutStartRequest& r = reqs.emplace_back();
    r.set_key(std::string(it.key));
    r.set_size_bytes(it.value.size());
    r.set_checksum(ValueChecksum(it.value.data(), it.value.size()));
    r.set_checksum_format(store::proto::CHECKSUM_XXH3_CHUNKED);
    r.mutable_options()->set_replica_count(o.replica_count);
    r.mutable_options()->set_preferred_segment_id(o.preferred_segment_id);
    r.mutable_options()->set_pin(o.pin);
    r.mutable_options()->set_ttl_ms(o.ttl_ms);
    r.mutable_options()->set_tenant(tenant);
    r.mutable_options()->set_replace(o.replace);
    r.mutable_options()->set_pin_ttl_ms(o.pin_ttl_ms);
    r.mutable_options()->set_keep_pin(o.keep_pin);
    for (const std::string& name : o.preferred_segment_names) {
      r.mutable_options()->add_preferred_segment_names(name);
    }
    for (uint64_t id : suspects) r.mutable_options()->add_excluded_segment_ids(id);
    r.mutable_options()->set_group_id(std::string(group));
    if (it.tensor != nullptr) {
      *r.mutable_tensor() = *it.tensor;
    } else if (o.tensor != nullptr) {
      *r.mutable_tensor() = *o.tensor;
    }
    r.set_client_id(options_.client_id);
    r.set_client_host_id(options_.host_id);
    r.set_request_id(NextRequestId());
    who.push_back(i);
  }
  std::vector<client::PutItem> started;
  for (size_t i : who) started.push_back(items[i]);
  auto starts = CallBatched<rpc::PutStartMethod, rpc::BatchPutStartMethod>(reqs, tenant);
  RetryTierBusy(reqs, tenant, &starts);
  std::vector<std::vector<uint64_t>> failed(who.size());
  const std::vector<absl::Status> write_errors = WriteAll(started, starts, &failed);
  for (const std::vector<uint64_t>& f : failed) MarkSuspect(f);
  std::vector<proto::PutEndRequest> ends;
  std::vector<proto::PutRevokeRequest> revokes;
  std::vector<size_t> end_who;
  for (size_t j = 0; j < who.size(); ++j) {
    const size_t i = who[j];
    if (!starts[j].ok()) {
      st[i] = Annotate(starts[j].status(), "Put", items[i].key);
      continue;
    }
    if (failed[j].size() == static_cast<size_t>(starts[j]->replicas_size())) {
      proto::PutRevokeRequest& r = revokes.emplace_back();
      r.set_key(std::string(items[i].key));
      r.set_put_id(starts[j]->put_id());
      st[i] = Annotate(absl::UnavailableError(
                           absl::StrCat("every replica write failed (worker gone?); put revoked: ",
                                        write_errors[j].message())),
                       "Put", items[i].key);
      (*dead)[i] = true;
      continue;
    }
    proto::PutEndRequest& r = ends.emplace_back();
    r.set_key(std::string(items[i].key));
    r.set_put_id(starts[j]->put_id());
    r.set_tenant(tenant);
    for (uint64_t seg : failed[j]) r.add_failed_segment_ids(seg);
    end_who.push_back(i);
  }
  auto end_answers = CallBatched<rpc::PutEndMethod, rpc::BatchPutEndMethod>(ends, tenant);
  for (size_t k = 0; k < end_who.size(); ++k) {
    const size_t i = end_who[k];
    if (end_answers[k].ok()) {
      // A get of ours while the replace was pending may have cached the old version.
      if (o.replace) Invalidate(tenant, items[i].key);
      Add(stats_.bytes_written, items[i].value.size());
      if (buffers_.Contains(items[i].value.data(), items[i].value.size())) {
        Add(stats_.registered_bytes_moved, items[i].value.size());
      }
      continue;
    }
    st[i] = Annotate(end_answers[k].status(), "Put", items[i].key);
    // Unknown outcome (e.g. a timeout): revoke so nothing half-done stays.
    proto::PutRevokeRequest& r = revokes.emplace_back();
    r.set_key(std::string(items[i].key));
    r.set_put_id(ends[k].put_id());
  }
  if (!revokes.empty()) CallMany<rpc::PutRevokeMethod>(revokes);  // best effort
  return st;
}

}  // namespace mooncake::client_internal

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_CLIENT_PUT_H_
