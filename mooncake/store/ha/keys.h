// HaKeys: the etcd key layout of one highly available master cluster, written
// once here for every side that speaks it (the leader, standbys, clients that
// discover the leader, tools).
//
//   /mooncake/ha/<cluster>/leader                      the leader's id (its
//                                                      advertised RPC address),
//                                                      under its lease; its
//                                                      create_revision is the
//                                                      leader's epoch
//   /mooncake/ha/<cluster>/oplog/<seq>                 one oplog batch; seq is
//                                                      20 decimal digits, zero
//                                                      padded, so key order is
//                                                      seq order
//   /mooncake/ha/<cluster>/snapshot/manifest           the latest snapshot's
//                                                      manifest (JSON)
//   /mooncake/ha/<cluster>/snapshot/<seq>/<chunk>      its chunks; seq as above
//                                                      (the snapshot's
//                                                      next_seq), chunk 6 digits
//
// Cluster names: [A-Za-z0-9_.-]{1,64}, so no name is a prefix of another's
// keys. Chunk directories sort before "snapshot/manifest" ('0'-'9' < 'm').
//
// Thread-safety: values; free functions are pure.
#ifndef MOONCAKE_STORE_HA_KEYS_H_
#define MOONCAKE_STORE_HA_KEYS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"

namespace mooncake::ha {

inline constexpr size_t kClusterNameBytesMax = 64;
inline constexpr size_t kSeqDigits = 20;  // every uint64 fits
inline constexpr size_t kChunkDigits = 6;
inline constexpr uint32_t kChunkCountMax = 999'999;

// OK for a usable cluster name; INVALID_ARGUMENT naming the rule otherwise.
inline absl::Status ValidateClusterName(std::string_view cluster) {
  bool ok = !cluster.empty() && cluster.size() <= kClusterNameBytesMax;
  for (const char c : cluster) {
    ok = ok &&
         (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("HA cluster name \"", AbslView(cluster), "\" must be 1-64 of [A-Za-z0-9_.-]"));
}

struct HaKeys {
  std::string prefix;  // "/mooncake/ha/<cluster>/"

  static absl::StatusOr<HaKeys> For(std::string_view cluster) {
    if (absl::Status s = ValidateClusterName(cluster); !s.ok()) return s;
    return HaKeys{absl::StrCat("/mooncake/ha/", AbslView(cluster), "/")};
  }

  std::string Leader() const { return absl::StrCat(prefix, "leader"); }

  std::string OplogPrefix() const { return absl::StrCat(prefix, "oplog/"); }
  std::string Oplog(uint64_t seq) const {
    return absl::StrCat(OplogPrefix(), absl::StrFormat("%020u", seq));
  }
  // The seq of an oplog key; nullopt for any other key.
  std::optional<uint64_t> ParseOplogSeq(std::string_view key) const {
    const std::string p = OplogPrefix();
    if (!key.starts_with(p)) return std::nullopt;
    return ParseDigits(key.substr(p.size()), kSeqDigits);
  }

  std::string SnapshotPrefix() const { return absl::StrCat(prefix, "snapshot/"); }
  std::string SnapshotManifest() const { return absl::StrCat(SnapshotPrefix(), "manifest"); }
  // "<...>/snapshot/<next_seq>/": the chunks of the snapshot covering seq < next_seq.
  std::string SnapshotChunkPrefix(uint64_t next_seq) const {
    return absl::StrCat(SnapshotPrefix(), absl::StrFormat("%020u", next_seq), "/");
  }
  std::string SnapshotChunk(uint64_t next_seq, uint32_t chunk) const {
    MC_ASSERT(chunk <= kChunkCountMax, "chunk index over 6 digits");
    return absl::StrCat(SnapshotChunkPrefix(next_seq), absl::StrFormat("%06u", chunk));
  }
  // The chunk index of a key under SnapshotChunkPrefix(next_seq).
  std::optional<uint32_t> ParseSnapshotChunk(uint64_t next_seq, std::string_view key) const {
    const std::string p = SnapshotChunkPrefix(next_seq);
    if (!key.starts_with(p)) return std::nullopt;
    const std::optional<uint64_t> n = ParseDigits(key.substr(p.size()), kChunkDigits);
    if (!n.has_value()) return std::nullopt;
    return static_cast<uint32_t>(*n);
  }

 private:
  static std::optional<uint64_t> ParseDigits(std::string_view text, size_t digits) {
    uint64_t v = 0;
    if (text.size() != digits) return std::nullopt;
    for (const char c : text) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    }
    if (!absl::SimpleAtoi(AbslView(text), &v)) return std::nullopt;
    return v;
  }
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_KEYS_H_
