// OplogStore: where an HA cluster's oplog and snapshots live in etcd (key
// layout in keys.h). The leader appends numbered batches and now and then a
// snapshot; standbys and a new leader replay snapshot + batches.
//
// Fencing: every write a leader makes (Append, each snapshot chunk, the
// manifest, the deletion of old chunks) is one etcd Txn that first compares
// create_revision(leader key) == epoch. A deposed leader (its key expired or
// replaced, so the create revision changed) can therefore write nothing, even
// if it has not noticed yet. TruncateBelow is not fenced: it only deletes what
// a snapshot already covers.
//
// Batches: oplog/<seq> holds the bytes of batch `seq`, written once (a second
// Append of the same seq fails). One batch must fit etcd's request limit
// (--max-request-bytes, 1.5 MiB by default; RESOURCE_EXHAUSTED otherwise).
//
// Snapshots: WriteSnapshot(epoch, next_seq, bytes) stores a state covering every
// batch < next_seq as chunks snapshot/<next_seq>/<i> of chunk_bytes (default
// 1 MiB, under the request limit), then moves snapshot/manifest to it:
//   {"next_seq": N, "chunks": C, "total_bytes": B, "crc32c": X, "epoch": E}
// and then deletes every other snapshot's chunks. The manifest moves last, so a
// reader sees the old snapshot or the new one, never a mix: ReadSnapshot reads
// the chunks as of the manifest's revision. (Rewriting a snapshot with the same
// next_seq overwrites its chunks in place; a reader may then see DATA_LOSS
// until the manifest moves; callers give each snapshot a new next_seq.)
//
// Errors: FAILED_PRECONDITION whose message contains "fenced" when the leader
// key is not `epoch`'s; ALREADY_EXISTS when a batch's seq is taken; DATA_LOSS
// for a snapshot with missing chunks, a wrong size or crc (the message says
// which), or a malformed key or manifest; what EtcdClient returns otherwise
// (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ...).
//
// Thread-safety: an immutable value; calls may run concurrently (etcd orders
// them).
#ifndef MOONCAKE_STORE_HA_OPLOG_STORE_H_
#define MOONCAKE_STORE_HA_OPLOG_STORE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/ha/etcd_client.h"
#include "mooncake/store/ha/keys.h"
#include "nlohmann/json.hpp"

namespace mooncake::ha_internal {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bytewise table; the
// snapshot's whole-value check. ("123456789" -> 0xE3069283.)
inline constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}();

inline uint32_t Crc32c(std::string_view data, uint32_t crc = 0) {
  crc = ~crc;
  for (const char ch : data) {
    crc = kCrc32cTable[(crc ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (crc >> 8);
  }
  return ~crc;
}

}  // namespace mooncake::ha_internal

namespace mooncake::ha {

struct OplogStoreOptions {
  size_t chunk_bytes = size_t{1} << 20;  // snapshot chunk size
};

class OplogStore {
 public:
  using Batch = std::pair<uint64_t, std::string>;

  // REQUIRES: ValidateClusterName(cluster).ok(); options.chunk_bytes > 0.
  OplogStore(EtcdClient etcd, std::string cluster, OplogStoreOptions options = {})
      : etcd_(std::move(etcd)), keys_(KeysFor(cluster)), options_(options) {
    MC_ASSERT(options_.chunk_bytes > 0, "snapshot chunks need bytes");
  }

  // Writes batch `seq` iff the leader key's create_revision == epoch and
  // oplog/<seq> does not exist yet, in one Txn.
  absl::Status Append(int64_t epoch, uint64_t seq, std::string_view bytes) const {
    MC_ASSERT(epoch > 0, "an epoch is a create revision");
    const std::string key = keys_.Oplog(seq);
    ASSIGN_OR_RETURN(
        EtcdTxnResult r,
        etcd_.Txn({LeaderIs(epoch), {.key = key, .target = EtcdCompare::kCreate, .number = 0}},
                  {{.kind = EtcdOp::kPut, .key = key, .value = std::string(bytes)}},
                  {{.kind = EtcdOp::kRange, .key = keys_.Leader(), .keys_only = true},
                   {.kind = EtcdOp::kRange, .key = key, .keys_only = true}}));
    if (r.succeeded) return absl::OkStatus();
    if (r.ranges.size() != 2) return absl::DataLossError("oplog append: txn answer is short");
    RETURN_IF_ERROR(Fenced(epoch, r.ranges[0], "oplog append"));
    return absl::AlreadyExistsError(absl::StrCat("oplog batch ", seq, " already exists"));
  }

  // Batches with seq >= from, ascending: at most max_batches, and no more once
  // max_bytes of values are in (but always at least one batch when any exists).
  absl::StatusOr<std::vector<Batch>> ReadFrom(uint64_t from, size_t max_batches = 256,
                                              size_t max_bytes = size_t{16} << 20) const {
    MC_ASSERT(max_batches > 0, "read at least one batch");
    // Pages of at most 16 batches keep each answer (1.5 MiB x 16, in base64)
    // well under the client's response limit.
    constexpr size_t kPageBatches = 16;
    std::vector<Batch> out;
    size_t bytes = 0;
    std::string start = keys_.Oplog(from);
    const std::string end = EtcdClient::PrefixEnd(keys_.OplogPrefix());
    while (out.size() < max_batches && (out.empty() || bytes < max_bytes)) {
      const int64_t limit = static_cast<int64_t>(std::min(kPageBatches, max_batches - out.size()));
      ASSIGN_OR_RETURN(EtcdRange page, etcd_.Range(start, end, limit));
      for (EtcdKv& kv : page.kvs) {
        const std::optional<uint64_t> seq = keys_.ParseOplogSeq(kv.key);
        if (!seq.has_value()) {
          return absl::DataLossError(absl::StrCat("oplog: malformed key \"", kv.key, "\""));
        }
        if (!out.empty() && bytes >= max_bytes) break;
        MC_DASSERT(out.empty() || out.back().first < *seq, "etcd returns keys in order");
        bytes += kv.value.size();
        out.emplace_back(*seq, std::move(kv.value));
        start = kv.key + '\0';  // the next key after this one
      }
      if (!page.more) break;
    }
    return out;
  }

  // The highest seq present; nullopt for an empty oplog.
  absl::StatusOr<std::optional<uint64_t>> LastSeq() const {
    ASSIGN_OR_RETURN(EtcdRange r,
                     etcd_.Range(keys_.OplogPrefix(), EtcdClient::PrefixEnd(keys_.OplogPrefix()),
                                 EtcdRangeOptions{.limit = 1, .keys_only = true, .descend = true}));
    if (r.kvs.empty()) return std::optional<uint64_t>();
    const std::optional<uint64_t> seq = keys_.ParseOplogSeq(r.kvs[0].key);
    if (!seq.has_value()) {
      return absl::DataLossError(absl::StrCat("oplog: malformed key \"", r.kvs[0].key, "\""));
    }
    return std::optional<uint64_t>(*seq);
  }

  // Deletes every batch with seq >= `seq`, iff the leader key is still
  // `epoch`'s (one fenced Txn). A new leader calls it for the batches after
  // the first hole it found: its predecessor stored them out of order and
  // died before the hole was filled, so none of them was acknowledged.
  absl::Status DiscardFrom(int64_t epoch, uint64_t seq) const {
    MC_ASSERT(epoch > 0, "an epoch is a create revision");
    ASSIGN_OR_RETURN(
        EtcdTxnResult r,
        etcd_.Txn({LeaderIs(epoch)},
                  {{.kind = EtcdOp::kDeleteRange,
                    .key = keys_.Oplog(seq),
                    .range_end = EtcdClient::PrefixEnd(keys_.OplogPrefix())}},
                  {{.kind = EtcdOp::kRange, .key = keys_.Leader(), .keys_only = true}}));
    if (r.succeeded) return absl::OkStatus();
    if (r.ranges.empty()) return absl::DataLossError("oplog discard: txn answer is short");
    RETURN_IF_ERROR(Fenced(epoch, r.ranges[0], "oplog discard"));
    return absl::InternalError("oplog discard: the compare failed without a fence");
  }

  // Deletes every batch with seq < `seq` (one DeleteRange).
  absl::Status TruncateBelow(uint64_t seq) const {
    if (seq == 0) return absl::OkStatus();
    return etcd_.DeleteRange(keys_.Oplog(0), keys_.Oplog(seq)).status();
  }

  // Stores `bytes` as the snapshot covering every batch < next_seq (see the
  // file comment).
  absl::Status WriteSnapshot(int64_t epoch, uint64_t next_seq, std::string_view bytes) const {
    MC_ASSERT(epoch > 0, "an epoch is a create revision");
    const size_t chunks = (bytes.size() + options_.chunk_bytes - 1) / options_.chunk_bytes;
    if (chunks > kChunkCountMax) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot of ", bytes.size(),
                                                     " bytes needs over ", kChunkCountMax,
                                                     " chunks; raise chunk_bytes"));
    }
    for (size_t i = 0; i < chunks; ++i) {
      const std::string_view chunk = bytes.substr(i * options_.chunk_bytes, options_.chunk_bytes);
      RETURN_IF_ERROR(FencedPut(epoch, keys_.SnapshotChunk(next_seq, static_cast<uint32_t>(i)),
                                chunk, "snapshot chunk"));
    }
    nlohmann::json m;
    m["next_seq"] = next_seq;
    m["chunks"] = chunks;
    m["total_bytes"] = bytes.size();
    m["crc32c"] = ha_internal::Crc32c(bytes);
    m["epoch"] = epoch;
    RETURN_IF_ERROR(FencedPut(epoch, keys_.SnapshotManifest(), m.dump(), "snapshot manifest"));
    // Every other snapshot's chunks: the directories before and after ours
    // (the manifest sorts after every directory, see keys.h).
    const std::string ours = keys_.SnapshotChunkPrefix(next_seq);
    ASSIGN_OR_RETURN(
        EtcdTxnResult r,
        etcd_.Txn({LeaderIs(epoch)},
                  {{.kind = EtcdOp::kDeleteRange, .key = keys_.SnapshotPrefix(), .range_end = ours},
                   {.kind = EtcdOp::kDeleteRange,
                    .key = EtcdClient::PrefixEnd(ours),
                    .range_end = keys_.SnapshotManifest()}},
                  {{.kind = EtcdOp::kRange, .key = keys_.Leader(), .keys_only = true}}));
    if (r.succeeded) return absl::OkStatus();
    if (r.ranges.size() != 1) return absl::DataLossError("snapshot cleanup: txn answer is short");
    return Fenced(epoch, r.ranges[0], "snapshot cleanup");
  }

  // The latest snapshot as (next_seq, bytes); nullopt when there is none.
  absl::StatusOr<std::optional<Batch>> ReadSnapshot() const {
    ASSIGN_OR_RETURN(EtcdRange mr, etcd_.Range(keys_.SnapshotManifest()));
    if (mr.kvs.empty()) return std::optional<Batch>();
    ASSIGN_OR_RETURN(Manifest m, ParseManifest(mr.kvs[0].value));
    const std::string prefix = keys_.SnapshotChunkPrefix(m.next_seq);
    const std::string end = EtcdClient::PrefixEnd(prefix);
    std::string bytes;
    bytes.reserve(m.total_bytes);
    uint64_t next_chunk = 0;
    std::string start = prefix;
    for (;;) {
      // As of the manifest's revision: a newer snapshot deleting these chunks
      // meanwhile does not disturb the read.
      ASSIGN_OR_RETURN(
          EtcdRange page,
          etcd_.Range(start, end, EtcdRangeOptions{.limit = 16, .revision = mr.revision}));
      for (EtcdKv& kv : page.kvs) {
        const std::optional<uint32_t> i = keys_.ParseSnapshotChunk(m.next_seq, kv.key);
        if (!i.has_value() || *i != next_chunk) {
          return absl::DataLossError(absl::StrCat("snapshot ", m.next_seq, ": chunk ", next_chunk,
                                                  " of ", m.chunks, " is missing (found \"", kv.key,
                                                  "\")"));
        }
        bytes += kv.value;
        ++next_chunk;
        start = kv.key + '\0';
      }
      if (!page.more || page.kvs.empty()) break;
    }
    if (next_chunk != m.chunks) {
      return absl::DataLossError(absl::StrCat("snapshot ", m.next_seq, ": ", m.chunks - next_chunk,
                                              " of ", m.chunks, " chunks missing from chunk ",
                                              next_chunk));
    }
    if (bytes.size() != m.total_bytes) {
      return absl::DataLossError(absl::StrCat("snapshot ", m.next_seq, ": ", bytes.size(),
                                              " bytes, manifest says ", m.total_bytes));
    }
    if (const uint32_t crc = ha_internal::Crc32c(bytes); crc != m.crc32c) {
      return absl::DataLossError(absl::StrCat("snapshot ", m.next_seq, ": crc32c ", crc,
                                              " does not match the manifest's ", m.crc32c));
    }
    return std::optional<Batch>(Batch{m.next_seq, std::move(bytes)});
  }

  const HaKeys& keys() const { return keys_; }

 private:
  struct Manifest {
    uint64_t next_seq = 0;
    uint64_t chunks = 0;
    uint64_t total_bytes = 0;
    uint32_t crc32c = 0;
  };

  static HaKeys KeysFor(const std::string& cluster) {
    absl::StatusOr<HaKeys> k = HaKeys::For(cluster);
    MC_ASSERT(k.ok(), "OplogStore: REQUIRES a valid cluster name");
    return *std::move(k);
  }

  EtcdCompare LeaderIs(int64_t epoch) const {
    return {.key = keys_.Leader(), .target = EtcdCompare::kCreate, .number = epoch};
  }

  // The error for a fenced txn whose failure branch read the leader key.
  absl::Status Fenced(int64_t epoch, const EtcdRange& leader, std::string_view what) const {
    if (!leader.kvs.empty() && leader.kvs[0].create_revision == epoch) return absl::OkStatus();
    const std::string holder = leader.kvs.empty()
                                   ? std::string("no leader")
                                   : absl::StrCat("leader epoch ", leader.kvs[0].create_revision);
    return absl::FailedPreconditionError(absl::StrCat(AbslView(what), ": fenced: epoch ", epoch,
                                                      " is no longer the leader (", holder, ")"));
  }

  absl::Status FencedPut(int64_t epoch, const std::string& key, std::string_view value,
                         std::string_view what) const {
    ASSIGN_OR_RETURN(
        EtcdTxnResult r,
        etcd_.Txn({LeaderIs(epoch)},
                  {{.kind = EtcdOp::kPut, .key = key, .value = std::string(value)}},
                  {{.kind = EtcdOp::kRange, .key = keys_.Leader(), .keys_only = true}}));
    if (r.succeeded) return absl::OkStatus();
    if (r.ranges.size() != 1) return absl::DataLossError("fenced put: txn answer is short");
    RETURN_IF_ERROR(Fenced(epoch, r.ranges[0], what));
    return absl::InternalError("fenced put failed with the leader key in place");
  }

  static absl::StatusOr<Manifest> ParseManifest(std::string_view text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    Manifest m;
    const auto get = [&j](const char* name, uint64_t* out) {
      const auto it = j.find(name);
      if (it == j.end() || !it->is_number_unsigned()) return false;
      *out = it->get<uint64_t>();
      return true;
    };
    uint64_t crc = 0;
    if (j.is_discarded() || !j.is_object() || !get("next_seq", &m.next_seq) ||
        !get("chunks", &m.chunks) || !get("total_bytes", &m.total_bytes) || !get("crc32c", &crc) ||
        crc > UINT32_MAX || m.chunks > kChunkCountMax) {
      return absl::DataLossError(
          absl::StrCat("snapshot manifest is malformed: ", AbslView(text.substr(0, 200))));
    }
    m.crc32c = static_cast<uint32_t>(crc);
    return m;
  }

  EtcdClient etcd_;
  HaKeys keys_;
  OplogStoreOptions options_;
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_OPLOG_STORE_H_
