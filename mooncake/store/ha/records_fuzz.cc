// Fuzzes what a standby or a restarted master reads back from etcd: the
// record framing (DecodeRecord), the batch and snapshot messages inside, and
// what ReplayState makes of them (Apply, Load, ToSnapshot, ToRestore).
//
// An input is
//   byte 0: bit 0 picks the kind (batch or snapshot); bit 1 "seals" the rest:
//           it becomes the payload of a well-formed record (header, length
//           and checksum computed here), so the proto parser and the replay
//           see the edit instead of a checksum mismatch; without it the rest
//           is taken as a whole record. Bit 2 (sealed only): the payload is
//           marked as a compress frame (encoding 1), so the frame decoder
//           sees the edit.
//   bytes 1..8 (sealed only): the clock pair's offset, as a master's
//           monotonic clock against the wall clock.
// Properties checked (ASan/UBSan also run this target):
//   - a refused record is DATA_LOSS with a message, and nothing is applied;
//   - an accepted one re-encodes to a record that decodes to the same bytes;
//   - a batch is applied only when it is the next one (seq 1 here), else
//     FAILED_PRECONDITION and the state is untouched;
//   - a snapshot of the replayed state loads into a state of the same shape;
//   - ToRestore hands out every object or counts it as bad, never both.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/base/hash.h"
#include "mooncake/store/ha/ha.pb.h"
#include "mooncake/store/ha/records.h"

namespace mooncake {
namespace {

namespace hproto = ::mooncake::store::ha::proto;
using ha::RecordKind;

[[noreturn]] void Fail(const char* why) {
  std::fprintf(stderr, "records_fuzz: %s\n", why);
  std::abort();
}

// A well-formed record around `payload` (EncodeRecord's framing, for bytes
// that need not parse).
std::string Seal(RecordKind kind, std::string_view payload,
                 ha::RecordEncoding encoding = ha::RecordEncoding::kRaw) {
  std::string out(ha::kRecordHeaderBytes, '\0');
  std::memcpy(out.data(), ha::kRecordMagic, 4);
  out[4] = static_cast<char>(ha::kRecordVersion);
  out[5] = static_cast<char>(kind);
  out[6] = static_cast<char>(encoding);
  ha::records_internal::PutLe64(out.data() + 8, payload.size());
  ha::records_internal::PutLe64(out.data() + 16,
                                StableHash64(payload, static_cast<uint64_t>(kind)));
  out.append(payload);
  return out;
}

// Ranges tenants' objects leave are held this long (a store with a token file).
constexpr int64_t kHoldWindowNs = 31'000'000'000;

void CheckShape(const ha::ReplayState& a, const ha::ReplayState& b) {
  if (a.objects() != b.objects() || a.segments() != b.segments() ||
      a.tenants().size() != b.tenants().size() || a.next_seq() != b.next_seq() ||
      a.next_id() != b.next_id() || a.epoch() != b.epoch()) {
    Fail("a snapshot of the state does not load into the same shape");
  }
}

void CheckRestore(const ha::ReplayState& s, const ha::ClockPair& clock) {
  std::vector<master::RestoredSegment> segments;
  std::vector<master::RestoredObject> objects;
  std::vector<master::RestoredHold> holds;
  uint64_t bad = 0;
  s.ToRestore(clock, &segments, &objects, &bad, &holds);
  if (segments.size() != s.segments() || objects.size() + bad != s.objects()) {
    Fail("ToRestore lost or duplicated a record");
  }
  if (holds.size() > s.held().size()) Fail("ToRestore made up a held range");
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  hproto::OplogBatch b;
  b.set_seq(1);
  b.set_epoch(7);
  b.set_unix_ns(1'700'000'000'000'000'000);
  b.set_next_id(42);
  hproto::Mutation* m = b.add_mutations();
  hproto::SegmentRecord* seg = m->mutable_segment_mounted();
  seg->set_id(3);
  seg->mutable_desc()->set_worker_id("w1");
  seg->mutable_desc()->set_size_bytes(1 << 20);
  hproto::ObjectRecord* o = b.add_mutations()->mutable_object_set();
  o->set_key(std::string("\0b0123456789abcdef", 18));
  o->set_committed(true);
  o->set_size_bytes(4096);
  o->set_tenant("t");
  o->set_expire_at_unix_ns(1'700'000'000'500'000'000);
  hproto::ReplicaRecord* r = o->add_replicas();
  r->set_segment_id(3);
  r->set_worker_id("w1");
  r->set_offset(8192);
  r->set_length(4096);
  r->set_complete(true);
  b.add_mutations()->mutable_tenant_set()->set_name("t");
  b.add_mutations()->set_object_erased("gone");
  hproto::ObjectReplaced* rep = b.add_mutations()->mutable_object_replaced();
  rep->set_replacement_key(std::string("\0rk", 3));
  *rep->mutable_object() = *o;
  rep->mutable_object()->set_key("k");
  b.add_mutations()->set_segment_unmounted(9);
  b.add_mutations()->set_object_erased("k");  // a tenant's range left: held

  ha::ReplayState st(kHoldWindowNs);
  if (!st.Apply(b).ok()) Fail("seed batch");
  const std::string snap = st.ToSnapshot(1'700'000'001'000'000'000).SerializeAsString();
  const std::string batch = b.SerializeAsString();
  const std::string clock(8, '\x10');
  // A batch large enough to be stored compressed (kCompressMinBytes), and its
  // frame alone.
  hproto::OplogBatch big;
  for (int i = 0; i < 16; ++i) big.MergeFrom(b);
  const std::string compressed = ha::EncodeRecord(RecordKind::kBatch, big);
  if (static_cast<uint8_t>(compressed[6]) != 1) Fail("seed batch not compressed");
  const std::string frame = compressed.substr(ha::kRecordHeaderBytes);
  return {
      std::string(1, '\x00') + compressed,                                     // a whole record
      std::string(1, '\x06') + clock + frame,                                  // sealed frame
      std::string(1, '\x02') + clock + batch,                                  // sealed batch
      std::string(1, '\x03') + clock + snap,                                   // sealed snapshot
      std::string(1, '\x00') + Seal(RecordKind::kBatch, batch),                // a whole record
      std::string(1, '\x01') + Seal(RecordKind::kSnapshot, snap),              // a whole record
      std::string(1, '\x00') + Seal(RecordKind::kBatch, batch).substr(0, 30),  // truncated
  };
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake;
  if (size == 0) return 0;
  const RecordKind kind = (data[0] & 1) ? RecordKind::kSnapshot : RecordKind::kBatch;
  const bool seal = (data[0] & 2) != 0;
  const ha::RecordEncoding encoding =
      (data[0] & 4) != 0 ? ha::RecordEncoding::kZstdFrame : ha::RecordEncoding::kRaw;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  ha::ClockPair clock{.mono_ns = 5'000'000'000, .unix_ns = 1'700'000'000'000'000'000};
  if (seal && rest.size() >= 8) {
    int64_t shift = 0;
    std::memcpy(&shift, rest.data(), 8);
    clock.mono_ns = shift;
    rest.remove_prefix(8);
  }
  const std::string record = seal ? Seal(kind, rest, encoding) : std::string(rest);

  hproto::OplogBatch batch;
  hproto::Snapshot snapshot;
  google::protobuf::Message* msg =
      kind == RecordKind::kBatch ? static_cast<google::protobuf::Message*>(&batch) : &snapshot;
  const absl::Status s = ha::DecodeRecord(kind, record, msg);
  if (!s.ok()) {
    if (!absl::IsDataLoss(s) || s.message().empty()) Fail("a refusal that is not DATA_LOSS");
    return 0;
  }
  // Re-encoding gives a record that decodes to the same message bytes.
  const std::string again = ha::EncodeRecord(kind, *msg);
  hproto::OplogBatch batch2;
  hproto::Snapshot snapshot2;
  google::protobuf::Message* msg2 =
      kind == RecordKind::kBatch ? static_cast<google::protobuf::Message*>(&batch2) : &snapshot2;
  if (!ha::DecodeRecord(kind, again, msg2).ok()) Fail("a re-encoded record is refused");
  if (msg2->SerializeAsString() != msg->SerializeAsString()) Fail("re-encoding changed it");

  ha::ReplayState st(kHoldWindowNs);
  if (kind == RecordKind::kBatch) {
    const absl::Status applied = st.Apply(batch);
    if (batch.seq() != 1) {
      if (!absl::IsFailedPrecondition(applied) || st.objects() != 0 || st.segments() != 0 ||
          st.next_seq() != 1) {
        Fail("an out-of-order batch changed the state");
      }
      return 0;
    }
    if (!applied.ok() || st.next_seq() != 2) Fail("the next batch was not applied");
  } else {
    st.Load(snapshot);
  }
  ha::ReplayState copy(kHoldWindowNs);
  copy.Load(st.ToSnapshot(clock.unix_ns));
  CheckShape(st, copy);
  CheckRestore(st, clock);
  return 0;
}
