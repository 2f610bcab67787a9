// The master's vocabulary: what it knows about one object, and the checks
// every request's size and tenant pass before anything else happens (its key
// passes rpc::ValidateObjectKey, rpc/object_key.h, first).
//
// An object is a key (1..rpc::kMaxKeyBytes bytes) naming `size_bytes` bytes held
// as one or more replicas, each a range of a mounted segment on a distinct
// worker. Its life:
//
//   PutStart -> kPending (replicas kAllocated; invisible to every read)
//   PutEnd   -> kCommitted (replicas kComplete; visible; version assigned)
//   Remove / eviction / TTL / a dead worker's last replica -> gone; its space
//   is freed at once, or deferred while read leases are live (DeferredFree).
//
// A replacing put (PutOptions.replace of a committed key) is pending under
// ReplacementKey(key) beside the committed object, in the same shard
// (ShardKey); its PutEnd retires the old object like a Remove and moves the
// new one under `key` in one step under the shard lock.
//
// Ids: put ids and versions come from one counter (IdSource), so they never
// collide, and a version names one commit of one key for the life of the
// master: a key removed and put again gets a new, larger version.
//
// Thread-safety: plain values; ObjectTable (object_table.h) guards them.
#ifndef MOONCAKE_STORE_MASTER_OBJECT_META_H_
#define MOONCAKE_STORE_MASTER_OBJECT_META_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/interned_string.h"
#include "mooncake/store/master/object_group.h"
#include "mooncake/store/rpc/master.pb.h"
#include "mooncake/store/rpc/object_key.h"
#include "mooncake/store/rpc/tensor_meta.h"

namespace mooncake::master {

enum class PinLevel : uint8_t { kNone, kSoft, kHard };
enum class ObjectState : uint8_t { kPending, kCommitted };
// kCopying: the destination of a copy task (replication_path.h); like
// kAllocated in a committed object it is never readable and belongs to its
// task until the task ends.
enum class ReplicaState : uint8_t { kAllocated, kComplete, kCopying };
// The object's copy on a worker's SSD tier (tier_registry.h):
//   kNone -> kOffloading (eviction started an OFFLOAD; DRAM replicas stay
//   readable) -> kStored (the tier acknowledged the record; DRAM replicas may
//   go) -> kNone (removed, dropped for room, lost with the worker).
enum class SsdState : uint8_t { kNone, kOffloading, kStored };

// One copy of an object: `allocation` is a range of segment `segment_id`.
// In a committed object a kAllocated replica is being loaded from the SSD
// tier (a LOAD task owns its range until the task ends).
//
// The worker and host ids are interned (base/interned_string.h): every
// replica on a worker shares one copy of its ids.
struct Replica {
  uint64_t segment_id = 0;
  InternedString worker_id;
  InternedString host_id;  // the segment's host, to order replicas nearest first
  alloc::Allocation allocation;
  ReplicaState state = ReplicaState::kAllocated;
  // An extra replica added because the object is read often (hot); the
  // first to go when space is short (replication_path.h).
  bool hot_extra = false;
};

// What only a pending put needs, from its PutStart to its commit. A
// committed object (nearly every one) holds none of it: ObjectMeta keeps a
// SideBox, 8 bytes, instead of these 32.
struct PendingPut {
  uint64_t request_id = 0;      // the PutStart's request_id (0: none)
  uint64_t pin_ttl_ms = 0;      // a soft pin's pin_until_ns at commit (0 = never lapses)
  int64_t put_deadline_ns = 0;  // revoked after this
  uint64_t ttl_ms = 0;          // becomes expire_at_ns at commit
};

// What few committed objects have: a TTL, a soft pin that lapses, tensor
// metadata, a copy on an SSD tier, an object group. ObjectMeta keeps a
// SideBox, 8 bytes, instead of these 64 (docs/master_scale.md).
struct ObjectExtras {
  int64_t pin_until_ns = 0;  // a soft pin lapses at this time; 0 = never
  int64_t expire_at_ns = 0;  // 0 = never
  std::shared_ptr<const store::proto::TensorMeta> tensor;  // null: none given
  InternedString ssd_worker_id;                            // set unless ssd == kNone
  // kStored: what the copy is charged on its worker's tier (the record's size as the
  // tier reported it, else TierRegistry::ChargeFor(size_bytes)).
  uint64_t ssd_bytes = 0;
  // The object group it belongs to (object_group.h); null: none. A member is
  // visible only while its group is kVisible.
  std::shared_ptr<ObjectGroup> group;
};

// The most reads an object's hot window counts (ObjectMeta::window_reads).
inline constexpr uint32_t kMaxWindowReads = UINT16_MAX;

// A T on the heap while there is one (8 bytes inline); copies are deep.
// get() reads a default T when there is none; mut() creates one.
template <typename T>
class SideBox {
 public:
  SideBox() = default;
  SideBox(const SideBox& o) : p_(o.p_ != nullptr ? std::make_unique<T>(*o.p_) : nullptr) {}
  SideBox& operator=(const SideBox& o) {
    if (this != &o) p_ = o.p_ != nullptr ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  SideBox(SideBox&&) noexcept = default;
  SideBox& operator=(SideBox&&) noexcept = default;

  const T& get() const {
    static const T kNone;
    return p_ != nullptr ? *p_ : kNone;
  }
  T& mut() {
    if (p_ == nullptr) p_ = std::make_unique<T>();
    return *p_;
  }
  bool has() const { return p_ != nullptr; }
  void reset() { p_.reset(); }

 private:
  std::unique_ptr<T> p_;
};

// An object's replicas: most objects have one, held inline (no heap block).
using ReplicaList = absl::InlinedVector<Replica, 1>;

// std::erase_if for a ReplicaList: removes the replicas `pred` holds for, in
// order; returns how many.
template <typename Pred>
size_t EraseReplicasIf(ReplicaList& replicas, Pred pred) {
  auto it = std::remove_if(replicas.begin(), replicas.end(), pred);
  const size_t n = static_cast<size_t>(replicas.end() - it);
  replicas.erase(it, replicas.end());
  return n;
}

struct ObjectMeta {
  // Fields are ordered to pack (the master holds one per object: see
  // docs/master_scale.md); the small ones first, 16 bytes of them.
  ObjectState state = ObjectState::kPending;
  PinLevel pin = PinLevel::kNone;
  SsdState ssd = SsdState::kNone;
  // The replica count the put asked for: re-replication restores it after a
  // worker is lost (0: an object restored from a record without it = 1).
  uint8_t replica_target = 1;
  // store::proto::ChecksumFormat, as the writer gave it (0..255:
  // ValidateChecksumFormat).
  uint8_t checksum_format = 0;
  // Reads (GetReplicas and PrefixQuery hits) in the current hot window,
  // saturating at kMaxWindowReads; when that window began and the last read
  // or the commit happened are below. Drain and repair go hottest first,
  // hot-object replicas start above a threshold (at most kMaxWindowReads).
  uint16_t window_reads = 0;
  InternedString tenant;  // interned: the master's tenants are a configured set
  // Read leases granted and neither released nor swept; the object is leased
  // while lease_refs > 0 and now < lease_until_ns (the latest expiry).
  uint32_t lease_refs = 0;
  uint64_t size_bytes = 0;
  uint64_t checksum = 0;
  uint64_t put_id = 0;   // the put that created (or is creating) this object
  uint64_t version = 0;  // 0 while pending; unique across keys once committed
  ReplicaList replicas;
  SideBox<PendingPut> pending_put;  // set while pending; reset at commit
  SideBox<ObjectExtras> extras;     // made when one of its fields is set
  int64_t lease_until_ns = 0;
  int64_t window_start_ns = 0;
  int64_t last_used_ns = 0;

  bool committed() const { return state == ObjectState::kCommitted; }
  bool Leased(int64_t now_ns) const { return lease_refs > 0 && now_ns < lease_until_ns; }
  // The rarely set fields, read (a default ObjectExtras when none is set).
  int64_t expire_at_ns() const { return extras.get().expire_at_ns; }
  int64_t pin_until_ns() const { return extras.get().pin_until_ns; }
  const store::proto::TensorMeta* tensor() const { return extras.get().tensor.get(); }
  const std::shared_ptr<ObjectGroup>& group() const { return extras.get().group; }
  const InternedString& ssd_worker_id() const { return extras.get().ssd_worker_id; }
  uint64_t ssd_bytes() const { return extras.get().ssd_bytes; }
  // No SSD copy any more (ssd kNone, its worker and charge cleared).
  void ForgetSsdCopy() {
    ssd = SsdState::kNone;
    if (extras.has()) {
      extras.mut().ssd_worker_id.clear();
      extras.mut().ssd_bytes = 0;
    }
  }
  bool Expired(int64_t now_ns) const {
    const int64_t at = expire_at_ns();
    return at != 0 && now_ns >= at;
  }
  // What reads see: committed, not past its TTL, and in no group or a
  // committed one.
  bool Visible(int64_t now_ns) const {
    return committed() && !Expired(now_ns) &&
           (group() == nullptr || group()->Phase() == GroupPhase::kVisible);
  }
  // The pin eviction and Remove honour now: a soft pin past pin_until_ns is none.
  PinLevel EffectivePin(int64_t now_ns) const {
    if (pin == PinLevel::kSoft && pin_until_ns() != 0 && now_ns >= pin_until_ns()) {
      return PinLevel::kNone;
    }
    return pin;
  }
  // Bytes of segment space the object holds (and its tenant is charged).
  uint64_t ChargeBytes() const { return size_bytes * replicas.size(); }
  // A committed object whose DRAM copy is being loaded from the SSD tier.
  bool Loading() const {
    return committed() && std::any_of(replicas.begin(), replicas.end(), [](const Replica& r) {
             return r.state == ReplicaState::kAllocated;
           });
  }
  // A copy task is filling a replica of this object.
  bool Copying() const {
    return std::any_of(replicas.begin(), replicas.end(),
                       [](const Replica& r) { return r.state == ReplicaState::kCopying; });
  }
  size_t CompleteCount() const {
    return static_cast<size_t>(
        std::count_if(replicas.begin(), replicas.end(),
                      [](const Replica& r) { return r.state == ReplicaState::kComplete; }));
  }
  bool HasComplete() const {
    return std::any_of(replicas.begin(), replicas.end(),
                       [](const Replica& r) { return r.state == ReplicaState::kComplete; });
  }
};

// The space of an object that left the table while something still needed
// its bytes: read leases, or (a timed-out put) a writer that may still be
// writing. Freed once now >= hold_until_ns and either no lease is left or the
// last lease expired.
struct DeferredFree {
  std::string key;
  ReplicaList replicas;
  uint32_t lease_refs = 0;
  int64_t lease_until_ns = 0;
  int64_t hold_until_ns = 0;

  bool Due(int64_t now_ns) const {
    return now_ns >= hold_until_ns && (lease_refs == 0 || now_ns >= lease_until_ns);
  }
};

// Put ids and versions. Starts at 1 (0 means "none" on the wire).
class IdSource {
 public:
  uint64_t Next() {
    // relaxed: only uniqueness matters; the ids publish no memory.
    return next_.fetch_add(1, std::memory_order_relaxed);
  }
  // Ids below `next` are never handed out again (a master restored from
  // another's log continues after its ids).
  void AdvanceTo(uint64_t next) {
    uint64_t cur = next_.load(std::memory_order_relaxed);
    while (cur < next && !next_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
    }
  }
  uint64_t Peek() const { return next_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> next_{1};
};

// ---- Input validation ------------------------------------------------------

// Where a replacing put of `key` waits for its PutEnd: 0x00 'r' + key. No
// request names such a key (rpc::ValidateObjectKey refuses it), so it never
// meets a client's key; ShardKey puts it in `key`'s shard.
inline constexpr std::string_view kReplacementPrefix("\0r", 2);
static_assert(kReplacementPrefix[0] == '\0' &&
                  kReplacementPrefix[1] != rpc::kBlockObjectKeyPrefix[1],
              "replacement keys must be keys no request may name");
inline std::string ReplacementKey(std::string_view key) {
  std::string out(kReplacementPrefix);
  out.append(key);
  return out;
}
inline bool IsReplacementKey(std::string_view key) { return key.starts_with(kReplacementPrefix); }
// The part of a table key that chooses its shard: the client's key.
inline std::string_view ShardKey(std::string_view key) {
  return IsReplacementKey(key) ? key.substr(kReplacementPrefix.size()) : key;
}

// The largest checksum format a put may name (ObjectMeta keeps it in a byte).
inline constexpr int kMaxChecksumFormat = UINT8_MAX;

// A put's checksum format: 0..kMaxChecksumFormat. A format this build does
// not know is kept as the writer gave it (a newer client's), for readers and
// the SSD tier to verify or refuse. INVALID_ARGUMENT outside that range.
inline absl::Status ValidateChecksumFormat(int64_t format) {
  if (format < 0 || format > kMaxChecksumFormat) {
    return absl::InvalidArgumentError(absl::StrCat("unknown checksum_format ", format,
                                                   " (formats are 0..", kMaxChecksumFormat, ")"));
  }
  return absl::OkStatus();
}

inline absl::Status ValidateObjectSize(uint64_t size_bytes, uint64_t max_object_bytes) {
  if (size_bytes == 0)
    return absl::InvalidArgumentError("object size is 0; values must be >= 1 byte");
  if (size_bytes > max_object_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "object of ", size_bytes, " bytes exceeds the limit of ", max_object_bytes, " bytes"));
  }
  return absl::OkStatus();
}

// A put's TensorMeta against its size: a known dtype; a shape (when given)
// whose element count x the dtype's bytes is the object's size, unless the
// value is stored compressed (codec != 0); a layer range begin <= end; a TP
// rank below the TP size. INVALID_ARGUMENT naming the field otherwise.
inline absl::Status ValidateTensorMeta(const store::proto::TensorMeta& t, uint64_t size_bytes) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("TensorMeta: ", parts...));
  };
  const uint64_t elem = rpc::DTypeBytes(t.dtype());
  if (t.dtype() != store::proto::DTYPE_UNSPECIFIED && elem == 0) {
    return bad("unknown dtype ", static_cast<int>(t.dtype()));
  }
  if (t.shape_size() > 0 && t.codec() == 0) {
    if (elem == 0) return bad("a shape needs a dtype");
    const std::optional<uint64_t> bytes = rpc::TensorBytes(t);
    if (!bytes.has_value()) return bad("shape overflows 64 bits");
    if (*bytes != size_bytes) {
      std::string dims;
      for (const uint64_t d : t.shape()) absl::StrAppend(&dims, dims.empty() ? "" : "x", d);
      return bad("shape ", dims, " x ", elem, " bytes = ", *bytes, " bytes, but the object is ",
                 size_bytes, " bytes");
    }
  }
  if (t.layer_end() < t.layer_begin()) {
    return bad("layer_end ", t.layer_end(), " < layer_begin ", t.layer_begin());
  }
  if ((t.tp_size() > 0 || t.tp_rank() > 0) && t.tp_rank() >= t.tp_size()) {
    return bad("tp_rank ", t.tp_rank(), " is not below tp_size ", t.tp_size());
  }
  return absl::OkStatus();
}

inline absl::StatusOr<PinLevel> PinFromProto(store::proto::PinLevel pin) {
  switch (pin) {
    case store::proto::PIN_NONE:
      return PinLevel::kNone;
    case store::proto::PIN_SOFT:
      return PinLevel::kSoft;
    case store::proto::PIN_HARD:
      return PinLevel::kHard;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown pin level ", static_cast<int>(pin)));
  }
}

// Fills the wire form of an object's description.
inline void ToProto(const ObjectMeta& meta, store::proto::ObjectInfo* out) {
  MC_DASSERT(meta.committed(), "only committed objects are described");
  out->set_size_bytes(meta.size_bytes);
  out->set_checksum(meta.checksum);
  out->set_checksum_format(static_cast<store::proto::ChecksumFormat>(meta.checksum_format));
  out->set_version(meta.version);
  out->set_tenant(meta.tenant);
  if (meta.tensor() != nullptr) *out->mutable_tensor() = *meta.tensor();
  if (meta.ssd == SsdState::kStored) out->set_ssd_worker_id(meta.ssd_worker_id());
}

inline void ToProto(const Replica& r, store::proto::Replica* out) {
  out->set_segment_id(r.segment_id);
  out->set_worker_id(r.worker_id);
  out->set_offset(r.allocation.offset);
  out->set_length(r.allocation.size);
  out->set_state(r.state == ReplicaState::kComplete ? store::proto::REPLICA_COMPLETE
                                                    : store::proto::REPLICA_ALLOCATED);
}

// Appends the complete replicas of `meta`, those on `client_host_id` first,
// then the others starting at the `rotate`-th (mod their count), so that
// readers who take the first replica spread over an object's workers.
inline void AppendReadableReplicas(const ObjectMeta& meta, std::string_view client_host_id,
                                   google::protobuf::RepeatedPtrField<store::proto::Replica>* out,
                                   uint32_t rotate = 0) {
  size_t remote = 0;
  for (const Replica& r : meta.replicas) {
    if (r.state != ReplicaState::kComplete) continue;
    if (!client_host_id.empty() && r.host_id == client_host_id) {
      ToProto(r, out->Add());
    } else {
      ++remote;
    }
  }
  if (remote == 0) return;
  const size_t first = rotate % remote;
  for (size_t pass = 0; pass < 2; ++pass) {
    size_t i = 0;
    for (const Replica& r : meta.replicas) {
      if (r.state != ReplicaState::kComplete) continue;
      if (!client_host_id.empty() && r.host_id == client_host_id) continue;
      if ((pass == 0) == (i >= first)) ToProto(r, out->Add());
      ++i;
    }
  }
}

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_OBJECT_META_H_
