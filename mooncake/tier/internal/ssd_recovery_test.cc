#include "mooncake/tier/internal/ssd_recovery.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/fast_hash.h"

namespace mooncake::tier_internal {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/recovery_" + name;
}

// Writes a raw record of `key` at `offset` (of its header block); `damage` flips a payload
// byte after the checksum was taken.
void PutRecord(int fd, uint64_t offset, const std::string& key, uint64_t sequence,
               bool damage = false) {
  std::vector<std::byte> payload(5000, std::byte(sequence));
  RecordHeader h;
  h.sequence = sequence;
  h.key_hash = KeyHash(key);
  h.raw_bytes = h.stored_bytes = payload.size();
  h.payload_checksum = FastStableHash64(payload.data(), payload.size());
  AlignedBytes buf = AllocateAligned(RecordBytes(payload.size()), kBlockBytes);
  EncodeRecordHeader(h, key, std::span<std::byte>(buf.get(), kBlockBytes));
  std::memcpy(buf.get() + kBlockBytes, payload.data(), payload.size());
  if (damage) buf[kBlockBytes + 7] ^= std::byte{1};
  ASSERT_TRUE(PwriteFull(fd, buf.get(), RecordBytes(payload.size()), offset).ok());
}

class SsdRecoveryTest : public ::testing::Test {
 protected:
  // A new one-file set holding: "a" twice (sequences 1 and 5), "b" (3), and a damaged "c".
  void SetUp() override {
    o_ = SsdFileSetOptions{
        {TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name())},
        false,
        256 * kBlockBytes,
        true};
    ::unlink(o_.paths[0].c_str());
    SsdFileSet files;
    ASSERT_TRUE(files.Open(o_).ok());
    PutRecord(files.fd(0), kA1, "a", 1);
    PutRecord(files.fd(0), kB, "b", 3);
    PutRecord(files.fd(0), kA5, "a", 5);
    PutRecord(files.fd(0), kC, "c", 4, /*damage=*/true);
    o_.capacity_bytes_per_file = 0;
  }

  static constexpr uint64_t kA1 = 1 * kBlockBytes, kB = 10 * kBlockBytes, kA5 = 20 * kBlockBytes,
                            kC = 30 * kBlockBytes;
  SsdFileSetOptions o_;
};

TEST_F(SsdRecoveryTest, KeepsTheNewestValidRecordOfEachKey) {
  SsdFileSet files;
  ASSERT_TRUE(files.Open(o_).ok());
  absl::StatusOr<RecoveredFiles> r = SsdRecovery::Run(files, std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->by_file.size(), 1u);
  ASSERT_EQ(r->by_file[0].size(), 2u);
  // In address order: b, then the newer a.
  EXPECT_EQ(r->by_file[0][0].key, "b");
  EXPECT_EQ(r->by_file[0][0].offset, kB);
  EXPECT_EQ(r->by_file[0][1].key, "a");
  EXPECT_EQ(r->by_file[0][1].header.sequence, 5u);
  EXPECT_EQ(r->corrupt, 1u);
  EXPECT_EQ(r->superseded, 1u);
  EXPECT_EQ(r->discarded, 0u);
  EXPECT_EQ(r->max_sequence, 5u);
  // The loser was zeroed: a second recovery finds nothing to supersede.
  absl::StatusOr<RecoveredFiles> again = SsdRecovery::Run(files, std::nullopt);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->superseded, 0u);
  EXPECT_EQ(again->by_file[0].size(), 2u);
}

TEST_F(SsdRecoveryTest, FilesLeftOpenByAnotherBootAreDiscarded) {
  SsdFileSet files;
  ASSERT_TRUE(files.Open(o_).ok());
  BootId earlier{}, now{};
  earlier[0] = 1;
  now[0] = 2;
  ASSERT_TRUE(files.Mark(true, earlier).ok());
  // In the same boot the records are trusted (the process died, the kernel kept them).
  absl::StatusOr<RecoveredFiles> same = SsdRecovery::Run(files, earlier);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->by_file[0].size(), 2u);
  absl::StatusOr<RecoveredFiles> other = SsdRecovery::Run(files, now);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->by_file[0].empty());
  EXPECT_EQ(other->discarded, 2u);  // the two winners; the loser was zeroed before
  EXPECT_EQ(other->max_sequence, 5u);
}

TEST_F(SsdRecoveryTest, NewFilesAreNotRead) {
  SsdFileSetOptions fresh = o_;
  fresh.paths = {TempPath("fresh")};
  fresh.capacity_bytes_per_file = 64 * kBlockBytes;
  ::unlink(fresh.paths[0].c_str());
  SsdFileSet files;
  ASSERT_TRUE(files.Open(fresh).ok());
  ASSERT_TRUE(files.created());
  absl::StatusOr<RecoveredFiles> r = SsdRecovery::Run(files, std::nullopt);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->by_file[0].empty());
  EXPECT_EQ(r->max_sequence, 0u);
}

}  // namespace
}  // namespace mooncake::tier_internal
