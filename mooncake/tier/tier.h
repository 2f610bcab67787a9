// The Tier concept: one level of a storage hierarchy (DRAM, SSD) that keeps
// whole objects under byte-string keys and completes every operation through
// a callback.
//
// Semantics of the calls every model provides:
//
//   void Write(key, bytes, meta, done)
//     Stores `bytes` under `key`. The bytes are copied (or compressed) before
//     Write returns, so the caller may reuse them at once. `done(status)` runs
//     exactly once: OkStatus means the object is stored with the model's
//     durability (SsdTier: it survives a crash of the process, and of the
//     machine under Durability::kPowerLoss; see SsdTierOptions::durability);
//     AlreadyExists if `key` is present (objects are immutable:
//     Remove first to replace one); ResourceExhausted if the tier is full;
//     InvalidArgument for an empty key, a key over kMaxKeyBytes or an empty
//     object; Unavailable / DataLoss for I/O failures. Nothing is stored on
//     failure.
//   void Read(key, into, done)
//     Copies the object into `into[0, raw_bytes)`; `into` must stay valid
//     until `done` runs. done(ReadResult) on success; NotFound if absent;
//     InvalidArgument if into.size() < raw_bytes (the status says the size
//     needed); DataLoss if the stored record fails its checksum (the record is
//     then dropped and counted in TierStats::corrupt_records): a tier never
//     completes a read with wrong bytes. After any failure the contents of
//     `into` are unspecified (a model may decode into it as the bytes land
//     and find the record bad only at the end).
//   void Remove(key, done)
//     Deletes the object; OkStatus once the deletion is as durable as a
//     write and its space is free again, NotFound if absent. A read that
//     started before Remove may still see the object.
//   std::optional<ObjectInfo> Lookup(key) const, bool Contains(key) const
//     Metadata without I/O; a snapshot.
//   void ForEach(fn) const
//     Calls fn(const ObjectInfo&) for every object present when it starts;
//     fn must not call back into the tier.
//   TierStats stats() const, uint64_t capacity_bytes() const
//
// Completion callbacks run on a thread of the tier's choosing (inline in the
// calling thread, or an I/O completion thread). They must not block on
// another operation of the same tier; they may start new ones.
//
// Thread-safety: every call may run concurrently with every other call on
// one object. Each model states its complexity and durability.
#ifndef MOONCAKE_TIER_TIER_H_
#define MOONCAKE_TIER_TIER_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/compress/codec.h"

namespace mooncake::tier {

// When a tier that can compress (SsdTier) stores an object compressed.
enum class Compression : uint8_t {
  kNever,   // store raw bytes
  kAlways,  // compress every float-typed object (stored raw if it does not shrink)
  kAuto,    // compress when compress::DecideCompression says it pays at the device's bandwidth
};

// "never", "always", "auto": for flags and logs.
inline std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNever:
      return "never";
    case Compression::kAlways:
      return "always";
    case Compression::kAuto:
      return "auto";
  }
  return "unknown";
}

inline std::optional<Compression> ParseCompression(std::string_view name) {
  for (Compression c : {Compression::kNever, Compression::kAlways, Compression::kAuto}) {
    if (name == CompressionName(c)) return c;
  }
  return std::nullopt;
}

// Longest key a tier accepts (it is stored in each SSD record header block).
inline constexpr size_t kMaxKeyBytes = 1024;

// What a writer says about an object's bytes. Stored with the object.
struct ObjectMeta {
  // How to read the bytes; float types let a tier compress them by byte plane.
  compress::DType dtype = compress::DType::kBytes;
  // Opaque to the tier (a layout id, a tensor-shape handle, a tenant).
  uint64_t user_tag = 0;

  friend bool operator==(const ObjectMeta&, const ObjectMeta&) = default;
};

// One object as a tier holds it.
struct ObjectInfo {
  std::string key;
  uint64_t raw_bytes = 0;     // the object's size as written
  uint64_t stored_bytes = 0;  // bytes the tier spends on it (compressed, headers, padding)
  ObjectMeta meta;
  bool compressed = false;
};

struct ReadResult {
  uint64_t raw_bytes = 0;
  ObjectMeta meta;
};

// Counters since the tier was opened; a snapshot.
struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // space held by objects, headers and padding included
  uint64_t objects = 0;
  uint64_t raw_bytes = 0;  // sum of ObjectInfo::raw_bytes
  uint64_t writes = 0;     // acknowledged writes
  uint64_t write_failures = 0;
  uint64_t reads = 0;  // completed reads (hits)
  uint64_t read_misses = 0;
  uint64_t removes = 0;
  uint64_t bytes_written = 0;  // raw bytes of acknowledged writes
  uint64_t bytes_read = 0;     // raw bytes returned by reads
  uint64_t compressed_writes = 0;
  uint64_t corrupt_records = 0;  // records that failed a checksum, skipped
  uint64_t io_errors = 0;        // failed I/O operations (injected or real)
  uint64_t syncs = 0;            // durability barriers issued (fdatasync)
  uint64_t recovered_objects = 0;
};

using WriteDone = absl::AnyInvocable<void(absl::Status)>;
using ReadDone = absl::AnyInvocable<void(absl::StatusOr<ReadResult>)>;
using ObjectVisitor = absl::FunctionRef<void(const ObjectInfo&)>;

// Requirements, one per line.
template <typename T>
concept Tier = requires(T& t, const T& ct, std::string_view key, std::span<const std::byte> bytes,
                        std::span<std::byte> into, const ObjectMeta& meta, WriteDone write_done,
                        ReadDone read_done, ObjectVisitor visit) {
  // Copies bytes before returning; done runs once (maybe inline), after durability.
  { t.Write(key, bytes, meta, std::move(write_done)) } -> std::same_as<void>;
  // into must outlive done; never completes with wrong bytes.
  { t.Read(key, into, std::move(read_done)) } -> std::same_as<void>;
  { t.Remove(key, std::move(write_done)) } -> std::same_as<void>;
  // O(1) expected, no I/O.
  { ct.Lookup(key) } -> std::same_as<std::optional<ObjectInfo>>;
  { ct.Contains(key) } -> std::same_as<bool>;
  // O(objects); fn must not call into the tier.
  { ct.ForEach(visit) } -> std::same_as<void>;
  { ct.stats() } -> std::same_as<TierStats>;
  { ct.capacity_bytes() } -> std::same_as<uint64_t>;
};

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_TIER_H_
