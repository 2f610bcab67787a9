#include "mooncake/transport/shm_transport.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

struct ShmFactory {
  using Transport = ShmTransport;
  static constexpr bool kCrossProcess = true;
  static constexpr bool kUnregisterRevokes = false;  // peers keep their mapping
  static constexpr bool kMappingSurvivesOwner = true;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<ShmTransport> Make() {
    ShmTransport::Options o;
    o.io_timeout = absl::Seconds(5);
    auto t = ShmTransport::Create(o);
    return t.ok() ? std::move(*t) : nullptr;
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    absl::StatusOr<SharedMemory> m = SharedMemory::Create(length);
    if (!m.ok()) return m.status();
    auto holder = std::make_shared<SharedMemory>(std::move(*m));
    return KitBuffer{holder, static_cast<std::byte*>(holder->data())};
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(Shm, TransportConformanceTest, ShmFactory);

// Pages of [addr, addr + length) resident in this process's page tables or
// the memfd's page cache (mincore).
size_t ResidentPages(void* addr, uint64_t length) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((length + page - 1) / page);
  if (::mincore(addr, length, vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

TEST(SharedMemoryTest, ReservedMemoryIsResidentAtCreateLazyIsNot) {
  constexpr uint64_t kLength = 4 << 20;
  const size_t pages = kLength / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto lazy = SharedMemory::Create(kLength, Backing::kLazy);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  EXPECT_EQ(ResidentPages(lazy->data(), kLength), 0u);
  auto reserved = SharedMemory::Create(kLength, Backing::kReserved);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(ResidentPages(reserved->data(), kLength), pages);
  // Reserved memory is zeroed like lazy memory and writable.
  const auto* bytes = static_cast<const unsigned char*>(reserved->data());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[kLength - 1], 0);
  std::memset(reserved->data(), 0x5a, kLength);
  EXPECT_EQ(bytes[kLength / 2], 0x5a);
}

TEST(SharedMemoryTest, CgroupRoomCountsReclaimablePageCacheAsRoom) {
  using shm_internal::CgroupRoom;
  EXPECT_EQ(CgroupRoom("max\n", "1000\n", ""), std::nullopt);
  EXPECT_EQ(CgroupRoom("", "1000\n", ""), std::nullopt);
  EXPECT_EQ(CgroupRoom("5000\n", "1000\n", ""), 4000u);
  // 3000 used, 1500 of it file cache, 500 of that shmem: 1000 reclaimable.
  EXPECT_EQ(CgroupRoom("5000\n", "3000\n", "anon 1500\nfile 1500\nshmem 500\nfile_mapped 7\n"),
            3000u);
  // Only whole field names count ("file_mapped" is not "file").
  EXPECT_EQ(CgroupRoom("5000\n", "3000\n", "file_mapped 2000\n"), 2000u);
  EXPECT_EQ(CgroupRoom("5000\n", "6000\n", ""), 0u);  // over the limit
}

TEST(SharedMemoryTest, ProcCgroupFindsTheV2LineWhereverItIsAndTheV1MemoryController) {
  using shm_internal::ParseProcCgroup;
  const auto pure = ParseProcCgroup("0::/user.slice/app.scope\n");
  EXPECT_EQ(pure.v2, "/user.slice/app.scope");
  EXPECT_EQ(pure.v1_memory, std::nullopt);
  // A hybrid host lists its v1 hierarchies first.
  const auto hybrid = ParseProcCgroup(
      "12:pids:/a\n7:cpu,cpuacct:/b\n4:memory:/docker/abc\n1:name=systemd:/c\n0::/d\n");
  EXPECT_EQ(hybrid.v2, "/d");
  EXPECT_EQ(hybrid.v1_memory, "/docker/abc");
  EXPECT_EQ(ParseProcCgroup("3:blkio,memory:/x").v1_memory, "/x");  // no final newline
  EXPECT_EQ(ParseProcCgroup("3:memoryless:/x\n").v1_memory, std::nullopt);
  const auto junk = ParseProcCgroup("garbage\n::\n0::relative\n\n");
  EXPECT_EQ(junk.v2, std::nullopt);
  EXPECT_EQ(junk.v1_memory, std::nullopt);
}

// A cgroupfs laid out under a temporary directory.
class FakeCgroupFs {
 public:
  FakeCgroupFs()
      : root_(std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
              "/cgfs" + std::to_string(::getpid()) + "_" + std::to_string(next_++)) {
    ::mkdir(root_.c_str(), 0755);
  }
  void Write(const std::string& rel, const std::string& text) {
    std::string path = root_ + rel;
    for (size_t at = root_.size() + 1; (at = path.find('/', at)) != std::string::npos; ++at) {
      ::mkdir(path.substr(0, at).c_str(), 0755);
    }
    FILE* f = std::fopen(path.c_str(), "we");
    ASSERT_NE(f, nullptr) << path;
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  const std::string& root() const { return root_; }

 private:
  static inline int next_ = 0;
  std::string root_;
};

TEST(SharedMemoryTest, CgroupLimitsAreTheSmallestOfTheProcessCgroupAndItsParents) {
  using shm_internal::CgroupLimitFor;
  using shm_internal::CgroupRoomFor;
  FakeCgroupFs v2;
  // The limit is set on the parent slice; the process's own cgroup has none.
  v2.Write("/memory.stat", "file 0\n");  // the root cgroup: no memory.max
  v2.Write("/slice/memory.max", "8000\n");
  v2.Write("/slice/memory.current", "5000\n");
  v2.Write("/slice/memory.stat", "file 1000\nshmem 0\n");
  v2.Write("/slice/app/memory.max", "max\n");
  v2.Write("/slice/app/memory.current", "2000\n");
  v2.Write("/slice/app/memory.stat", "file 0\n");
  const std::string hybrid = "4:memory:/ignored\n0::/slice/app\n";
  EXPECT_EQ(CgroupLimitFor(hybrid, v2.root()), 8000u);
  EXPECT_EQ(CgroupRoomFor(hybrid, v2.root()), 4000u);  // 8000 - (5000 - 1000)
  v2.Write("/slice/app/memory.max", "3000\n");
  EXPECT_EQ(CgroupLimitFor(hybrid, v2.root()), 3000u);
  EXPECT_EQ(CgroupRoomFor(hybrid, v2.root()), 1000u);

  // v1 only (no v2 line, or a v2 path without memory files): the memory controller.
  FakeCgroupFs v1;
  v1.Write("/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  v1.Write("/memory/memory.usage_in_bytes", "100\n");
  v1.Write("/memory/docker/abc/memory.limit_in_bytes", "6000\n");
  v1.Write("/memory/docker/abc/memory.usage_in_bytes", "4000\n");
  v1.Write("/memory/docker/abc/memory.stat", "cache 1500\nshmem 500\nmapped_file 9\n");
  v1.Write("/memory/docker/memory.limit_in_bytes", "7000\n");
  v1.Write("/memory/docker/memory.usage_in_bytes", "4000\n");
  const std::string v1_only = "7:cpu:/x\n4:memory:/docker/abc\n1:name=systemd:/y\n";
  EXPECT_EQ(CgroupLimitFor(v1_only, v1.root()), 6000u);
  EXPECT_EQ(CgroupRoomFor(v1_only, v1.root()), 3000u);  // 6000 - (4000 - 1000)
  EXPECT_EQ(CgroupLimitFor(v1_only + "0::/\n", v1.root()), 6000u);

  // Nothing readable: no limit.
  FakeCgroupFs empty;
  EXPECT_EQ(CgroupLimitFor("0::/a/b\n", empty.root()), std::nullopt);
  EXPECT_EQ(CgroupRoomFor("0::/a/b\n", empty.root()), std::nullopt);
  EXPECT_EQ(CgroupLimitFor("", empty.root()), std::nullopt);
}

TEST(SharedMemoryTest, ReservingMoreThanAvailableIsResourceExhaustedNotOom) {
  const uint64_t avail = shm_internal::AvailableMemoryBytes();
  ASSERT_GT(avail, 0u) << "no MemAvailable in /proc/meminfo";
  auto m = SharedMemory::Create(avail + (uint64_t{1} << 30), Backing::kReserved);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  EXPECT_NE(m.status().message().find("available"), std::string::npos) << m.status();
  // The same size lazily costs nothing until touched.
  EXPECT_TRUE(SharedMemory::Create(avail + (uint64_t{1} << 30), Backing::kLazy).ok());
}

TEST(ShmTransportTest, RegistersOnlyWholeSharedMemory) {
  auto t = ShmFactory::Make();
  ASSERT_NE(t, nullptr);
  std::vector<char> heap(4096);
  EXPECT_EQ(t->RegisterMemory(heap.data(), heap.size(), MemoryLocation::HostDram()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto m = SharedMemory::Create(8192);
  ASSERT_TRUE(m.ok());
  // A sub-range would hand the peer an fd reaching past it: refused.
  EXPECT_EQ(t->RegisterMemory(m->data(), 4096, MemoryLocation::HostDram()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(t->RegisterMemory(m->data(), 8192, MemoryLocation::HostDram()).ok());
}

TEST(ShmTransportTest, SegmentOutlivesTheOwnersSharedMemoryObject) {
  auto owner = ShmFactory::Make();
  auto requester = ShmFactory::Make();
  SegmentId id;
  {
    auto m = SharedMemory::Create(4096);
    ASSERT_TRUE(m.ok());
    std::memset(m->data(), 0x5a, 4096);
    auto seg = owner->RegisterMemory(m->data(), 4096, MemoryLocation::HostDram());
    ASSERT_TRUE(seg.ok());
    id = seg->id;
  }  // unmapped here; the registered memfd keeps the bytes
  auto remote = requester->OpenSegment(owner->LocalEndpoint(), id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  char dst[16];
  const TransferRequest r{OpCode::kRead, dst, remote->handle, 4000, 16};
  auto b = requester->Submit({&r, 1});
  ASSERT_TRUE(b.ok());
  auto res = requester->Wait(*b, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(res.ok() && res->ok());
  EXPECT_EQ(dst[15], 0x5a);
}

TEST(ShmTransportTest, TransportsOfOneProcessShareOneMappingPerSegment) {
  auto owner = ShmFactory::Make();
  auto a = ShmFactory::Make();
  auto b = ShmFactory::Make();
  ASSERT_TRUE(owner && a && b);
  auto m = SharedMemory::Create(8192);
  ASSERT_TRUE(m.ok());
  auto seg = owner->RegisterMemory(m->data(), 8192, MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok());
  const size_t before = shm_internal::MappingCache::Get().live_mappings();
  auto ra = a->OpenSegment(owner->LocalEndpoint(), seg->id);
  auto rb = b->OpenSegment(owner->LocalEndpoint(), seg->id);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(shm_internal::MappingCache::Get().live_mappings(), before + 1);
  // A write through one transport is read through the other.
  char src[8] = "mapping";
  const TransferRequest w{OpCode::kWrite, src, ra->handle, 100, sizeof(src)};
  auto wb = a->Submit({&w, 1});
  ASSERT_TRUE(wb.ok());
  ASSERT_TRUE(a->Wait(*wb, absl::Now() + absl::Seconds(5))->ok());
  char dst[8] = {};
  const TransferRequest r{OpCode::kRead, dst, rb->handle, 100, sizeof(dst)};
  auto rbatch = b->Submit({&r, 1});
  ASSERT_TRUE(rbatch.ok());
  ASSERT_TRUE(b->Wait(*rbatch, absl::Now() + absl::Seconds(5))->ok());
  EXPECT_EQ(std::string(dst, sizeof(dst)), std::string(src, sizeof(src)));
  // Closing one keeps the other's mapping; closing both releases it.
  ASSERT_TRUE(a->CloseSegment(ra->handle).ok());
  EXPECT_EQ(shm_internal::MappingCache::Get().live_mappings(), before + 1);
  ASSERT_TRUE(b->CloseSegment(rb->handle).ok());
  EXPECT_EQ(shm_internal::MappingCache::Get().live_mappings(), before);
  // A fresh memfd of the same size is a new mapping, never the old one.
  auto m2 = SharedMemory::Create(8192);
  ASSERT_TRUE(m2.ok());
  std::memset(m2->data(), 0x11, 8192);
  auto seg2 = owner->RegisterMemory(m2->data(), 8192, MemoryLocation::HostDram());
  ASSERT_TRUE(seg2.ok());
  auto r2 = a->OpenSegment(owner->LocalEndpoint(), seg2->id);
  ASSERT_TRUE(r2.ok());
  char one = 0;
  const TransferRequest r1{OpCode::kRead, &one, r2->handle, 100, 1};
  auto b1 = a->Submit({&r1, 1});
  ASSERT_TRUE(b1.ok());
  ASSERT_TRUE(a->Wait(*b1, absl::Now() + absl::Seconds(5))->ok());
  EXPECT_EQ(one, 0x11);
}

TEST(ShmTransportTest, NameInUseIsAClearError) {
  ShmTransport::Options o;
  o.socket_name = "@mooncake-shm-test-dup-" + std::to_string(::getpid());
  auto a = ShmTransport::Create(o);
  ASSERT_TRUE(a.ok());
  auto b = ShmTransport::Create(o);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("in use"), std::string::npos) << b.status();
}

}  // namespace
}  // namespace mooncake::transport
