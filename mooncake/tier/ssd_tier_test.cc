#include "mooncake/tier/ssd_tier.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "mooncake/compress/kv_data_testing.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/internal/ssd_format.h"
#include "mooncake/tier/io_faults.h"
#include "mooncake/tier/tier_testing.h"

namespace mooncake::tier {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  static std::atomic<int> counter{0};
  return std::string(dir ? dir : "/tmp") + "/" + name + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter++);
}

SsdTierOptions TestOptions(const std::string& path, uint64_t capacity) {
  SsdTierOptions o;
  o.paths = {path};
  o.capacity_bytes_per_file = capacity;
  o.bounce_arena_bytes = 8 << 20;
  o.io_chunk_bytes = 256 << 10;
  o.device_read_bytes_per_s = 1e9;  // skip the probe
  o.device_write_bytes_per_s = 1e9;
  return o;
}

std::unique_ptr<SsdTier> MustOpen(SsdTierOptions o) {
  auto t = SsdTier::Open(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

}  // namespace

template <>
struct TierTestTraits<SsdTier> {
  static std::unique_ptr<SsdTier> Make(uint64_t capacity_bytes) {
    return MustOpen(TestOptions(TempPath("conf"), capacity_bytes + 4096));
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Ssd, TierConformanceTest, ::testing::Types<SsdTier>);

namespace {

TEST(SsdTierTest, ReopenRecoversEveryAcknowledgedRecord) {
  const std::string path = TempPath("reopen");
  {
    auto t = MustOpen(TestOptions(path, 8 << 20));
    for (int i = 0; i < 20; ++i) {
      const std::string k = "k" + std::to_string(i);
      ASSERT_TRUE(WriteBlocking(*t, k, TestObject(k, 5000 + 3001 * i),
                                ObjectMeta{compress::DType::kBytes, uint64_t(i)})
                      .ok());
    }
    for (int i = 0; i < 20; i += 4) ASSERT_TRUE(RemoveBlocking(*t, "k" + std::to_string(i)).ok());
    EXPECT_GE(t->stats().syncs, 1u);
  }
  auto t = MustOpen(TestOptions(path, 0));
  EXPECT_EQ(t->stats().recovered_objects, 15u);
  for (int i = 0; i < 20; ++i) {
    const std::string k = "k" + std::to_string(i);
    if (i % 4 == 0) {
      EXPECT_FALSE(t->Contains(k)) << k << " was removed";
      continue;
    }
    const auto want = TestObject(k, 5000 + 3001 * i);
    std::vector<std::byte> back(want.size());
    auto r = ReadBlocking(*t, k, back);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->meta.user_tag, uint64_t(i));
    EXPECT_EQ(back, want);
  }
  // New writes after recovery never land on recovered records.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(WriteBlocking(*t, "n" + std::to_string(i), TestObject("n", 70000)).ok());
  }
  std::vector<std::byte> back(5000 + 3001);
  ASSERT_TRUE(ReadBlocking(*t, "k1", back).ok());
  EXPECT_EQ(back, TestObject("k1", 5000 + 3001));
}

TEST(SsdTierTest, BFloat16IsCompressedAndRoundTrips) {
  SsdTierOptions o = TestOptions(TempPath("bf16"), 16 << 20);
  o.compression = Compression::kAlways;
  auto t = MustOpen(o);
  const auto kv = compress::SyntheticKvBytes(1 << 20, compress::DType::kBFloat16, 7);
  ASSERT_TRUE(WriteBlocking(*t, "kv", kv, ObjectMeta{compress::DType::kBFloat16, 0}).ok());
  auto info = t->Lookup("kv");
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->compressed);
  EXPECT_LT(info->stored_bytes, kv.size());
  std::vector<std::byte> back(kv.size());
  ASSERT_TRUE(ReadBlocking(*t, "kv", back).ok());
  EXPECT_EQ(back, kv);
  EXPECT_EQ(t->stats().compressed_writes, 1u);
}

// A compressed record read in many small pieces, its frame in many small chunks: the
// reaper decodes chunks as pieces land (several reads in flight on both lanes).
// codec_threads 1: each record on its reaper alone; 3: two helpers join the
// reapers (one record's chunks decoded on several threads, both lanes sharing
// the helpers).
class SsdTierCodecThreadsTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SsdTierCodecThreadsTest, CompressedReadsDecodePieceByPiece) {
  SsdTierOptions o = TestOptions(TempPath("pieces"), 32 << 20);
  o.compression = Compression::kAlways;
  o.codec_chunk_bytes = 16 << 10;
  o.compressed_read_piece_bytes = 8 << 10;
  o.codec_threads = GetParam();
  auto faults = std::make_shared<ScriptedFaults>();
  o.faults = faults;
  auto t = MustOpen(o);
  constexpr int kObjects = 6;
  std::vector<std::vector<std::byte>> kv;
  for (int i = 0; i < kObjects; ++i) {
    // Odd sizes: a short last chunk and a tail byte past the last element.
    kv.push_back(
        compress::SyntheticKvBytes((300 << 10) + 4097 * i + 1, compress::DType::kBFloat16, i));
    const std::string key = "kv" + std::to_string(i);
    ASSERT_TRUE(WriteBlocking(*t, key, kv[i], ObjectMeta{compress::DType::kBFloat16, 0}).ok());
    ASSERT_TRUE(t->Lookup(key)->compressed);
  }
  std::vector<std::vector<std::byte>> back(kObjects);
  std::mutex mu;
  std::condition_variable cv;
  int pending = kObjects;
  std::vector<absl::Status> results(kObjects);
  for (int i = 0; i < kObjects; ++i) {
    back[i].assign(kv[i].size(), std::byte{0});
    t->Read("kv" + std::to_string(i), back[i], [&, i](absl::StatusOr<ReadResult> r) {
      std::lock_guard<std::mutex> lock(mu);
      results[i] = r.status();
      if (--pending == 0) cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i];
    EXPECT_TRUE(back[i] == kv[i]) << i;
  }
  EXPECT_EQ(t->info().codec_threads, GetParam());
  if (GetParam() > 1 && UsableCpuCount() > 1) {
    // Helpers join a record's decode (or its encode) unless every call ended before one
    // woke up; reading on asks again, boundedly. (On one CPU a call gets no helper.)
    std::vector<std::byte> again(kv[kObjects - 1].size());  // the largest
    for (int i = 0; i < 500 && t->info().codec_helper_joins == 0; ++i) {
      ASSERT_TRUE(ReadBlocking(*t, "kv" + std::to_string(i % kObjects),
                               std::span<std::byte>(again.data(), kv[i % kObjects].size()))
                      .ok());
    }
    EXPECT_GT(t->info().codec_helper_joins, 0u);
  } else if (GetParam() == 1) {
    EXPECT_EQ(t->info().codec_helper_joins, 0u);
  }
  // A failed piece in the middle of a read: Unavailable, nothing served, record kept.
  faults->fail_reads_after = 5;
  std::vector<std::byte> into(kv[0].size());
  EXPECT_EQ(ReadBlocking(*t, "kv0", into).status().code(), absl::StatusCode::kUnavailable);
  faults->fail_reads_after = -1;
  ASSERT_TRUE(ReadBlocking(*t, "kv0", into).ok());
  EXPECT_TRUE(into == kv[0]);
  // Corrupt bytes in every piece (so in chunks decoded before the record checksum is
  // known): DataLoss, the record is dropped.
  into.resize(kv[1].size());
  faults->corrupt_reads = true;
  EXPECT_EQ(ReadBlocking(*t, "kv1", into).status().code(), absl::StatusCode::kDataLoss);
  faults->corrupt_reads = false;
  EXPECT_FALSE(t->Contains("kv1"));
  EXPECT_EQ(t->stats().corrupt_records, 1u);
}

INSTANTIATE_TEST_SUITE_P(CodecThreads, SsdTierCodecThreadsTest, ::testing::Values(1u, 3u));

TEST(SsdTierTest, AutoCompressionFollowsTheRule) {
  // A slow device (1 MB/s: slower than the codec even under a sanitizer):
  // compression pays. A device far faster than the codec: it does not.
  for (double bw : {1e6, 1e12}) {
    SsdTierOptions o = TestOptions(TempPath("auto"), 32 << 20);
    o.device_read_bytes_per_s = o.device_write_bytes_per_s = bw;
    auto t = MustOpen(o);
    const auto kv = compress::SyntheticKvBytes(1 << 20, compress::DType::kBFloat16, 3);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(
          WriteBlocking(*t, "kv" + std::to_string(i), kv, ObjectMeta{compress::DType::kBFloat16, 0})
              .ok());
    }
    // The first write always samples the codec; later ones follow the rule.
    const uint64_t compressed = t->stats().compressed_writes;
    if (bw < 1e9) {
      EXPECT_EQ(compressed, 4u);
    } else {
      EXPECT_EQ(compressed, 1u);
    }
  }
}

TEST(SsdTierTest, ZeroCopyAndUnalignedReadsAgree) {
  auto t = MustOpen(TestOptions(TempPath("align"), 16 << 20));
  for (size_t size : {4096ul, 5000ul, (1ul << 20) + 123}) {
    const std::string k = "s" + std::to_string(size);
    const auto data = TestObject(k, size);
    ASSERT_TRUE(WriteBlocking(*t, k, data).ok());
    auto aligned = tier_internal::AllocateAligned(size + 8192, 4096);
    // Exact size (the tail block staged), aligned-with-room, and unaligned.
    for (size_t offset : {0ul, 1ul}) {
      for (size_t room : {size, size + 4096}) {
        std::span<std::byte> into(aligned.get() + offset, room);
        std::memset(into.data(), 0, room);
        ASSERT_TRUE(ReadBlocking(*t, k, into).ok());
        EXPECT_EQ(0, std::memcmp(into.data(), data.data(), size)) << size << " " << offset;
      }
    }
  }
}

// Every read checks the record checksum over the stored bytes; a compressed
// record's frame also checks its table and every decoded chunk. Damage must be
// caught for both kinds of record.
class SsdTierDamageTest : public ::testing::TestWithParam<bool> {
 protected:
  bool compressed() const { return GetParam(); }
  SsdTierOptions Options(const std::string& path, uint64_t capacity) const {
    SsdTierOptions o = TestOptions(path, capacity);
    o.compression = compressed() ? Compression::kAlways : Compression::kNever;
    return o;
  }
  std::vector<std::byte> Object(const std::string& key, size_t size) const {
    return compressed() ? compress::SyntheticKvBytes(size, compress::DType::kBFloat16, key.size())
                        : TestObject(key, size);
  }
  ObjectMeta Meta() const {
    return ObjectMeta{compressed() ? compress::DType::kBFloat16 : compress::DType::kBytes, 0};
  }
  void ExpectStoredAsAsked(SsdTier& t) const {
    EXPECT_EQ(t.stats().compressed_writes > 0, compressed());
  }

  // A record as the file holds it: its header block's offset, its stored
  // size and its payload (padded to a block).
  struct OnDisk {
    size_t at = 0;
    uint64_t stored = 0;
    std::vector<std::byte> payload;
  };
  static OnDisk Find(const std::string& path, const std::string& key) {
    std::vector<std::byte> file(8 << 20);
    const int fd = ::open(path.c_str(), O_RDONLY);
    EXPECT_EQ(::pread(fd, file.data(), file.size(), 0), ssize_t(file.size()));
    ::close(fd);
    for (size_t off = 4096; off + 4096 <= file.size(); off += 4096) {
      auto rec = tier_internal::DecodeRecordHeader(std::span<const std::byte>(&file[off], 4096));
      if (!rec || rec->key != key) continue;
      const auto payload = file.begin() + static_cast<ptrdiff_t>(off + 4096);
      return {off, rec->header.stored_bytes,
              std::vector<std::byte>(
                  payload, payload + static_cast<ptrdiff_t>(
                                         tier_internal::RoundUpToBlock(rec->header.stored_bytes)))};
    }
    ADD_FAILURE() << key << " not on disk";
    return {};
  }
  // Writes `bytes` at `offset` of the file, behind the tier's back.
  static void Overwrite(const std::string& path, size_t offset, std::span<const std::byte> bytes) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
              ssize_t(bytes.size()));
    ::close(fd);
  }
};

TEST_P(SsdTierDamageTest, CorruptRecordOnDiskIsReportedAndSkipped) {
  const std::string path = TempPath("corrupt");
  auto t = MustOpen(Options(path, 8 << 20));
  const auto data = Object("victim", 100000);
  ASSERT_TRUE(WriteBlocking(*t, "victim", data, Meta()).ok());
  ASSERT_TRUE(WriteBlocking(*t, "other", Object("other", 100000), Meta()).ok());
  ExpectStoredAsAsked(*t);
  // Flip one payload byte (inside the first chunk's payload when the record
  // is a frame).
  const OnDisk victim = Find(path, "victim");
  ASSERT_NE(victim.at, 0u);
  const std::byte flipped = victim.payload[777] ^ std::byte{1};
  Overwrite(path, victim.at + 4096 + 777, std::span<const std::byte>(&flipped, 1));
  std::vector<std::byte> back(data.size());
  auto r = ReadBlocking(*t, "victim", back);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_FALSE(t->Contains("victim"));
  EXPECT_EQ(t->stats().corrupt_records, 1u);
  ASSERT_TRUE(ReadBlocking(*t, "other", back).ok());
  EXPECT_EQ(back, Object("other", 100000));
  t.reset();
  // Recovery skips it too, and counts it.
  t = MustOpen(Options(path, 0));
  EXPECT_FALSE(t->Contains("victim"));
  EXPECT_TRUE(t->Contains("other"));
  EXPECT_EQ(t->info().recovered_corrupt, 1u);
}

TEST_P(SsdTierDamageTest, InjectedReadCorruptionIsNeverServed) {
  SsdTierOptions o = Options(TempPath("inject"), 8 << 20);
  auto faults = std::make_shared<ScriptedFaults>();
  o.faults = faults;
  auto t = MustOpen(o);
  const auto data = Object("k", 300000);
  ASSERT_TRUE(WriteBlocking(*t, "k", data, Meta()).ok());
  ExpectStoredAsAsked(*t);
  faults->corrupt_reads = true;
  std::vector<std::byte> back(data.size());
  EXPECT_EQ(ReadBlocking(*t, "k", back).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_GT(faults->injected.load(), 0u);
}

// A write the device acknowledged and then lost leaves the extent's earlier
// bytes under the new record. For a compressed record those bytes can be a
// whole, self-consistent frame of another object (here: the same values with
// two of them swapped, so even the frame's size matches: the byte-plane
// Huffman code does not depend on the order); only the record checksum the
// tier keeps for the new record tells them apart, which is why a read checks
// it for compressed records too.
TEST_P(SsdTierDamageTest, StaleBytesInAReusedExtentAreNeverServed) {
  const std::string path = TempPath("stale");
  auto t = MustOpen(Options(path, 8 << 20));
  const std::vector<std::byte> before = Object("before", 100000);
  std::vector<std::byte> after = before;
  size_t j = 1000;
  while (after[j] == after[0] && after[j + 1] == after[1]) j += 2;
  std::swap_ranges(after.begin(), after.begin() + 2, after.begin() + j);
  ASSERT_NE(after, before);
  ASSERT_TRUE(WriteBlocking(*t, "old", before, Meta()).ok());
  const OnDisk old_record = Find(path, "old");
  ASSERT_TRUE(RemoveBlocking(*t, "old").ok());
  ASSERT_TRUE(WriteBlocking(*t, "new", after, Meta()).ok());
  ExpectStoredAsAsked(*t);
  const OnDisk new_record = Find(path, "new");
  ASSERT_EQ(new_record.at, old_record.at) << "the extent is reused";
  ASSERT_EQ(new_record.stored, old_record.stored) << "same values, same stored size";
  ASSERT_NE(new_record.payload, old_record.payload);
  Overwrite(path, old_record.at + 4096, old_record.payload);
  std::vector<std::byte> back(after.size());
  const auto r = ReadBlocking(*t, "new", back);
  // DataLoss, not the predecessor's bytes. (`back` may hold them all the same:
  // a compressed read decodes into the caller's buffer as pieces land, and a
  // failed read leaves that buffer unspecified; tier.h.)
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_FALSE(t->Contains("new"));
}

INSTANTIATE_TEST_SUITE_P(RawAndCompressed, SsdTierDamageTest, ::testing::Bool());

TEST(SsdTierTest, InjectedWriteAndSyncErrorsAcknowledgeNothing) {
  const std::string path = TempPath("ioerr");
  SsdTierOptions o = TestOptions(path, 8 << 20);
  auto faults = std::make_shared<ScriptedFaults>();
  o.faults = faults;
  {
    auto t = MustOpen(o);
    ASSERT_TRUE(WriteBlocking(*t, "good", TestObject("good", 50000)).ok());
    ASSERT_TRUE(WriteBlocking(*t, "doomed", TestObject("doomed", 50000)).ok());
    faults->fail_writes_after = 0;
    absl::Status s = WriteBlocking(*t, "bad-write", TestObject("b", 50000));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_FALSE(t->Contains("bad-write"));
    EXPECT_EQ(RemoveBlocking(*t, "doomed").code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(t->Contains("doomed")) << "a failed remove leaves the object unserved";
    faults->fail_writes_after = -1;
    faults->fail_syncs_after = 0;
    s = WriteBlocking(*t, "bad-sync", TestObject("c", 50000));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_FALSE(t->Contains("bad-sync"));
    faults->fail_syncs_after = -1;
    EXPECT_GE(t->stats().io_errors, 3u);
    EXPECT_GT(t->info().quarantined_bytes, 0u);
    std::vector<std::byte> back(50000);
    ASSERT_TRUE(ReadBlocking(*t, "good", back).ok());
    EXPECT_EQ(back, TestObject("good", 50000));
  }
  o.faults = nullptr;
  o.capacity_bytes_per_file = 0;
  auto t = MustOpen(o);
  std::vector<std::byte> back(50000);
  ASSERT_TRUE(ReadBlocking(*t, "good", back).ok());
  EXPECT_EQ(back, TestObject("good", 50000));
  if (t->Contains("doomed")) {
    ASSERT_TRUE(ReadBlocking(*t, "doomed", back).ok());
    EXPECT_EQ(back, TestObject("doomed", 50000));
  }
}

// No bandwidths given: Open measures the device in free space, reports the
// figures in info(), and leaves nothing behind (its zeros are no record). Too
// small a tier to probe falls back to 1 GB/s; a figure given is kept.
TEST(SsdTierTest, OpenProbesTheDeviceWhenNoBandwidthIsGiven) {
  const std::string path = TempPath("probe");
  SsdTierOptions o = TestOptions(path, 32 << 20);
  o.device_read_bytes_per_s = 0;
  o.device_write_bytes_per_s = 0;
  {
    auto t = MustOpen(o);
    ASSERT_NE(t, nullptr);
    const SsdTierInfo info = t->info();
    EXPECT_GT(info.device_read_bytes_per_s, 1e6);
    EXPECT_GT(info.device_write_bytes_per_s, 1e6);
    EXPECT_NE(info.device_read_bytes_per_s, 1e9) << "measured, not the fallback";
    EXPECT_NE(info.device_write_bytes_per_s, 1e9) << "measured, not the fallback";
    EXPECT_EQ(t->stats().objects, 0u);
    ASSERT_TRUE(WriteBlocking(*t, "k", TestObject("k", 100000)).ok());
  }
  o.capacity_bytes_per_file = 0;
  o.device_write_bytes_per_s = 123e6;
  {
    auto t = MustOpen(o);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->info().device_write_bytes_per_s, 123e6);
    EXPECT_GT(t->info().device_read_bytes_per_s, 1e6);
    EXPECT_EQ(t->info().recovered_corrupt, 0u) << "the probe's zeros are not a record";
    std::vector<std::string> keys;
    t->ForEach([&](const ObjectInfo& i) { keys.push_back(i.key); });
    EXPECT_EQ(keys, std::vector<std::string>{"k"}) << "the probe left the object alone";
    std::vector<std::byte> back(100000);
    ASSERT_TRUE(ReadBlocking(*t, "k", back).ok());
    EXPECT_EQ(back, TestObject("k", 100000));
  }
  const std::string small = TempPath("probe-small");
  SsdTierOptions tiny = TestOptions(small, 6 << 20);
  tiny.device_read_bytes_per_s = tiny.device_write_bytes_per_s = 0;
  auto t = MustOpen(tiny);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->info().device_read_bytes_per_s, 1e9) << "too small to probe: the fallback";
  EXPECT_EQ(t->info().device_write_bytes_per_s, 1e9);
}

// A filesystem full under the tier's file (ENOSPC at a write's completion, which
// a sparse file can see): a clear I/O error naming the cause, not
// ResourceExhausted (removing records frees no filesystem blocks), nothing
// acknowledged, and the tier goes on serving and writing.
TEST(SsdTierTest, KernelNoSpaceOnAWriteIsAnIoErrorAndNothingIsAcknowledged) {
  const std::string path = TempPath("enospc");
  SsdTierOptions o = TestOptions(path, 8 << 20);
  auto faults = std::make_shared<ScriptedFaults>();
  o.faults = faults;
  auto t = MustOpen(o);
  ASSERT_TRUE(WriteBlocking(*t, "before", TestObject("before", 70000)).ok());
  faults->fault_errno = ENOSPC;
  faults->fail_writes_after = 0;
  const absl::Status s = WriteBlocking(*t, "full", TestObject("full", 70000));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), std::strerror(ENOSPC))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "full")) << s;
  EXPECT_FALSE(t->Contains("full"));
  EXPECT_GE(t->stats().io_errors, 1u);
  faults->fail_writes_after = -1;
  ASSERT_TRUE(WriteBlocking(*t, "after", TestObject("after", 70000)).ok());
  for (const char* key : {"before", "after"}) {
    std::vector<std::byte> back(70000);
    ASSERT_TRUE(ReadBlocking(*t, key, back).ok()) << key;
    EXPECT_EQ(back, TestObject(key, 70000)) << key;
  }
}

// Holds every fdatasync completion (on its reaper) while closed, so a test can see what
// is acknowledged before a sync completes.
class SyncGate final : public IoFaults {
 public:
  explicit SyncGate(bool open) : open_(open) {}
  // Opens the gate when it goes out of scope.
  struct OpenOnExit {
    explicit OpenOnExit(SyncGate& gate) : gate(gate) {}
    ~OpenOnExit() { gate.Open(); }
    OpenOnExit(const OpenOnExit&) = delete;
    OpenOnExit& operator=(const OpenOnExit&) = delete;
    SyncGate& gate;
  };
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  int passed() const { return passed_.load(); }  // syncs let through to the tier
  // Waits up to 10 s for `n` syncs to have passed.
  bool AwaitPassed(int n) const {
    for (int i = 0; i < 1000 && passed() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return passed() >= n;
  }
  int OnComplete(IoKind kind, uint32_t, uint64_t, std::span<std::byte>, int result) override {
    if (kind != IoKind::kSync) return result;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    ++passed_;
    return result;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_;
  std::atomic<int> passed_{0};
};

// Waits up to `ms` for a callback's status.
class Ack {
 public:
  WriteDone Callback() {
    return [this](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(s);
      cv_.notify_all();
    };
  }
  std::optional<absl::Status> Wait(int ms) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return status_.has_value(); });
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<absl::Status> status_;
};

class SsdTierDurabilityTest : public ::testing::TestWithParam<Durability> {};

TEST_P(SsdTierDurabilityTest, AcknowledgementWaitsForTheSyncOnlyUnderPowerLoss) {
  const std::string path = TempPath("durability");
  SsdTierOptions o = TestOptions(path, 8 << 20);
  o.lanes = 1;  // a held sync holds the one reaper: nothing else completes meanwhile
  o.durability = GetParam();
  auto gate = std::make_shared<SyncGate>(/*open=*/false);
  o.faults = gate;
  const auto data = TestObject("k", 70000);
  const bool power_loss = GetParam() == Durability::kPowerLoss;
  const bool no_sync = GetParam() == Durability::kNoSync;
  {
    auto t = MustOpen(o);
    // Declared after the tier, so a failed assertion opens the gate before the tier's
    // destructor waits for the held sync (a test failure, not a hang).
    const SyncGate::OpenOnExit open_gate(*gate);
    ASSERT_EQ(t->info().durability, GetParam());
    Ack write;
    t->Write("k", data, {}, write.Callback());
    if (power_loss) {
      EXPECT_FALSE(write.Wait(300).has_value()) << "acknowledged before its fdatasync completed";
      EXPECT_FALSE(t->Contains("k"));
    } else {
      // Acknowledged with the gate closed, i.e. before its sync completed.
      const std::optional<absl::Status> w = write.Wait(10000);
      ASSERT_TRUE(w.has_value()) << "not acknowledged until its fdatasync completed";
      EXPECT_TRUE(w->ok()) << *w;
      EXPECT_EQ(gate->passed(), 0);
    }
    gate->Open();
    const std::optional<absl::Status> w = write.Wait(10000);
    ASSERT_TRUE(w.has_value());
    ASSERT_TRUE(w->ok()) << *w;
    if (!no_sync) {
      ASSERT_TRUE(gate->AwaitPassed(1));
    }
    EXPECT_TRUE(t->Contains("k"));
    std::vector<std::byte> back(data.size());
    ASSERT_TRUE(ReadBlocking(*t, "k", back).ok());
    EXPECT_EQ(back, data);

    // A remove waits for its sync, except under kNoSync (its space is free when it is
    // acknowledged).
    gate->Close();
    Ack remove;
    t->Remove("k", remove.Callback());
    if (no_sync) {
      ASSERT_TRUE(remove.Wait(10000).has_value()) << "a kNoSync remove waited for a sync";
    } else {
      EXPECT_FALSE(remove.Wait(300).has_value()) << "acknowledged before its fdatasync completed";
    }
    EXPECT_FALSE(t->Contains("k"));
    gate->Open();
    const std::optional<absl::Status> r = remove.Wait(10000);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->ok()) << *r;
    ASSERT_TRUE(WriteBlocking(*t, "kept", data).ok());
    if (no_sync) {
      EXPECT_EQ(t->stats().syncs, 0u);
      EXPECT_EQ(gate->passed(), 0);
    } else {
      EXPECT_GE(t->stats().syncs, 2u);  // kept's may still be pending (background)
    }
  }  // the destructor waits for the background syncs (kNoSync: syncs on close)
  o.faults = nullptr;
  o.capacity_bytes_per_file = 0;
  auto t = MustOpen(o);
  EXPECT_FALSE(t->Contains("k"));
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE(ReadBlocking(*t, "kept", back).ok());
  EXPECT_EQ(back, data);
}

INSTANTIATE_TEST_SUITE_P(EveryDurability, SsdTierDurabilityTest,
                         ::testing::Values(Durability::kPowerLoss, Durability::kProcessCrash,
                                           Durability::kNoSync));

TEST_P(SsdTierDurabilityTest, AnAcknowledgedRemoveHasFreedItsSpace) {
  // Room for one 200 KB object: the second write needs the first one's extent, at once.
  SsdTierOptions o = TestOptions(TempPath("reuse"), 4096 + 4096 + 204800 + 4096);
  o.durability = GetParam();
  auto t = MustOpen(o);
  const auto a = TestObject("a", 200000), b = TestObject("b", 200000);
  ASSERT_TRUE(WriteBlocking(*t, "a", a).ok());
  EXPECT_EQ(WriteBlocking(*t, "b", b).code(), absl::StatusCode::kResourceExhausted);
  // The write is made inside the remove's acknowledgement (Write picks its extent before it
  // returns), so it sees the space exactly as the acknowledgement leaves it.
  Ack remove, write;
  WriteDone remove_done = remove.Callback();
  t->Remove("a", [&](absl::Status s) {
    t->Write("b", b, {}, write.Callback());
    remove_done(std::move(s));
  });
  const std::optional<absl::Status> r = remove.Wait(10000);
  ASSERT_TRUE(r.has_value() && r->ok()) << (r ? r->ToString() : "no acknowledgement");
  const std::optional<absl::Status> w = write.Wait(10000);
  ASSERT_TRUE(w.has_value());
  ASSERT_TRUE(w->ok()) << "the removed object's space is not free yet: " << *w;
  std::vector<std::byte> back(b.size());
  ASSERT_TRUE(ReadBlocking(*t, "b", back).ok());
  EXPECT_EQ(back, b);
}

TEST(SsdTierTest, CloseDoesNotWaitOutTheBackgroundSyncInterval) {
  const std::string path = TempPath("hurry");
  SsdTierOptions o = TestOptions(path, 8 << 20);
  o.durability = Durability::kProcessCrash;
  o.background_sync_ms = 60000;
  auto syncs = std::make_shared<SyncGate>(/*open=*/true);  // counts the syncs
  o.faults = syncs;
  const auto data = TestObject("k", 70000);
  auto t = MustOpen(o);
  ASSERT_TRUE(WriteBlocking(*t, "k", data).ok());
  EXPECT_EQ(syncs->passed(), 0);  // its background sync is 60 s away
  const auto t0 = std::chrono::steady_clock::now();
  t.reset();
  // Generous for a loaded machine; without the hurry the close takes 60 s.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(syncs->passed(), 1) << "the close synced the acknowledged write";
  o.faults = nullptr;
  o.capacity_bytes_per_file = 0;
  t = MustOpen(o);
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE(ReadBlocking(*t, "k", back).ok());
  EXPECT_EQ(back, data);
}

TEST(SsdTierTest, ProcessCrashKeepsAcknowledgedWritesWhenASyncFails) {
  const std::string path = TempPath("syncfail");
  SsdTierOptions o = TestOptions(path, 8 << 20);
  o.durability = Durability::kProcessCrash;
  o.background_sync_ms = 0;  // each sync as soon as the previous one completes
  auto faults = std::make_shared<ScriptedFaults>();
  o.faults = faults;
  const auto data = TestObject("w", 50000);
  {
    auto t = MustOpen(o);
    ASSERT_TRUE(WriteBlocking(*t, "gone", data).ok());
    faults->fail_syncs_after = 0;
    ASSERT_TRUE(WriteBlocking(*t, "w", data).ok()) << "written: acknowledged whatever the sync";
    // A remove waits for its sync: not acknowledged, the object unserved all the same.
    EXPECT_EQ(RemoveBlocking(*t, "gone").code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(t->Contains("gone"));
    std::vector<std::byte> back(data.size());
    ASSERT_TRUE(ReadBlocking(*t, "w", back).ok());
    EXPECT_EQ(back, data);
    // The remove's failed sync leaves its extent quarantined (never reused while the tier is open).
    EXPECT_GT(t->info().quarantined_bytes, 0u);
    EXPECT_GE(t->info().failed_syncs, 1u);
    EXPECT_GE(t->stats().io_errors, t->info().failed_syncs);
    faults->fail_syncs_after = -1;
  }
  o.faults = nullptr;
  o.capacity_bytes_per_file = 0;
  auto t = MustOpen(o);  // a process restart: what was acknowledged is there
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE(ReadBlocking(*t, "w", back).ok());
  EXPECT_EQ(back, data);
  if (t->Contains("gone")) {  // its zeroed header may not have reached the disk
    ASSERT_TRUE(ReadBlocking(*t, "gone", back).ok());
    EXPECT_EQ(back, data);
  }
}

// Two boots' ids, for files standing in for /proc/sys/kernel/random/boot_id.
constexpr char kBootA[] = "4f23e2a1-4ae5-4e88-9cd4-110fc3573321";
constexpr char kBootB[] = "0badc0de-0000-4000-8000-000000000001";

// A file standing in for /proc/sys/kernel/random/boot_id.
std::string BootIdFile(const std::string& uuid) {
  const std::string path = TempPath("boot_id");
  const std::string text = uuid + "\n";
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), ssize_t(text.size()));
  ::close(fd);
  return path;
}

tier_internal::FileHeader HeaderOnDisk(const std::string& path) {
  std::vector<std::byte> block(tier_internal::kBlockBytes);
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pread(fd, block.data(), block.size(), 0), ssize_t(block.size()));
  ::close(fd);
  absl::StatusOr<tier_internal::FileHeader> h = tier_internal::DecodeFileHeader(block);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? *h : tier_internal::FileHeader{};
}

// Opens the tier in a child process, writes `key` and exits without closing the tier
// (the files are left as a killed process leaves them).
void WriteAndDieUnclosed(const SsdTierOptions& o, const std::string& key,
                         const std::vector<std::byte>& data) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto t = SsdTier::Open(o);
    const bool ok = t.ok() && WriteBlocking(**t, key, data).ok();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

// An 8 MiB kNoSync tier whose boot id is read from `boot_id_path`.
SsdTierOptions NoSyncOptions(const std::string& path, const std::string& boot_id_path) {
  SsdTierOptions o = TestOptions(path, 8 << 20);
  o.durability = Durability::kNoSync;
  o.boot_id_path = boot_id_path;
  return o;
}

TEST(SsdTierTest, NoSyncSurvivesAProcessCrashAndIsDiscardedAfterAReboot) {
  const std::string path = TempPath("nosync");
  const std::string boot_a = BootIdFile(kBootA), boot_b = BootIdFile(kBootB);
  SsdTierOptions o = NoSyncOptions(path, boot_a);
  const auto x = TestObject("x", 70000), y = TestObject("y", 300000);
  {
    auto t = MustOpen(o);
    ASSERT_TRUE(WriteBlocking(*t, "x", x).ok());
    const tier_internal::FileHeader open = HeaderOnDisk(path);
    EXPECT_EQ(open.flags, tier_internal::kFileFlagUnsynced);
    EXPECT_EQ(open.boot_id, *tier_internal::ReadBootId(boot_a));
    EXPECT_EQ(t->stats().syncs, 0u);
  }
  EXPECT_EQ(HeaderOnDisk(path).flags, 0) << "a clean close clears the flag";
  EXPECT_EQ(HeaderOnDisk(path).boot_id, tier_internal::BootId{});
  o.capacity_bytes_per_file = 0;
  {
    // Another boot, after a clean close: everything is there.
    SsdTierOptions b = o;
    b.boot_id_path = boot_b;
    auto t = MustOpen(b);
    EXPECT_EQ(t->info().recovered_discarded, 0u);
    EXPECT_TRUE(t->Contains("x"));
  }
  // The process dies with the tier open; reopened in the same boot (under kPowerLoss).
  WriteAndDieUnclosed(o, "y", y);
  EXPECT_EQ(HeaderOnDisk(path).flags, tier_internal::kFileFlagUnsynced);
  {
    SsdTierOptions same = o;
    same.durability = Durability::kPowerLoss;
    auto t = MustOpen(same);
    EXPECT_EQ(t->info().recovered_discarded, 0u);
    std::vector<std::byte> back(y.size());
    ASSERT_TRUE(ReadBlocking(*t, "y", back).ok());
    EXPECT_EQ(back, y);
    EXPECT_TRUE(t->Contains("x"));
    EXPECT_EQ(HeaderOnDisk(path).flags, 0) << "synced and no longer kNoSync's";
  }
  // The process dies again; this time the machine reboots before the reopen.
  WriteAndDieUnclosed(o, "z", x);
  {
    SsdTierOptions rebooted = o;
    rebooted.boot_id_path = boot_b;
    auto t = MustOpen(rebooted);
    EXPECT_EQ(t->info().recovered_discarded, 3u);
    EXPECT_EQ(t->stats().objects, 0u);
    EXPECT_FALSE(t->Contains("x"));
    EXPECT_EQ(HeaderOnDisk(path).boot_id, *tier_internal::ReadBootId(boot_b));
    // New writes go on (sequence numbers above the discarded ones).
    ASSERT_TRUE(WriteBlocking(*t, "x", y).ok());
  }
  auto t = MustOpen(o);
  EXPECT_EQ(t->info().recovered_discarded, 0u);
  EXPECT_FALSE(t->Contains("y")) << "a discarded record came back";
  std::vector<std::byte> back(y.size());
  ASSERT_TRUE(ReadBlocking(*t, "x", back).ok());
  EXPECT_EQ(back, y);
}

TEST(SsdTierTest, AFailedOpenLeavesAnUnsyncedFlagAsItWas) {
  const std::string path = TempPath("failedopen");
  const std::string boot_a = BootIdFile(kBootA), boot_b = BootIdFile(kBootB);
  SsdTierOptions o = NoSyncOptions(path, boot_a);
  WriteAndDieUnclosed(o, "k", TestObject("k", 5000));
  // After a reboot, an Open that fails after reading the files (wrong capacity) must not
  // clear the flag: the records were neither discarded nor synced.
  SsdTierOptions wrong = o;
  wrong.boot_id_path = boot_b;
  wrong.capacity_bytes_per_file = 4 << 20;
  EXPECT_EQ(SsdTier::Open(wrong).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(HeaderOnDisk(path).flags, tier_internal::kFileFlagUnsynced);
  EXPECT_EQ(HeaderOnDisk(path).boot_id, *tier_internal::ReadBootId(boot_a));
  SsdTierOptions rebooted = o;
  rebooted.boot_id_path = boot_b;
  rebooted.capacity_bytes_per_file = 0;
  rebooted.durability = Durability::kPowerLoss;
  auto t = MustOpen(rebooted);
  EXPECT_EQ(t->info().recovered_discarded, 1u);
  EXPECT_FALSE(t->Contains("k"));
}

TEST(SsdTierTest, BootIdsAreParsedStrictly) {
  const std::optional<tier_internal::BootId> id =
      tier_internal::ReadBootId(BootIdFile("4F23E2A1-4ae5-4e88-9cd4-110fc3573321"));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ((*id)[0], 0x4f);
  EXPECT_EQ((*id)[15], 0x21);
  for (const char* bad :
       {"4f23e2a1-4ae5-4e88-9cd4-110fc357332", "4f23e2a1-4ae5-4e88-9cd4-110fc35733210",
        "4f23e2a1-4ae5-4e88-9cd4-110fc357332g", "00000000-0000-0000-0000-000000000000", ""}) {
    EXPECT_FALSE(tier_internal::ReadBootId(BootIdFile(bad)).has_value()) << bad;
  }
  EXPECT_FALSE(tier_internal::ReadBootId(TempPath("missing")).has_value());
}

TEST(SsdTierTest, WithoutABootIdNoSyncIsRefusedAndAnUnsyncedFileIsDiscarded) {
  const std::string path = TempPath("noboot");
  SsdTierOptions o = TestOptions(path, 8 << 20);
  o.durability = Durability::kNoSync;
  o.boot_id_path = TempPath("missing");
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kFailedPrecondition);
  o.boot_id_path = BootIdFile("not a uuid");
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kFailedPrecondition);
  o.boot_id_path = BootIdFile(kBootA);
  WriteAndDieUnclosed(o, "k", TestObject("k", 5000));
  o.capacity_bytes_per_file = 0;
  o.durability = Durability::kProcessCrash;
  o.boot_id_path = TempPath("missing");
  auto t = MustOpen(o);  // which boot wrote it cannot be told: nothing is trusted
  EXPECT_EQ(t->info().recovered_discarded, 1u);
  EXPECT_FALSE(t->Contains("k"));
}

TEST(SsdTierTest, FullTierIsResourceExhausted) {
  auto t = MustOpen(TestOptions(TempPath("full"), 1 << 20));
  int ok = 0;
  absl::Status last;
  for (int i = 0; i < 20 && last.ok(); ++i) {
    last = WriteBlocking(*t, "k" + std::to_string(i), TestObject("x", 200000));
    ok += last.ok();
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_EQ(ok, 5);  // records of 4 KiB + 196 KiB: 5 fit in 1 MiB - 4 KiB
  EXPECT_EQ(WriteBlocking(*t, "huge", TestObject("x", 2 << 20)).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(SsdTierTest, FileSizeLimitFailsOpenWithResourceExhausted) {
  const std::string path = TempPath("rlimit");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    auto t = SsdTier::Open(TestOptions(path, 8 << 20));
    _exit(!t.ok() && t.status().code() == absl::StatusCode::kResourceExhausted ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "a failed create leaves no file";
}

TEST(SsdTierTest, BadOptionsAndForeignFiles) {
  SsdTierOptions o = TestOptions(TempPath("bad"), 12345);
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TestOptions(TempPath("bad"), 0);
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TestOptions(TempPath("bad"), 1 << 20);
  o.codec_threads = compress::kMaxCodecThreads + 1;
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TestOptions(TempPath("bad"), 1 << 20);
  o.background_sync_ms = 60001;
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TestOptions(TempPath("bad"), 1 << 20);
  o.durability = static_cast<Durability>(7);
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  // A file that is not a tier file.
  const std::string junk = TempPath("junk");
  int fd = ::open(junk.c_str(), O_CREAT | O_RDWR, 0644);
  std::vector<char> zeros(1 << 20, 'z');
  ASSERT_EQ(::write(fd, zeros.data(), zeros.size()), ssize_t(zeros.size()));
  ::close(fd);
  EXPECT_EQ(SsdTier::Open(TestOptions(junk, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A file already open by another tier.
  const std::string path = TempPath("locked");
  auto first = MustOpen(TestOptions(path, 1 << 20));
  auto second = SsdTier::Open(TestOptions(path, 0));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  // Files of two different tiers cannot be mixed.
  const std::string a = TempPath("seta"), b = TempPath("setb");
  { auto t = MustOpen(TestOptions(a, 1 << 20)); }
  { auto t = MustOpen(TestOptions(b, 1 << 20)); }
  SsdTierOptions mixed = TestOptions(a, 0);
  mixed.paths = {a, b};
  EXPECT_EQ(SsdTier::Open(mixed).status().code(), absl::StatusCode::kFailedPrecondition);
}

std::string FileContents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SsdTierTest, StartEmptyReplacesTierFilesOfAnySizeUnread) {
  const std::string a = TempPath("empty_a"), b = TempPath("empty_b");
  SsdTierOptions o = TestOptions(a, 2 << 20);
  o.paths = {a, b};
  {
    auto t = MustOpen(o);
    ASSERT_TRUE(WriteBlocking(*t, "old", TestObject("old", 300000)).ok());
  }
  // Another size, and one of the two files gone: both are (re)created, empty.
  ASSERT_EQ(::unlink(b.c_str()), 0);
  o.capacity_bytes_per_file = 4 << 20;
  o.start_empty = true;
  {
    auto t = MustOpen(o);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->capacity_bytes(), 2 * ((4 << 20) - 4096u));
    EXPECT_EQ(t->stats().objects, 0u);
    EXPECT_EQ(t->stats().recovered_objects, 0u);
    EXPECT_FALSE(t->Contains("old"));
    ASSERT_TRUE(WriteBlocking(*t, "new", TestObject("new", 300000)).ok());
  }
  // A plain reopen finds what the new tier wrote, and only that.
  o.start_empty = false;
  o.capacity_bytes_per_file = 0;
  auto t = MustOpen(o);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().objects, 1u);
  EXPECT_TRUE(t->Contains("new"));
  EXPECT_FALSE(t->Contains("old"));
}

TEST(SsdTierTest, StartEmptyNeverReplacesWhatIsNotAnIdleTierFile) {
  // Not a tier file: refused, and left as it was.
  const std::string junk = TempPath("empty_junk");
  {
    std::ofstream out(junk, std::ios::binary);
    out << "precious data, not a tier";
  }
  SsdTierOptions o = TestOptions(junk, 1 << 20);
  o.start_empty = true;
  absl::StatusOr<std::unique_ptr<SsdTier>> t = SsdTier::Open(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("not an SsdTier file"), std::string::npos) << t.status();
  EXPECT_EQ(FileContents(junk), "precious data, not a tier");
  // An empty file is not one either.
  const std::string empty = TempPath("empty_zero");
  { std::ofstream out(empty, std::ios::binary); }
  o.paths = {empty};
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kFailedPrecondition);
  // Not a regular file.
  const std::string dir = TempPath("empty_dir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  o.paths = {dir};
  t = SsdTier::Open(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos) << t.status();
  // A device node, with start_empty or without: refused, never written.
  o.paths = {"/dev/null"};
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kFailedPrecondition);
  t = SsdTier::Open(TestOptions("/dev/null", 0));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos) << t.status();
  // A file another open tier holds: refused; that tier keeps working.
  const std::string busy = TempPath("empty_busy");
  auto first = MustOpen(TestOptions(busy, 1 << 20));
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WriteBlocking(*first, "k", TestObject("k", 100000)).ok());
  o.paths = {busy};
  t = SsdTier::Open(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  std::vector<std::byte> back(100000);
  EXPECT_TRUE(ReadBlocking(*first, "k", back).ok());
  EXPECT_EQ(back, TestObject("k", 100000));
  // start_empty needs the new files' size.
  o = TestOptions(TempPath("empty_nosize"), 0);
  o.start_empty = true;
  EXPECT_EQ(SsdTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SsdTierTest, SeveralFilesShareTheLoad) {
  SsdTierOptions o = TestOptions(TempPath("multi0"), 4 << 20);
  o.paths.push_back(TempPath("multi1"));
  const std::vector<std::string> paths = o.paths;
  {
    auto t = MustOpen(o);
    EXPECT_EQ(t->capacity_bytes(), 2 * ((4 << 20) - 4096u));
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(WriteBlocking(*t, "k" + std::to_string(i), TestObject("m", 500000)).ok()) << i;
    }
  }
  o.capacity_bytes_per_file = 0;
  auto t = MustOpen(o);
  EXPECT_EQ(t->stats().objects, 10u);
}

TEST(SsdTierTest, ReadsRacingRemovesNeverSeeWrongBytes) {
  auto t = MustOpen(TestOptions(TempPath("race"), 16 << 20));
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, served{0};
  std::thread writer([&] {
    for (int round = 0; round < 60; ++round) {
      for (int k = 0; k < 4; ++k) {
        const std::string key = "k" + std::to_string(k);
        (void)RemoveBlocking(*t, key);
        (void)WriteBlocking(*t, key, TestObject(key + std::to_string(round), 200000));
      }
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      std::vector<std::byte> back(200000);
      while (!stop) {
        for (int k = 0; k < 4; ++k) {
          const std::string key = "k" + std::to_string(k);
          if (!ReadBlocking(*t, key, back).ok()) continue;
          bool match = false;
          for (int round = 0; round < 60 && !match; ++round) {
            match = back == TestObject(key + std::to_string(round), 200000);
          }
          ++served;
          if (!match) ++wrong;
        }
      }
    });
  }
  writer.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(served.load(), 0);
}

}  // namespace
}  // namespace mooncake::tier
