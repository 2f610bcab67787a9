// Fuzzes SsdTier's reading of its own files: recovery (the file header, the
// record header parser, the scan) and reads of whatever recovery accepted.
//
// A small tier file is written once with real records (raw and compressed,
// several sizes). Each input then edits a fresh copy of that file and the
// tier is reopened on it. An input is
//   byte 0: flags. bit 0: reseal every record header the input touched (its
//           key hash and header checksum recomputed, so the parser's field
//           checks see the edit instead of a bad checksum); bit 1: reseal
//           those records' payload checksums too (a "valid but lying"
//           record); bit 2: also write and remove an object after the reopen.
//   then edits of 4 bytes + data: target (u8: record k's header block, k
//           modulo the number of records, or 255 for "anywhere in the
//           file"), offset (u16, modulo the target's size), length (u8,
//           modulo 16, plus 1), then `length` bytes written there.
// Properties checked (ASan/UBSan also run this target in their configs):
//   - Open returns OK or a clear error, never crashes or hangs;
//   - every key reads OK or fails with a Status; without bit 1, a read that
//     succeeds returns exactly one of the values the file was written with
//     (a damaged payload is never served: its checksum no longer matches);
//   - the tier stays usable: ForEach, and with bit 2 a Write, Read and Remove.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/internal/uring.h"
#include "mooncake/tier/ssd_tier.h"

namespace mooncake {
namespace {

using tier::ObjectMeta;
using tier::SsdTier;
using tier::SsdTierOptions;
using tier_internal::kBlockBytes;

// Small, so that an input's I/O and the buffers each Open allocates (scan window,
// bounce arena) stay small; the pieces below are small too, so records still span
// several I/O pieces, read pieces and codec chunks.
constexpr uint64_t kCapacity = 64 << 10;
constexpr size_t kReadRoom = 64 << 10;  // larger than any value written below

SsdTierOptions Options(const std::string& path) {
  SsdTierOptions o;
  o.paths = {path};
  o.capacity_bytes_per_file = kCapacity;
  o.lanes = 1;
  o.ring_entries = 8;
  o.bounce_arena_bytes = 64 << 10;
  o.io_chunk_bytes = 4 << 10;
  o.compressed_read_piece_bytes = 4 << 10;
  o.codec_chunk_bytes = 4 << 10;
  o.codec_threads = 1;
  o.device_read_bytes_per_s = 1e6;  // skip the probe; compression always pays
  o.device_write_bytes_per_s = 1e6;
  return o;
}

// The pristine file, its record header offsets, and the values written.
struct World {
  std::string path;
  std::vector<char> file;
  std::vector<uint64_t> headers;
  std::vector<std::string> keys;
  std::set<std::vector<std::byte>> values;
};

std::vector<char> ReadWholeFile(const std::string& path) {
  std::vector<char> out(std::filesystem::file_size(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MC_ASSERT(fd >= 0, "open the pristine file");
  MC_ASSERT(::pread(fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()),
            "read the pristine file");
  ::close(fd);
  return out;
}

// With O_DIRECT where the file system allows it, as the tier reads it: no dirty
// page cache for the tier's O_DIRECT reads to flush first.
void WriteWholeFile(const std::string& path, const std::vector<char>& bytes) {
  static tier_internal::AlignedBytes aligned =
      tier_internal::AllocateAligned(kCapacity, kBlockBytes, /*zero=*/false);
  MC_ASSERT(bytes.size() == kCapacity, "the fuzzed file keeps its size");
  std::memcpy(aligned.get(), bytes.data(), bytes.size());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  MC_ASSERT(fd >= 0, "open the fuzzed file");
  MC_ASSERT(::pwrite(fd, aligned.get(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()),
            "write the fuzzed file");
  ::close(fd);
}

// Where the fuzzed file lives: the test's directory under `bazel test`; for a
// campaign (tools/fuzz.sh) memory (/dev/shm) where it takes O_DIRECT as a disk
// does (Linux 6.6 and later): the same reads, without a device's latency;
// otherwise /tmp.
std::string FileDirectory() {
  if (const char* tmp = std::getenv("TEST_TMPDIR"); tmp != nullptr) return tmp;
  const std::string probe = absl::StrCat("/dev/shm/ssd_file_fuzz_probe_", ::getpid());
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
  if (fd < 0) return "/tmp";
  ::close(fd);
  ::unlink(probe.c_str());
  return "/dev/shm";
}

World& TheWorld() {
  static World* w = [] {
    auto* w = new World;
    const std::string dir = absl::StrCat(FileDirectory(), "/ssd_file_fuzz_", ::getpid());
    std::filesystem::create_directories(dir);
    w->path = dir + "/tier.dat";
    static const std::string* to_remove = new std::string(dir);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(*to_remove, ignored);
    });
    {
      auto t = SsdTier::Open(Options(w->path));
      MC_ASSERT(t.ok(), "open the seed tier");
      struct Object {
        std::string key;
        size_t size;
        compress::DType dtype;
      };
      const Object objects[] = {{"raw-small", 5000, compress::DType::kBytes},
                                {"bf16-a", 16 << 10, compress::DType::kBFloat16},
                                {"raw-block", 8192, compress::DType::kBytes},
                                {"bf16-b", 17000, compress::DType::kBFloat16}};
      for (const Object& o : objects) {
        std::vector<std::byte> v =
            o.dtype == compress::DType::kBytes
                ? compress::SyntheticKvBytes(o.size, compress::DType::kFloat32, 7)
                : compress::SyntheticKvBytes(o.size, o.dtype, 11);
        MC_ASSERT(tier::WriteBlocking(**t, o.key, v, ObjectMeta{o.dtype, 42}).ok(), "seed write");
        w->keys.push_back(o.key);
        w->values.insert(std::move(v));
      }
      MC_ASSERT((*t)->stats().compressed_writes >= 1, "the seed file holds a compressed record");
    }
    w->file = ReadWholeFile(w->path);
    for (uint64_t off = kBlockBytes; off + kBlockBytes <= w->file.size(); off += kBlockBytes) {
      const auto* p = reinterpret_cast<const std::byte*>(w->file.data() + off);
      if (tier_internal::DecodeRecordHeader(std::span<const std::byte>(p, kBlockBytes))) {
        w->headers.push_back(off);
      }
    }
    MC_ASSERT(w->headers.size() == w->keys.size(), "every seed record found by its header");
    return w;
  }();
  return *w;
}

// Recomputes a record header's key hash and header checksum (and with
// `payload` its payload checksum over the stored bytes it now claims).
void Reseal(std::vector<char>& file, uint64_t off, bool payload) {
  auto* p = reinterpret_cast<std::byte*>(file.data() + off);
  const uint32_t key_bytes = std::min<uint32_t>(tier_internal::GetU32(p + 12), tier::kMaxKeyBytes);
  const std::string_view key(reinterpret_cast<const char*>(p + tier_internal::kRecordHeaderBytes),
                             key_bytes);
  tier_internal::PutU64(p + 24, tier_internal::KeyHash(key));
  if (payload) {
    const uint64_t stored = tier_internal::GetU64(p + 40);
    const uint64_t begin = off + kBlockBytes;
    // `stored` is fuzzed: compare without `begin + stored`, which can wrap.
    if (begin <= file.size() && stored <= file.size() - begin) {
      tier_internal::PutU64(p + 64, FastStableHash64(file.data() + begin, stored));
    }
  }
  tier_internal::PutU64(p + 72, tier_internal::RecordHeaderChecksum(p, key));
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  const World& w = TheWorld();
  std::vector<std::string> seeds = {std::string(1, '\0'), std::string(1, '\x01')};
  // A size, the codec, the dtype, the key and the sequence of a record, each
  // edited and resealed; a payload byte (not resealed, and resealed).
  const auto edit = [](uint8_t flags, uint8_t target, uint16_t offset, std::string bytes) {
    std::string s(1, static_cast<char>(flags));
    s += static_cast<char>(target);
    s += static_cast<char>(offset & 0xFF);
    s += static_cast<char>(offset >> 8);
    s += static_cast<char>(bytes.size() - 1);
    return s + bytes;
  };
  for (uint8_t k = 0; k < w.headers.size(); ++k) {
    seeds.push_back(edit(1, k, 32, std::string("\x01\x10\x00\x00", 4)));  // raw bytes
    seeds.push_back(edit(1, k, 40, std::string("\x00\x20", 2)));          // stored bytes
    seeds.push_back(edit(1, k, 48, std::string("\x00", 1)));              // codec
    seeds.push_back(edit(1, k, 49, std::string("\x03", 1)));              // dtype
    seeds.push_back(edit(1, k, 80, "x"));                                 // the key
    seeds.push_back(edit(1, k, 16, std::string("\xff\xff", 2)));          // sequence
    seeds.push_back(edit(0, k, 100, "garbage"));
    seeds.push_back(edit(3, k, 40, std::string("\x00\x00\x01", 3)));  // lying stored size
  }
  // Regression (libFuzzer, 2026-12-05): a resealed stored size of 2^64 - 1
  // wrapped Reseal's bounds check and hashed past the end of the file.
  seeds.push_back(edit(7, 3, 40, std::string(8, '\xff') + std::string(1, '\0')));
  // Regression (libFuzzer, 2026-12-05): record 1 resealed with sequence 2^64 - 1 made
  // recovery's next sequence wrap to 0 and Open abort.
  seeds.push_back(edit(1, 1, 16, std::string(16, '\xff')));
  // Numbered kMaxSequence: the write after the reopen is refused, the numbers exhausted.
  seeds.push_back(edit(5, 1, 16, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8)));
  seeds.push_back(edit(4, 255, 0, "not a tier file"));  // the file header
  seeds.push_back(edit(5, 0, 100, "x"));                // a fresh write after the reopen
  // Record 0's payload damaged and its header touched: resealed (bit 1) the
  // damage is the file's truth; otherwise it must never be served.
  const uint16_t payload = static_cast<uint16_t>(w.headers[0] + kBlockBytes + 10);
  for (uint8_t flags : {1, 3}) {
    seeds.push_back(edit(flags, 0, 100, "k") + edit(0, 255, payload, "ABCD").substr(1));
  }
  return seeds;
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake;
  World& w = TheWorld();
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::vector<char> file = w.file;
  std::set<uint64_t> touched;
  for (size_t i = 1; i + 4 <= size;) {
    const uint8_t target = data[i];
    const uint16_t offset = static_cast<uint16_t>(data[i + 1] | (data[i + 2] << 8));
    const size_t len = static_cast<size_t>(data[i + 3] % 16) + 1;
    i += 4;
    uint64_t at;
    if (target == 255) {
      at = offset % file.size();
    } else {
      const uint64_t header = w.headers[target % w.headers.size()];
      at = header + offset % kBlockBytes;
      touched.insert(header);
    }
    for (size_t k = 0; k < len && i < size && at + k < file.size(); ++k, ++i) {
      file[at + k] = static_cast<char>(data[i]);
    }
  }
  const bool lying = (flags & 2) != 0;
  if ((flags & 1) != 0) {
    for (uint64_t off : touched) Reseal(file, off, lying);
  }
  WriteWholeFile(w.path, file);

  absl::StatusOr<std::unique_ptr<SsdTier>> t = SsdTier::Open(Options(w.path));
  if (!t.ok()) return 0;  // a clear error is an acceptable answer
  SsdTier& tier = **t;
  std::vector<std::string> keys = w.keys;
  tier.ForEach([&](const tier::ObjectInfo& info) { keys.push_back(info.key); });
  auto room = tier_internal::AllocateAligned(kReadRoom, kBlockBytes);
  for (const std::string& key : keys) {
    absl::StatusOr<tier::ReadResult> r =
        tier::ReadBlocking(tier, key, std::span<std::byte>(room.get(), kReadRoom));
    if (!r.ok() || lying) continue;
    std::vector<std::byte> got(room.get(),
                               room.get() + std::min<uint64_t>(r->raw_bytes, kReadRoom));
    if (r->raw_bytes > kReadRoom || w.values.count(got) == 0) {
      std::fprintf(stderr, "FATAL: key '%s' read back %llu bytes that were never written\n",
                   key.c_str(), static_cast<unsigned long long>(r->raw_bytes));
      std::abort();
    }
  }
  if ((flags & 4) != 0) {
    const std::vector<std::byte> v(3000, std::byte{7});
    const std::string key = "fuzz-new";
    if (tier::WriteBlocking(tier, key, v, ObjectMeta{}).ok()) {
      absl::StatusOr<tier::ReadResult> r =
          tier::ReadBlocking(tier, key, std::span<std::byte>(room.get(), kReadRoom));
      MC_ASSERT(
          r.ok() && r->raw_bytes == v.size() && std::memcmp(room.get(), v.data(), v.size()) == 0,
          "a fresh write reads back after a fuzzed recovery");
      (void)tier::RemoveBlocking(tier, key);
    }
  }
  return 0;
}
