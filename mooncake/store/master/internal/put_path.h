// The two-phase put: PutStart, PutEnd, PutRevoke and their timeout.
//
// Concurrent puts of one key: the first PutStart reserves the key (a pending
// entry, invisible to reads); every other PutStart of that key gets
// ALREADY_EXISTS until that put ends (then the key is committed: still
// ALREADY_EXISTS unless the put asks to replace it) or is revoked (then the
// next PutStart wins). A pending put past its deadline, or a committed object
// past its TTL, no longer blocks a PutStart: it is retired on the spot.
//
// Replace (PutOptions.replace) of a committed key of the same tenant: the new
// put waits under ReplacementKey(key) while reads keep seeing the committed
// version; its PutEnd retires that version like a Remove (space deferred
// while leased) and moves the new one under `key`, both under the shard lock,
// so a reader sees the old version or the new one, never neither. One put per
// key at a time still holds: while a replace is pending, every other PutStart
// of the key (replace or not) is ALREADY_EXISTS, and the replace itself is
// ALREADY_EXISTS while a plain put of the key is pending. Until it commits
// both versions are charged to the tenant.
//
// A tenant with a put rate (TenantConfig::rate_bytes_per_sec) is charged
// size x replicas of it at PutStart, before any other work; over it, the
// PutStart is RESOURCE_EXHAUSTED with "retry in N ms" (RateCharge below).
// Refusing instead of waiting keeps the RPC I/O thread, where PutStart runs,
// free for other tenants.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_PUT_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_PUT_PATH_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/qos/tenant_rate_limit.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/master/internal/relocation_path.h"
#include "mooncake/store/master/placement.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

// How much eviction work one PlaceWithEviction may do (PutStartWithin).
struct EvictionBudget {
  uint64_t max_victims = std::numeric_limits<uint64_t>::max();
  // A sweep of deferred frees walks every parked entry: not while more wait.
  uint64_t max_sweep_entries = std::numeric_limits<uint64_t>::max();
};

// The budget of a PutStart on an RPC I/O thread.
inline EvictionBudget InlineBudget(const master::MasterOptions& o) {
  return {.max_victims = o.inline_put_evictions, .max_sweep_entries = 1024};
}

// How a PlaceWithEviction that did not place ended short of an error.
struct PlaceOutcome {
  bool tier_busy = false;    // enough offloads in flight: the client comes back
  bool over_budget = false;  // would need more work than its EvictionBudget
  // A compaction that would make room is asked for or running on a
  // fragmented segment (relocation_path.h): the client comes back.
  bool compacting = false;
};

// Places replicas, evicting and retrying when space (not workers) is short.
// Offloads to SSD free DRAM only once the tier acknowledges: while enough are
// in flight it sets tier_busy and fails instead of evicting more, and the
// caller asks the client to come back (no handler thread waits for a tier).
// Stays within `budget`: when it would need more (another victim, or a sweep
// of more parked entries) it sets over_budget and fails (what it evicted
// stays free).
template <typename A, typename P>
absl::StatusOr<ReplicaList> PlaceWithEviction(MasterState<A, P>& s,
                                              const master::PlacementRequest& req,
                                              const EvictionBudget& budget, PlaceOutcome* out) {
  const uint64_t max_victims = budget.max_victims;
  const uint64_t need = req.size_bytes * req.replica_count;
  *out = {};
  uint64_t victims = 0;
  for (uint32_t round = 0;;) {
    bool shortfall = false;
    absl::StatusOr<ReplicaList> placed =
        master::PlaceReplicas(s.pool, req, s.options.placement, &shortfall);
    if (placed.ok() || !shortfall) return placed;
    if (round == 0 && NoteFragmentedPut(s, req)) {
      out->compacting = true;
      return placed;
    }
    const uint64_t offloading = s.offloading_bytes.load(std::memory_order_relaxed);
    if (offloading >= need) {
      out->tier_busy = true;
      return placed;
    }
    if (round >= s.options.put_eviction_rounds) return placed;
    if (victims >= max_victims ||
        s.deferred_entries.load(std::memory_order_relaxed) > budget.max_sweep_entries) {
      out->over_budget = true;
      return placed;
    }
    const int64_t now = s.Now();
    const uint64_t swept = s.SweepDeferred(now);
    const uint64_t want = (need << std::min<uint32_t>(round, 16)) - offloading;
    const master::EvictionResult got = s.Evict(want, now, {}, max_victims - victims);
    victims += got.victims;
    ++round;
    if (got.freed_bytes == 0 && swept == 0 &&
        s.offloading_bytes.load(std::memory_order_relaxed) == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(placed.status().message(),
                       "; nothing could be evicted (the rest is leased, pinned or being put)"));
    }
  }
}

inline absl::Status KeyTaken(const std::string& key, const ObjectMeta& m) {
  if (m.committed()) {
    return absl::AlreadyExistsError(absl::StrCat("key '", absl::CEscape(key),
                                                 "' is committed (version ", m.version,
                                                 "); Remove it before putting it again"));
  }
  return absl::AlreadyExistsError(absl::StrCat("key '", absl::CEscape(key), "' is being put (put ",
                                               m.put_id,
                                               "); retry after that put ends or is revoked"));
}

// The pin a put asked for, as ReserveKey records it.
struct PinChoice {
  PinLevel level = PinLevel::kNone;
  uint64_t ttl_ms = 0;  // a soft pin lapses this long after commit; 0 = never
  bool keep = false;    // replace: take the replaced object's pin (`level` is what was seen)
};

// The pin level a keep_pin put takes: the committed object's under `key` of
// `tenant` (none if there is none). ReserveKey checks it again under the lock.
template <typename A, typename P>
PinLevel PinToKeep(MasterState<A, P>& s, const std::string& key, std::string_view tenant,
                   int64_t now) {
  return s.table.With(key, [&](ObjectTable::Shard& sh) {
    const ObjectMeta* m = sh.Find(key);
    if (m == nullptr || !m->Visible(now) || m->tenant != tenant) return PinLevel::kNone;
    return m->EffectivePin(now);
  });
}

// Inserts the pending entry for `put_id` under the key, or under
// ReplacementKey(key) when it replaces a committed object; returns which.
// Retires stale occupants (a timed-out put, an expired object) first.
// A PutStart sent again (same key, same nonzero request_id) while its put
// is pending: *same_put is set to that put's id and nothing changes.
template <typename A, typename P>
absl::StatusOr<std::string> ReserveKey(MasterState<A, P>& s, const proto::PutStartRequest& req,
                                       std::string_view tenant, const PinChoice& pin,
                                       uint64_t put_id, int64_t now, uint64_t* same_put,
                                       const std::shared_ptr<master::ObjectGroup>& group) {
  const std::string& key = req.key();
  const bool replace = req.options().replace();
  std::vector<std::pair<std::string, Retired>> stale;
  std::string slot = key;
  absl::Status status = s.table.With(key, [&](ObjectTable::Shard& sh) -> absl::Status {
    // Takes a stale entry out; false if the entry is live.
    auto retire_stale = [&](decltype(sh.objects.begin()) it) {
      const ObjectMeta& m = it->second;
      const bool timed_out = !m.committed() && now > m.pending_put.get().put_deadline_ns;
      if (!timed_out && !m.Expired(now)) return false;
      std::string k = it->first.str();
      stale.emplace_back(
          std::move(k),
          s.RetireLocked(sh, it, now,
                         timed_out ? now + s.options.timed_out_put_hold_ms * kNsPerMs : 0));
      return true;
    };
    PinLevel level = pin.keep ? PinLevel::kNone : pin.level;
    int64_t pin_until_ns = 0;
    auto resent = [&](const ObjectMeta& m) {
      return !m.committed() && req.request_id() != 0 &&
             m.pending_put.get().request_id == req.request_id() && m.size_bytes == req.size_bytes();
    };
    auto it = sh.objects.find(key);
    if (it != sh.objects.end() && !retire_stale(it)) {
      const ObjectMeta& old = it->second;
      if (resent(old)) {
        *same_put = old.put_id;
        return absl::OkStatus();
      }
      if (!replace || !old.committed() || old.tenant != tenant) return KeyTaken(key, old);
      if (old.group() != nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("key '", absl::CEscape(key), "' is a member of object group '",
                         absl::CEscape(old.group()->id), "': RemoveGroup it before putting again"));
      }
      slot = master::ReplacementKey(key);
      if (pin.keep) {
        level = old.EffectivePin(now);
        if (level != PinLevel::kNone) pin_until_ns = old.pin_until_ns();
      }
    }
    if (pin.keep && level != pin.level) {
      return absl::AbortedError(absl::StrCat("key '", absl::CEscape(key),
                                             "' changed while the put started; start again"));
    }
    const std::string replacement = slot == key ? master::ReplacementKey(key) : slot;
    if (auto r = sh.objects.find(replacement); r != sh.objects.end() && !retire_stale(r)) {
      if (resent(r->second)) {
        *same_put = r->second.put_id;
        slot = replacement;
        return absl::OkStatus();
      }
      return absl::AlreadyExistsError(absl::StrCat("key '", absl::CEscape(key),
                                                   "' is being replaced (put ", r->second.put_id,
                                                   "); retry after that put ends or is revoked"));
    }
    if (group != nullptr) {
      MutexLock glock(&group->mu);
      if (group->Phase() != master::GroupPhase::kOpen) {
        return absl::FailedPreconditionError(
            absl::StrCat("object group '", absl::CEscape(group->id),
                         "' is committed or ending: it takes no more members"));
      }
      group->members.insert(slot);
      ++group->pending;
      group->deadline_ns = now + 2 * s.options.put_timeout_ms * kNsPerMs;
    }
    ObjectMeta& m = sh.objects[slot];
    if (group != nullptr) m.extras.mut().group = group;
    m.size_bytes = req.size_bytes();
    m.checksum = req.checksum();
    m.checksum_format = static_cast<uint8_t>(req.checksum_format());  // validated above
    m.put_id = put_id;
    m.tenant = std::string(tenant);
    m.pin = level;
    if (pin_until_ns != 0) m.extras.mut().pin_until_ns = pin_until_ns;
    master::PendingPut& p = m.pending_put.mut();
    p.request_id = req.request_id();
    p.pin_ttl_ms = pin.keep || level != PinLevel::kSoft ? 0 : pin.ttl_ms;
    p.put_deadline_ns = now + s.options.put_timeout_ms * kNsPerMs;
    p.ttl_ms = req.options().ttl_ms();
    if (req.has_tensor()) {
      m.extras.mut().tensor = std::make_shared<const proto::TensorMeta>(req.tensor());
    }
    return absl::OkStatus();
  });
  for (auto& [k, r] : stale) s.FinishRetired(r, k, /*erase_from_evictor=*/true);
  if (!status.ok()) return status;
  if (*same_put == 0) s.pending_puts.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

// Drops the pending entry of `put_id` if it is still there (its charge goes
// with it); a put retired meanwhile was already settled by its retirer.
template <typename A, typename P>
void AbandonPut(MasterState<A, P>& s, const std::string& key, uint64_t put_id, int64_t hold_ns) {
  const int64_t now = s.Now();
  std::optional<Retired> r;
  s.table.With(key, [&](ObjectTable::Shard& sh) {
    auto it = sh.objects.find(key);
    if (it == sh.objects.end() || it->second.committed() || it->second.put_id != put_id) return;
    r = s.RetireLocked(sh, it, now, hold_ns > 0 ? now + hold_ns : 0);
  });
  if (r.has_value()) s.FinishRetired(*r, key, /*erase_from_evictor=*/false);
  s.put_deadlines.Cancel(put_id);
}

// The open object group a put names (created on its first member), or null
// when it names none. INVALID_ARGUMENT: an id too long, a replace, a pin
// other than the group's; FAILED_PRECONDITION: the group was committed (or
// is ending), or the master logs its changes (HA: groups are not in the
// oplog).
template <typename A, typename P>
absl::StatusOr<std::shared_ptr<master::ObjectGroup>> JoinGroup(MasterState<A, P>& s,
                                                               const proto::PutOptions& po,
                                                               std::string_view tenant,
                                                               PinLevel pin) {
  if (po.group_id().empty()) return nullptr;
  if (po.group_id().size() > rpc::kMaxGroupIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("group_id of ", po.group_id().size(),
                                                   " bytes exceeds the limit of ",
                                                   rpc::kMaxGroupIdBytes));
  }
  if (po.replace()) {
    return absl::InvalidArgumentError("a replacing put cannot join an object group");
  }
  if (s.log != nullptr) {
    return absl::FailedPreconditionError(
        "object groups are not available with metadata HA (they are not in the oplog)");
  }
  bool created = false;
  std::shared_ptr<master::ObjectGroup> g =
      s.groups.OpenOrCreate(tenant, po.group_id(), static_cast<uint8_t>(pin), &created);
  if (g->pin != static_cast<uint8_t>(pin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("object group '", absl::CEscape(po.group_id()),
                     "' has members of another pin level: every member takes the same pin"));
  }
  if (created) {
    MutexLock lock(&g->mu);
    g->deadline_ns = s.Now() + 2 * s.options.put_timeout_ms * kNsPerMs;
  }
  return g;
}

// The tenant's put-rate tokens a PutStart took (TenantRateLimit::Admit),
// given back unless the put got its space: only placed puts count against
// the rate, and a PutStart run again (on the handler pool, after its inline
// try ran out of budget) or sent again is charged once.
class RateCharge {
 public:
  RateCharge(qos::TenantRateLimit& rates, std::string_view tenant, uint64_t bytes)
      : rates_(rates), tenant_(tenant), bytes_(bytes) {}
  RateCharge(const RateCharge&) = delete;
  RateCharge& operator=(const RateCharge&) = delete;
  ~RateCharge() {
    if (taken_ && !kept_) rates_.Refund(tenant_, bytes_);
  }
  absl::Status Take() {
    MC_DASSERT(!taken_, "RateCharge taken twice");
    absl::Status s = rates_.Admit(tenant_, bytes_);
    taken_ = s.ok();
    return s;
  }
  void Keep() { kept_ = true; }

 private:
  qos::TenantRateLimit& rates_;
  const std::string_view tenant_;  // lives as long as the PutStart's request
  const uint64_t bytes_;
  bool taken_ = false;
  bool kept_ = false;
};

// PutStart within `budget`. Past it, it returns nullopt having changed
// nothing but the evictions (the key is free again, the charge released),
// for the caller to run PutStart again where it may take longer (an RPC
// handler thread instead of an I/O thread).
template <typename A, typename P>
std::optional<absl::StatusOr<proto::PutStartResponse>> PutStartWithin(
    MasterState<A, P>& s, const proto::PutStartRequest& req, const EvictionBudget& budget) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(req.key()));
  RETURN_IF_ERROR(master::ValidateObjectSize(req.size_bytes(), s.options.max_object_bytes));
  if (req.has_tensor()) RETURN_IF_ERROR(master::ValidateTensorMeta(req.tensor(), req.size_bytes()));
  RETURN_IF_ERROR(master::ValidateChecksumFormat(req.checksum_format()));
  const proto::PutOptions& po = req.options();
  const uint32_t replicas =
      po.replica_count() == 0 ? s.options.default_replica_count : po.replica_count();
  if (replicas > s.options.max_replica_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica_count ", replicas, " exceeds the limit of ", s.options.max_replica_count));
  }
  if (static_cast<size_t>(po.excluded_segment_ids_size()) > rpc::kMaxExcludedSegments) {
    return absl::InvalidArgumentError(absl::StrCat(po.excluded_segment_ids_size(),
                                                   " excluded segments exceed the limit of ",
                                                   rpc::kMaxExcludedSegments));
  }
  if (static_cast<size_t>(po.preferred_segment_names_size()) > rpc::kMaxPreferredSegmentNames) {
    return absl::InvalidArgumentError(absl::StrCat(po.preferred_segment_names_size(),
                                                   " preferred segment names exceed the limit of ",
                                                   rpc::kMaxPreferredSegmentNames));
  }
  ASSIGN_OR_RETURN(PinLevel pin, master::PinFromProto(po.pin()));
  const bool keep_pin = po.replace() && po.keep_pin();
  if (pin == PinLevel::kHard && po.pin_ttl_ms() != 0 && !keep_pin) {
    return absl::InvalidArgumentError(
        "pin_ttl_ms applies to soft pins only; a hard pin lasts until the object is removed");
  }
  ASSIGN_OR_RETURN(const std::string_view tenant, s.ResolveTenant(po.tenant()));
  const uint64_t charge = req.size_bytes() * replicas;  // no overflow: both are bounded
  // Before any other work: a tenant over its rate costs one lookup.
  RateCharge rate(s.rates, tenant, charge);
  RETURN_IF_ERROR(rate.Take());
  const int64_t now = s.Now();
  if (keep_pin) pin = PinToKeep(s, req.key(), tenant, now);
  ASSIGN_OR_RETURN(std::shared_ptr<master::ObjectGroup> group, JoinGroup(s, po, tenant, pin));
  RETURN_IF_ERROR(s.AdmitCharge(tenant, pin, charge));
  const uint64_t put_id = s.ids.Next();
  uint64_t same_put = 0;
  absl::StatusOr<std::string> reserved = ReserveKey(
      s, req, tenant, PinChoice{pin, po.pin_ttl_ms(), keep_pin}, put_id, now, &same_put, group);
  if (!reserved.ok()) {
    s.ReleaseCharge(tenant, pin, charge);
    s.metrics.puts_failed->Increment();
    return reserved.status();
  }
  if (same_put != 0) {  // sent again: the first answer, once more
    s.ReleaseCharge(tenant, pin, charge);
    proto::PutStartResponse resp;
    const bool placed = s.table.With(*reserved, [&](ObjectTable::Shard& sh) {
      const ObjectMeta* m = sh.Find(*reserved);
      if (m == nullptr || m->committed() || m->put_id != same_put || m->replicas.empty()) {
        return false;
      }
      for (const Replica& r : m->replicas) master::ToProto(r, resp.add_replicas());
      return true;
    });
    if (!placed) {
      return absl::AbortedError(absl::StrCat("put ", same_put, " of key '",
                                             absl::CEscape(req.key()),
                                             "' is still being placed; start again"));
    }
    resp.set_put_id(same_put);
    resp.set_put_timeout_ms(static_cast<uint64_t>(s.options.put_timeout_ms));
    return resp;
  }
  const std::string& slot = *reserved;  // the key, or its ReplacementKey
  // Once placed, the entry carries the charge (ChargeBytes: size x replicas):
  // whoever retires it releases it. Until then it carries none, so a put that
  // fails before its replicas are set releases the charge here.
  // The deadline entry lives until the put ends (PutEnd, PutRevoke, a failed
  // placement cancel it) or its deadline passes (TimeOutPuts).
  s.put_deadlines.Push(now + s.options.put_timeout_ms * kNsPerMs, put_id, slot);
  const std::vector<std::string_view> names(po.preferred_segment_names().begin(),
                                            po.preferred_segment_names().end());
  const std::vector<uint64_t> excluded(po.excluded_segment_ids().begin(),
                                       po.excluded_segment_ids().end());
  const master::PlacementRequest preq{.size_bytes = req.size_bytes(),
                                      .replica_count = replicas,
                                      .alignment_bytes = s.options.alignment_bytes,
                                      .preferred_segment_id = po.preferred_segment_id(),
                                      .preferred_segment_names = names,
                                      .client_host_id = req.client_host_id(),
                                      .excluded_segment_ids = excluded,
                                      .seed = put_id};
  PlaceOutcome outcome;
  absl::StatusOr<ReplicaList> placed = PlaceWithEviction(s, preq, budget, &outcome);
  if (!placed.ok()) {
    AbandonPut(s, slot, put_id, 0);
    s.ReleaseCharge(tenant, pin, charge);
    if (outcome.over_budget) return std::nullopt;
    if (outcome.tier_busy || outcome.compacting) {
      proto::PutStartResponse retry;
      retry.set_retry(true);
      return retry;
    }
    s.metrics.puts_failed->Increment();
    return placed.status();
  }
  proto::PutStartResponse resp;
  const bool ours = s.table.With(slot, [&](ObjectTable::Shard& sh) {
    ObjectMeta* m = sh.Find(slot);
    if (m == nullptr || m->committed() || m->put_id != put_id) return false;
    m->replicas = *placed;
    m->replica_target = static_cast<uint8_t>(replicas);  // <= max_replica_count <= 255
    for (const Replica& r : m->replicas) master::ToProto(r, resp.add_replicas());
    s.LogSet(slot, *m, now);
    return true;
  });
  if (!ours) {
    s.FreeReplicas(*placed);
    s.ReleaseCharge(tenant, pin, charge);
    s.metrics.puts_failed->Increment();
    return absl::DeadlineExceededError(
        absl::StrCat("put ", put_id, " timed out while its space was being placed; start again"));
  }
  resp.set_put_id(put_id);
  resp.set_put_timeout_ms(static_cast<uint64_t>(s.options.put_timeout_ms));
  s.metrics.puts_started->Increment();
  rate.Keep();
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::PutStartResponse> PutStart(MasterState<A, P>& s,
                                                 const proto::PutStartRequest& req) {
  return *PutStartWithin(s, req, EvictionBudget{});
}

// What PutEnd decided under the shard lock.
struct EndOutcome {
  absl::Status status;
  proto::PutEndResponse resp;
  ReplicaList to_free;
  uint64_t released_charge = 0;
  std::string tenant;
  PinLevel pin = PinLevel::kNone;
  std::optional<Retired> retired;
  std::optional<Retired> replaced;  // the version a replace retired at commit
  uint64_t admit_charge = 0;        // > 0: newly committed
  int64_t expire_at_ns = 0;
  uint64_t version = 0;
};

inline absl::Status StalePut(const std::string& key, const ObjectMeta& m, uint64_t put_id) {
  return absl::FailedPreconditionError(
      absl::StrCat("put ", put_id, " of key '", absl::CEscape(key), "' is stale: the key is ",
                   m.committed() ? "committed by put " : "being put by put ", m.put_id));
}

// Keeps the replicas that were written and whose segment is still mounted.
template <typename A, typename P>
void CommitLocked(MasterState<A, P>& s, ObjectMeta& m, const proto::PutEndRequest& req, int64_t now,
                  EndOutcome& out) {
  ReplicaList keep;
  for (Replica& r : m.replicas) {
    const auto& failed = req.failed_segment_ids();
    const bool bad = std::find(failed.begin(), failed.end(), r.segment_id) != failed.end();
    if (bad || !s.pool.Contains(r.segment_id)) {
      out.to_free.push_back(std::move(r));
    } else {
      r.state = master::ReplicaState::kComplete;
      keep.push_back(std::move(r));
    }
  }
  out.released_charge = m.size_bytes * out.to_free.size();
  out.tenant = m.tenant;
  out.pin = m.pin;
  m.replicas = std::move(keep);
  if (m.replicas.empty()) return;  // stays pending; the caller aborts it
  m.state = master::ObjectState::kCommitted;
  m.version = s.ids.Next();
  m.last_used_ns = now;
  if (m.group() != nullptr) {
    MutexLock lock(&m.group()->mu);
    if (m.group()->pending > 0) --m.group()->pending;
  }
  s.models.Add(m, +1);
  const master::PendingPut& p = m.pending_put.get();
  if (s.options.hold_write_windows && m.tenant != s.options.default_tenant) {
    s.write_windows.Open(m.version, p.put_deadline_ns + kWriteWindowSlackNs, now);
  }
  if (p.ttl_ms != 0) {
    m.extras.mut().expire_at_ns = now + static_cast<int64_t>(p.ttl_ms) * kNsPerMs;
  } else if (m.extras.has()) {
    m.extras.mut().expire_at_ns = 0;
  }
  if (p.pin_ttl_ms != 0) {
    m.extras.mut().pin_until_ns = now + static_cast<int64_t>(p.pin_ttl_ms) * kNsPerMs;
  }
  m.pending_put.reset();  // `p` is not used past here
  master::ToProto(m, out.resp.mutable_object());
  out.admit_charge = m.ChargeBytes();
  out.expire_at_ns = m.expire_at_ns();
  out.version = m.version;
}

// The entry of put `put_id` of `key`: under the key, else its pending
// replacement; else the key's entry (or end) for the caller's error.
inline auto FindPutLocked(ObjectTable::Shard& sh, const std::string& key, uint64_t put_id) {
  auto it = sh.objects.find(key);
  if (it == sh.objects.end() || it->second.put_id != put_id) {
    auto r = sh.objects.find(master::ReplacementKey(key));
    if (r != sh.objects.end() && r->second.put_id == put_id) return r;
  }
  return it;
}

// A replace just committed under ReplacementKey(key) at `rit`: retires the
// version it replaces (if any is left) and moves the new one under `key`.
template <typename A, typename P>
void SwapInLocked(MasterState<A, P>& s, ObjectTable::Shard& sh, const std::string& key,
                  decltype(sh.objects.begin()) rit, int64_t now, EndOutcome& out) {
  MC_DASSERT(rit->second.committed(), "only a committed replacement is swapped in");
  if (auto old = sh.objects.find(key); old != sh.objects.end()) {
    MC_DASSERT(old->second.committed(), "a key being replaced has no other put pending");
    // leased: the free waits (deferred). Reported below, with the new version.
    out.replaced = s.RetireLocked(sh, old, now, 0, /*logged=*/false);
  }
  ObjectMeta moved = std::move(rit->second);
  const std::string replacement = rit->first.str();
  sh.objects.erase(rit);
  auto [it, fresh] = sh.objects.emplace(key, std::move(moved));
  MC_DASSERT(fresh, "the replaced version left the table first");
  if (s.log != nullptr) s.log->ObjectReplaced(key, replacement, it->second, now);
}

template <typename A, typename P>
absl::StatusOr<proto::PutEndResponse> PutEnd(MasterState<A, P>& s,
                                             const proto::PutEndRequest& req) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(req.key()));
  std::string_view tenant;
  if (!req.tenant().empty()) {
    ASSIGN_OR_RETURN(tenant, s.ResolveTenant(req.tenant()));
  }
  const int64_t now = s.Now();
  EndOutcome out;
  s.table.With(req.key(), [&](ObjectTable::Shard& sh) {
    auto it = FindPutLocked(sh, req.key(), req.put_id());
    if (it == sh.objects.end() || (!req.tenant().empty() && it->second.tenant != tenant)) {
      out.status = absl::NotFoundError(absl::StrCat("no put of key '", absl::CEscape(req.key()),
                                                    "' in flight: it was revoked, timed out ",
                                                    "or lost every replica; start again"));
      return;
    }
    ObjectMeta& m = it->second;
    if (m.put_id != req.put_id()) {
      out.status = StalePut(req.key(), m, req.put_id());
    } else if (m.committed()) {
      master::ToProto(m, out.resp.mutable_object());  // a retried PutEnd: same answer
    } else if (now > m.pending_put.get().put_deadline_ns) {
      out.retired = s.RetireLocked(sh, it, now, now + s.options.timed_out_put_hold_ms * kNsPerMs);
      out.status = absl::DeadlineExceededError(
          absl::StrCat("put ", req.put_id(), " passed its deadline and was revoked"));
    } else {
      CommitLocked(s, m, req, now, out);
      if (!m.committed()) {
        out.retired = s.RetireLocked(sh, it, now, 0);
        out.status = absl::AbortedError(absl::StrCat(
            "put ", req.put_id(), " aborted: no replica was written (all failed or their ",
            "workers left); nothing was stored"));
      } else if (master::IsReplacementKey(it->first)) {
        SwapInLocked(s, sh, req.key(), it, now, out);
      } else {
        s.LogSet(it->first, m, now);
      }
    }
  });
  // The put ended (committed, or retired here): its deadline entry goes.
  // Not when a stale PutEnd names another put.
  if (out.version != 0 || out.retired.has_value()) s.put_deadlines.Cancel(req.put_id());
  if (out.replaced.has_value()) {
    s.FinishRetired(*out.replaced, req.key(), /*erase_from_evictor=*/true);
    s.metrics.removes->Increment();
  }
  s.FreeReplicas(out.to_free);
  if (out.retired.has_value()) {
    s.ReleaseCharge(out.tenant, out.pin, out.released_charge);
    s.FinishRetired(*out.retired, req.key(), /*erase_from_evictor=*/false);
    s.metrics.puts_failed->Increment();
    return out.status;
  }
  if (!out.status.ok()) return out.status;
  if (out.admit_charge > 0) {
    s.ReleaseCharge(out.tenant, out.pin, out.released_charge);
    s.pending_puts.fetch_sub(1, std::memory_order_relaxed);
    s.objects.fetch_add(1, std::memory_order_relaxed);
    s.object_bytes.fetch_add(static_cast<int64_t>(out.resp.object().size_bytes()),
                             std::memory_order_relaxed);
    s.evictor.Admit(req.key(), out.admit_charge);
    if (out.expire_at_ns != 0) s.ttl_deadlines.Push(out.expire_at_ns, out.version, req.key());
    s.metrics.puts_committed->Increment();
  }
  return std::move(out.resp);
}

template <typename A, typename P>
absl::StatusOr<proto::PutRevokeResponse> PutRevoke(MasterState<A, P>& s,
                                                   const proto::PutRevokeRequest& req) {
  RETURN_IF_ERROR(rpc::ValidateObjectKey(req.key()));
  std::string_view tenant;
  if (!req.tenant().empty()) {
    ASSIGN_OR_RETURN(tenant, s.ResolveTenant(req.tenant()));
  }
  const int64_t now = s.Now();
  std::optional<Retired> r;
  absl::Status status = s.table.With(req.key(), [&](ObjectTable::Shard& sh) -> absl::Status {
    auto it = FindPutLocked(sh, req.key(), req.put_id());
    if (it == sh.objects.end() || (!req.tenant().empty() && it->second.tenant != tenant)) {
      return absl::NotFoundError(absl::StrCat("no put of key '", absl::CEscape(req.key()),
                                              "' in flight (already revoked or timed out)"));
    }
    if (it->second.put_id != req.put_id() || it->second.committed()) {
      return StalePut(req.key(), it->second, req.put_id());
    }
    r = s.RetireLocked(sh, it, now, 0);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  s.FinishRetired(*r, req.key(), /*erase_from_evictor=*/false);
  s.put_deadlines.Cancel(req.put_id());
  s.metrics.puts_revoked->Increment();
  return proto::PutRevokeResponse();
}

// Tick: revokes the puts whose deadline passed. Returns how many.
template <typename A, typename P>
uint64_t TimeOutPuts(MasterState<A, P>& s, int64_t now) {
  uint64_t n = 0;
  for (DeadlineEntry& e : s.put_deadlines.PopDue(now, s.options.tick_batch_max)) {
    std::optional<Retired> r;
    s.table.With(e.key, [&](ObjectTable::Shard& sh) {
      auto it = sh.objects.find(e.key);
      if (it == sh.objects.end() || it->second.committed() || it->second.put_id != e.id) return;
      r = s.RetireLocked(sh, it, now, now + s.options.timed_out_put_hold_ms * kNsPerMs);
    });
    if (!r.has_value()) continue;
    s.FinishRetired(*r, e.key, /*erase_from_evictor=*/false);
    s.metrics.puts_timed_out->Increment();
    ++n;
  }
  return n;
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_PUT_PATH_H_
