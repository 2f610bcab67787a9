// The oplog's records and the state they replay into.
//
// Framing (every oplog batch and snapshot as stored in etcd), little endian:
//
//   offset  size  field
//   0       4     magic "MCHA"
//   4       1     format version (1)
//   5       1     kind (1 = OplogBatch, 2 = Snapshot)
//   6       1     encoding: 0 = the proto message as is, 1 = a compress
//                   frame (mooncake/compress, ZstdCodec) of it
//   7       1     reserved, 0
//   8       8     payload length
//   16      8     StableHash64(payload, seed = kind)
//   24      n     the payload: the proto message (ha.proto), or its frame
//
// EncodeRecord compresses a message of kCompressMinBytes or more when that
// makes it smaller: the records repeat the same worker and host ids, keys
// and field tags, and etcd's commit time grows with the bytes it stores
// (docs/ha.md, "Figures"). The checksum covers the stored bytes, and the
// frame checks its chunks again as it decodes.
//
// DecodeRecord refuses (DATA_LOSS, saying what is wrong) anything else: a
// short or long record, another magic, version, kind or encoding, a checksum
// mismatch, a frame that does not decode, a payload that does not parse. A
// refused record is never applied. Records of encoding 0 are what every
// earlier build wrote; a build before encodings refuses encoding 1 (its
// reserved bytes are not 0), so masters of one cluster run one build.
//
// ReplayState is the durable state a standby keeps by applying batches in
// order (mutation_log.h says what is reported): segments, tenants and the
// object table, each object with the order of its last change. It turns into
// a Snapshot and back, and into what Master::Restore takes. With a hold
// window (a master with MasterOptions::hold_write_windows) it also keeps the
// ranges tenants' objects left within that window of the batch that says so:
// a write capability the leader issued for one may still be live, and the
// leader held the range; a new leader holds it too (RestoredHold).
//
// Thread-safety: functions are pure; ReplayState is a plain value (its owner
// locks it).
#ifndef MOONCAKE_STORE_HA_RECORDS_H_
#define MOONCAKE_STORE_HA_RECORDS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/frame.h"
#include "mooncake/compress/zstd_codec.h"
#include "mooncake/store/ha/ha.pb.h"
#include "mooncake/store/master/internal/restore_path.h"
#include "mooncake/store/master/object_meta.h"

namespace mooncake::ha {

namespace hproto = ::mooncake::store::ha::proto;

enum class RecordKind : uint8_t { kBatch = 1, kSnapshot = 2 };

inline constexpr size_t kRecordHeaderBytes = 24;
inline constexpr char kRecordMagic[4] = {'M', 'C', 'H', 'A'};
inline constexpr uint8_t kRecordVersion = 1;
enum class RecordEncoding : uint8_t { kRaw = 0, kZstdFrame = 1 };
// Messages shorter than this are stored as they are.
inline constexpr size_t kCompressMinBytes = 2048;
// The most a compressed record may decode to: protobuf's limit for one
// message (a snapshot is one record, split into chunks in etcd).
inline constexpr uint64_t kMaxDecodedRecordBytes = std::numeric_limits<int32_t>::max();

namespace records_internal {
inline void PutLe64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}
inline std::string_view KindName(RecordKind k) {
  return k == RecordKind::kBatch ? "oplog batch" : "snapshot";
}
// One codec per thread (a codec owns scratch state; committer and replay
// threads encode and decode at once).
inline compress::ZstdCodec& RecordCodec() {
  thread_local compress::ZstdCodec codec(/*level=*/1);
  return codec;
}
inline std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
}  // namespace records_internal

inline std::string EncodeRecord(RecordKind kind, const google::protobuf::Message& m) {
  std::string out(kRecordHeaderBytes, '\0');
  RecordEncoding encoding = RecordEncoding::kRaw;
  std::string raw;
  m.SerializeToString(&raw);
  if (raw.size() >= kCompressMinBytes) {
    compress::ZstdCodec& codec = records_internal::RecordCodec();
    out.resize(kRecordHeaderBytes + codec.MaxCompressedSize(raw.size()));
    const std::span<std::byte> dst(reinterpret_cast<std::byte*>(out.data()) + kRecordHeaderBytes,
                                   out.size() - kRecordHeaderBytes);
    absl::StatusOr<size_t> n =
        codec.Compress(records_internal::Bytes(raw), compress::DType::kBytes, dst);
    MC_ASSERT(n.ok(), "a record's frame exceeds MaxCompressedSize");
    if (*n < raw.size()) {
      out.resize(kRecordHeaderBytes + *n);
      encoding = RecordEncoding::kZstdFrame;
    }
  }
  if (encoding == RecordEncoding::kRaw) {
    out.resize(kRecordHeaderBytes);
    out += raw;
  }
  std::memcpy(out.data(), kRecordMagic, 4);
  out[4] = static_cast<char>(kRecordVersion);
  out[5] = static_cast<char>(kind);
  out[6] = static_cast<char>(encoding);
  const std::string_view payload = std::string_view(out).substr(kRecordHeaderBytes);
  records_internal::PutLe64(out.data() + 8, payload.size());
  records_internal::PutLe64(out.data() + 16, StableHash64(payload, static_cast<uint64_t>(kind)));
  return out;
}

inline absl::Status DecodeRecord(RecordKind kind, std::string_view bytes,
                                 google::protobuf::Message* m) {
  const std::string what(records_internal::KindName(kind));
  if (bytes.size() < kRecordHeaderBytes) {
    return absl::DataLossError(absl::StrCat(what, " record of ", bytes.size(),
                                            " bytes is shorter than its 24-byte header"));
  }
  if (std::memcmp(bytes.data(), kRecordMagic, 4) != 0) {
    return absl::DataLossError(absl::StrCat(what, " record: bad magic (not MCHA)"));
  }
  if (static_cast<uint8_t>(bytes[4]) != kRecordVersion) {
    return absl::DataLossError(absl::StrCat(what, " record: format version ",
                                            static_cast<int>(static_cast<uint8_t>(bytes[4])),
                                            " is not 1"));
  }
  if (static_cast<uint8_t>(bytes[5]) != static_cast<uint8_t>(kind)) {
    return absl::DataLossError(absl::StrCat(what, " record: kind ",
                                            static_cast<int>(static_cast<uint8_t>(bytes[5])),
                                            " is not ", static_cast<int>(kind)));
  }
  const uint8_t encoding = static_cast<uint8_t>(bytes[6]);
  if (encoding != static_cast<uint8_t>(RecordEncoding::kRaw) &&
      encoding != static_cast<uint8_t>(RecordEncoding::kZstdFrame)) {
    return absl::DataLossError(
        absl::StrCat(what, " record: unknown encoding ", static_cast<int>(encoding)));
  }
  if (bytes[7] != 0) {
    return absl::DataLossError(absl::StrCat(what, " record: reserved byte is not 0"));
  }
  const uint64_t length = records_internal::GetLe64(bytes.data() + 8);
  if (length != bytes.size() - kRecordHeaderBytes) {
    return absl::DataLossError(absl::StrCat(what, " record: header says ", length,
                                            " payload bytes, the record holds ",
                                            bytes.size() - kRecordHeaderBytes));
  }
  const std::string_view payload = bytes.substr(kRecordHeaderBytes);
  if (records_internal::GetLe64(bytes.data() + 16) !=
      StableHash64(payload, static_cast<uint64_t>(kind))) {
    return absl::DataLossError(absl::StrCat(what, " record: checksum mismatch (corrupt)"));
  }
  std::string decoded;
  std::string_view message = payload;
  if (encoding == static_cast<uint8_t>(RecordEncoding::kZstdFrame)) {
    // Parse validates the header and chunk table before anything is sized by them.
    absl::StatusOr<compress::FrameView> frame =
        compress::FrameView::Parse(records_internal::Bytes(payload));
    if (!frame.ok()) {
      return absl::DataLossError(
          absl::StrCat(what, " record: bad frame: ", frame.status().message()));
    }
    const uint64_t raw_bytes = frame->info().raw_bytes;
    if (frame->info().codec != compress::CodecId::kZstd || raw_bytes > kMaxDecodedRecordBytes) {
      return absl::DataLossError(absl::StrCat(what, " record: frame of ", raw_bytes,
                                              " bytes is not a zstd frame this build reads"));
    }
    decoded.resize(raw_bytes);
    absl::StatusOr<size_t> n = records_internal::RecordCodec().Decompress(
        records_internal::Bytes(payload),
        std::span<std::byte>(reinterpret_cast<std::byte*>(decoded.data()), decoded.size()));
    if (!n.ok() || *n != raw_bytes) {
      return absl::DataLossError(
          absl::StrCat(what, " record: frame does not decode: ",
                       n.ok() ? absl::StrCat(*n, " bytes") : std::string(n.status().message())));
    }
    message = decoded;
  }
  if (!m->ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    return absl::DataLossError(absl::StrCat(what, " record: payload does not parse"));
  }
  return absl::OkStatus();
}

// The wall clock of a deadline on a master's clock (0 stays 0).
struct ClockPair {
  int64_t mono_ns = 0;
  int64_t unix_ns = 0;
  // Both at least 1 (0 means "none": a deadline already past stays past) and
  // saturated at INT64_MAX, whatever a record holds (found by records_fuzz:
  // a far deadline overflowed the shift).
  int64_t ToUnix(int64_t mono) const { return mono == 0 ? 0 : Shift(mono, mono_ns, unix_ns); }
  int64_t ToMono(int64_t unix) const { return unix == 0 ? 0 : Shift(unix, unix_ns, mono_ns); }

 private:
  // v - from + to, clamped to [1, INT64_MAX].
  static int64_t Shift(int64_t v, int64_t from, int64_t to) {
    const __int128 r = static_cast<__int128>(v) - from + to;
    if (r < 1) return 1;
    if (r > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
    return static_cast<int64_t>(r);
  }
};

inline void ToRecord(std::string_view key, const master::ObjectMeta& m, const ClockPair& clock,
                     hproto::ObjectRecord* out) {
  out->set_key(std::string(key));
  out->set_committed(m.committed());
  out->set_size_bytes(m.size_bytes);
  out->set_checksum(m.checksum);
  out->set_checksum_format(m.checksum_format);
  out->set_put_id(m.put_id);
  out->set_request_id(m.pending_put.get().request_id);
  out->set_version(m.version);
  out->set_tenant(m.tenant);
  out->set_pin(static_cast<uint32_t>(m.pin));
  out->set_pin_ttl_ms(m.pending_put.get().pin_ttl_ms);
  out->set_pin_until_unix_ns(clock.ToUnix(m.pin_until_ns()));
  out->set_ttl_ms(m.pending_put.get().ttl_ms);
  out->set_expire_at_unix_ns(clock.ToUnix(m.expire_at_ns()));
  for (const master::Replica& r : m.replicas) {
    // A copy's destination belongs to its task, which a new leader does not
    // inherit: only the source's replicas are state.
    if (r.state == master::ReplicaState::kCopying) continue;
    hproto::ReplicaRecord* rr = out->add_replicas();
    rr->set_segment_id(r.segment_id);
    rr->set_worker_id(r.worker_id);
    rr->set_host_id(r.host_id);
    rr->set_offset(r.allocation.offset);
    rr->set_length(r.allocation.size);
    rr->set_complete(r.state == master::ReplicaState::kComplete);
  }
  if (m.tensor() != nullptr) {
    *out->mutable_tensor() = *m.tensor();
  }
}

// INVALID_ARGUMENT for a record no master could have written (a bad pin
// level, no replica, a zero size, a checksum format past 255).
inline absl::StatusOr<master::RestoredObject> FromRecord(const hproto::ObjectRecord& r,
                                                         const ClockPair& clock) {
  if (r.pin() > static_cast<uint32_t>(master::PinLevel::kHard)) {
    return absl::InvalidArgumentError(absl::StrCat("object record: pin level ", r.pin()));
  }
  if (r.size_bytes() == 0 || r.replicas().empty()) {
    return absl::InvalidArgumentError("object record without a size or a replica");
  }
  master::RestoredObject o;
  o.key = r.key();
  master::ObjectMeta& m = o.meta;
  m.state = r.committed() ? master::ObjectState::kCommitted : master::ObjectState::kPending;
  m.size_bytes = r.size_bytes();
  m.checksum = r.checksum();
  if (absl::Status st = master::ValidateChecksumFormat(r.checksum_format()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("object record: ", st.message()));
  }
  m.checksum_format = static_cast<uint8_t>(r.checksum_format());
  m.put_id = r.put_id();
  m.version = r.version();
  m.tenant = r.tenant();
  m.pin = static_cast<master::PinLevel>(r.pin());
  if (r.pin_until_unix_ns() != 0) m.extras.mut().pin_until_ns = clock.ToMono(r.pin_until_unix_ns());
  if (!r.committed()) {  // a committed object's TTL and pin are in the two *_unix_ns fields
    master::PendingPut& p = m.pending_put.mut();
    p.request_id = r.request_id();
    p.pin_ttl_ms = r.pin_ttl_ms();
    p.ttl_ms = r.ttl_ms();
  }
  if (r.expire_at_unix_ns() != 0) m.extras.mut().expire_at_ns = clock.ToMono(r.expire_at_unix_ns());
  for (const hproto::ReplicaRecord& rr : r.replicas()) {
    if (rr.length() != r.size_bytes()) {
      return absl::InvalidArgumentError("object record: a replica's length is not the size");
    }
    master::Replica rep;
    rep.segment_id = rr.segment_id();
    rep.worker_id = rr.worker_id();
    rep.host_id = rr.host_id();
    rep.allocation.offset = rr.offset();
    rep.allocation.size = rr.length();
    rep.state = rr.complete() ? master::ReplicaState::kComplete : master::ReplicaState::kAllocated;
    m.replicas.push_back(std::move(rep));
  }
  if (r.has_tensor()) {
    m.extras.mut().tensor = std::make_shared<const store::proto::TensorMeta>(r.tensor());
  }
  return o;
}

class ReplayState {
 public:
  // hold_window_ns > 0: ranges of objects of tenants other than
  // `default_tenant` that leave are held for that long after their batch's
  // time (the leader's put_timeout + 1 s).
  explicit ReplayState(int64_t hold_window_ns = 0, std::string default_tenant = "default")
      : hold_window_ns_(hold_window_ns), default_tenant_(std::move(default_tenant)) {}

  // The batch must be the next one (seq == next_seq()): FAILED_PRECONDITION
  // otherwise, and nothing is applied.
  absl::Status Apply(const hproto::OplogBatch& b) {
    if (b.seq() != next_seq_) {
      return absl::FailedPreconditionError(
          absl::StrCat("oplog gap: expected batch ", next_seq_, ", got ", b.seq()));
    }
    DropHeldBefore(b.unix_ns());
    for (const hproto::Mutation& mu : b.mutations()) ApplyOne(mu, b.unix_ns());
    next_id_ = std::max(next_id_, b.next_id());
    epoch_ = std::max(epoch_, b.epoch());
    ++next_seq_;
    ++batches_;
    return absl::OkStatus();
  }

  // `unix_ns`: the batch's time (when ranges that leave are held from).
  void ApplyOne(const hproto::Mutation& mu, int64_t unix_ns = 0) {
    switch (mu.op_case()) {
      case hproto::Mutation::kObjectSet: {
        auto& slot = objects_[mu.object_set().key()];
        if (slot.first != 0) HoldLeft(slot.second, &mu.object_set(), unix_ns);
        slot.first = ++order_;
        slot.second = mu.object_set();
        break;
      }
      case hproto::Mutation::kObjectErased:
        if (auto it = objects_.find(mu.object_erased()); it != objects_.end()) {
          HoldLeft(it->second.second, nullptr, unix_ns);
          objects_.erase(it);
        }
        break;
      case hproto::Mutation::kObjectReplaced: {
        // The pending entry's ranges become the object's: not left.
        objects_.erase(mu.object_replaced().replacement_key());
        auto& slot = objects_[mu.object_replaced().object().key()];
        if (slot.first != 0) HoldLeft(slot.second, &mu.object_replaced().object(), unix_ns);
        slot.first = ++order_;
        slot.second = mu.object_replaced().object();
        break;
      }
      case hproto::Mutation::kSegmentMounted:
        segments_[mu.segment_mounted().id()] = mu.segment_mounted().desc();
        break;
      case hproto::Mutation::kSegmentUnmounted:
        segments_.erase(mu.segment_unmounted());
        break;
      case hproto::Mutation::kTenantSet:
        tenants_[mu.tenant_set().name()] = mu.tenant_set();
        break;
      case hproto::Mutation::OP_NOT_SET:
        break;
    }
  }

  // Replaces everything with `s` (the state after every batch < s.next_seq()).
  void Load(const hproto::Snapshot& s) {
    Clear();
    next_seq_ = s.next_seq();
    next_id_ = s.next_id();
    epoch_ = s.epoch();
    for (const hproto::SegmentRecord& seg : s.segments()) segments_[seg.id()] = seg.desc();
    for (const hproto::TenantRecord& t : s.tenants()) tenants_[t.name()] = t;
    for (const hproto::ObjectRecord& o : s.objects()) objects_[o.key()] = {++order_, o};
    if (hold_window_ns_ > 0) {
      for (const hproto::HeldRange& h : s.held()) held_.push_back(h);
      std::sort(held_.begin(), held_.end(),
                [](const auto& a, const auto& b) { return a.until_unix_ns() < b.until_unix_ns(); });
      DropHeldBefore(s.unix_ns());
    }
  }

  hproto::Snapshot ToSnapshot(int64_t unix_ns) const {
    hproto::Snapshot s;
    s.set_next_seq(next_seq_);
    s.set_next_id(next_id_);
    s.set_epoch(epoch_);
    s.set_unix_ns(unix_ns);
    for (const auto& [id, desc] : segments_) {
      hproto::SegmentRecord* r = s.add_segments();
      r->set_id(id);
      *r->mutable_desc() = desc;
    }
    for (const auto& [name, t] : tenants_) *s.add_tenants() = t;
    for (const auto* e : Ordered()) *s.add_objects() = e->second.second;
    for (const hproto::HeldRange& h : held_) {
      if (h.until_unix_ns() > unix_ns) *s.add_held() = h;
    }
    return s;
  }

  // What Master::Restore takes. Records that cannot be restored are counted
  // in *bad (never applied). `holds` (may be null): the held ranges whose end
  // is after clock.unix_ns, their ends on clock's monotonic side.
  void ToRestore(const ClockPair& clock, std::vector<master::RestoredSegment>* segments,
                 std::vector<master::RestoredObject>* objects, uint64_t* bad,
                 std::vector<master::RestoredHold>* holds = nullptr) const {
    if (holds != nullptr) {
      for (const hproto::HeldRange& h : held_) {
        if (h.until_unix_ns() <= clock.unix_ns) continue;
        holds->push_back({h.segment_id(), h.offset(), h.length(), clock.ToMono(h.until_unix_ns())});
      }
    }
    for (const auto& [id, desc] : segments_) segments->push_back({id, desc});
    std::sort(segments->begin(), segments->end(),
              [](const auto& a, const auto& b) { return a.id < b.id; });
    for (const auto* e : Ordered()) {
      absl::StatusOr<master::RestoredObject> o = FromRecord(e->second.second, clock);
      if (o.ok()) {
        objects->push_back(*std::move(o));
      } else {
        ++*bad;
      }
    }
  }

  void Clear() {
    objects_.clear();
    segments_.clear();
    tenants_.clear();
    next_seq_ = 1;
    next_id_ = 1;
    epoch_ = 0;
    order_ = 0;
    held_.clear();
  }

  uint64_t next_seq() const { return next_seq_; }
  uint64_t next_id() const { return next_id_; }
  int64_t epoch() const { return epoch_; }
  uint64_t batches() const { return batches_; }
  size_t objects() const { return objects_.size(); }
  size_t segments() const { return segments_.size(); }
  const std::deque<hproto::HeldRange>& held() const { return held_; }
  const absl::flat_hash_map<std::string, hproto::TenantRecord>& tenants() const { return tenants_; }
  // For tests: the record of `key`, null if absent.
  const hproto::ObjectRecord* Find(std::string_view key) const {
    auto it = objects_.find(AbslView(key));
    return it == objects_.end() ? nullptr : &it->second.second;
  }

 private:
  using Entry = std::pair<const std::string, std::pair<uint64_t, hproto::ObjectRecord>>;

  // The ranges of `was` that `now` (null: the object left) no longer has,
  // held from `unix_ns` for the hold window (a tenant's object only).
  void HoldLeft(const hproto::ObjectRecord& was, const hproto::ObjectRecord* now, int64_t unix_ns) {
    if (hold_window_ns_ <= 0 || unix_ns <= 0 || was.tenant() == default_tenant_) return;
    for (const hproto::ReplicaRecord& r : was.replicas()) {
      const bool kept = now != nullptr &&
                        std::any_of(now->replicas().begin(), now->replicas().end(),
                                    [&](const hproto::ReplicaRecord& n) {
                                      return n.segment_id() == r.segment_id() &&
                                             n.offset() == r.offset() && n.length() == r.length();
                                    });
      if (kept || r.length() == 0) continue;
      hproto::HeldRange& h = held_.emplace_back();
      h.set_segment_id(r.segment_id());
      h.set_offset(r.offset());
      h.set_length(r.length());
      h.set_until_unix_ns(unix_ns > std::numeric_limits<int64_t>::max() - hold_window_ns_
                              ? std::numeric_limits<int64_t>::max()
                              : unix_ns + hold_window_ns_);
    }
  }

  // Forgets the held ranges that ended by `unix_ns` (ends are pushed in batch
  // order; one out of order waits behind the front, held a little longer).
  void DropHeldBefore(int64_t unix_ns) {
    while (!held_.empty() && held_.front().until_unix_ns() <= unix_ns) held_.pop_front();
  }

  std::vector<const Entry*> Ordered() const {
    std::vector<const Entry*> out;
    out.reserve(objects_.size());
    for (const Entry& e : objects_) out.push_back(&e);
    std::sort(out.begin(), out.end(),
              [](const Entry* a, const Entry* b) { return a->second.first < b->second.first; });
    return out;
  }

  absl::flat_hash_map<std::string, std::pair<uint64_t, hproto::ObjectRecord>> objects_;
  absl::flat_hash_map<uint64_t, store::proto::SegmentDescriptor> segments_;
  absl::flat_hash_map<std::string, hproto::TenantRecord> tenants_;
  uint64_t next_seq_ = 1;  // batches are numbered from 1
  uint64_t next_id_ = 1;
  int64_t epoch_ = 0;
  uint64_t order_ = 0;
  uint64_t batches_ = 0;
  int64_t hold_window_ns_ = 0;
  std::string default_tenant_;
  std::deque<hproto::HeldRange> held_;
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_RECORDS_H_
