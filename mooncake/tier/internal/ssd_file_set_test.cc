#include "mooncake/tier/internal/ssd_file_set.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mooncake::tier_internal {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/file_set_" + name;
}

SsdFileSetOptions Options(std::vector<std::string> paths, uint64_t capacity) {
  for (const std::string& p : paths) ::unlink(p.c_str());
  return SsdFileSetOptions{std::move(paths), false, capacity, true};
}

FileHeader HeaderOnDisk(const std::string& path) {
  std::vector<std::byte> block(kBlockBytes);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(block.data()), kBlockBytes);
  absl::StatusOr<FileHeader> h = DecodeFileHeader(block);
  return h.ok() ? *h : FileHeader{};
}

TEST(SsdFileSetTest, CreatesASetThenReopensIt) {
  SsdFileSetOptions o = Options({TempPath("a0"), TempPath("a1")}, 64 * kBlockBytes);
  {
    SsdFileSet files;
    ASSERT_TRUE(files.Open(o).ok());
    EXPECT_TRUE(files.created());
    EXPECT_EQ(files.size(), 2u);
    EXPECT_EQ(files.usable_bytes(), 2 * 63 * kBlockBytes);
    EXPECT_EQ(files.usable_bytes(1), 63 * kBlockBytes);
    EXPECT_EQ(files.header(1).file_index, 1u);
    EXPECT_EQ(files.header(0).set_id, files.header(1).set_id);
    EXPECT_EQ(files.fds().size(), 2u);
  }
  o.capacity_bytes_per_file = 0;  // taken from the headers
  SsdFileSet again;
  ASSERT_TRUE(again.Open(o).ok());
  EXPECT_FALSE(again.created());
  EXPECT_EQ(again.usable_bytes(), 2 * 63 * kBlockBytes);
}

TEST(SsdFileSetTest, RefusesAPartialSetASizeMismatchAndASecondOpener) {
  SsdFileSetOptions o = Options({TempPath("b0"), TempPath("b1")}, 64 * kBlockBytes);
  {
    SsdFileSet files;
    ASSERT_TRUE(files.Open(o).ok());
    SsdFileSet second;  // the files are locked by `files`
    EXPECT_EQ(second.Open(o).code(), absl::StatusCode::kFailedPrecondition);
  }
  SsdFileSetOptions bigger = o;
  bigger.capacity_bytes_per_file = 128 * kBlockBytes;
  SsdFileSet mismatch;
  EXPECT_EQ(mismatch.Open(bigger).code(), absl::StatusCode::kFailedPrecondition);
  ::unlink(o.paths[1].c_str());
  SsdFileSet partial;
  EXPECT_EQ(partial.Open(o).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SsdFileSetTest, StartEmptyReplacesTheOldFiles) {
  SsdFileSetOptions o = Options({TempPath("c0")}, 64 * kBlockBytes);
  uint64_t old_set = 0;
  {
    SsdFileSet files;
    ASSERT_TRUE(files.Open(o).ok());
    old_set = files.header(0).set_id;
  }
  o.start_empty = true;
  o.capacity_bytes_per_file = 32 * kBlockBytes;  // a new size just works
  SsdFileSet files;
  ASSERT_TRUE(files.Open(o).ok());
  EXPECT_TRUE(files.created());
  EXPECT_NE(files.header(0).set_id, old_set);
  EXPECT_EQ(files.usable_bytes(), 31 * kBlockBytes);
}

TEST(SsdFileSetTest, MarkSetsAndClearsTheUnsyncedFlagOnDisk) {
  SsdFileSetOptions o = Options({TempPath("d0")}, 64 * kBlockBytes);
  SsdFileSet files;
  ASSERT_TRUE(files.Open(o).ok());
  BootId boot{};
  boot[0] = 0x42;
  ASSERT_TRUE(files.Mark(true, boot).ok());
  EXPECT_EQ(HeaderOnDisk(o.paths[0]).flags, kFileFlagUnsynced);
  EXPECT_EQ(HeaderOnDisk(o.paths[0]).boot_id, boot);
  EXPECT_EQ(files.header(0).flags, kFileFlagUnsynced);
  ASSERT_TRUE(files.Mark(false, std::nullopt).ok());
  EXPECT_EQ(HeaderOnDisk(o.paths[0]).flags, 0);
  EXPECT_EQ(HeaderOnDisk(o.paths[0]).boot_id, BootId{});
}

}  // namespace
}  // namespace mooncake::tier_internal
