#include "mooncake/transport/cuda_transport.h"

#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/transport_testing.h"

// Without a GPU: checks the "no CUDA device" Status and skips the GPU tests
// (MOONCAKE_REQUIRE_GPU=1, set by tools/gpu_check.sh, turns skips into
// failures). With a GPU: same-process copies in every direction, bounds and
// bad input, the conformance kit on host segments, and a second process that
// opens a GPU segment through CUDA IPC.

extern char** environ;

namespace mooncake::transport {
namespace {

namespace ti = transport_testing_internal;

bool HasGpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

bool GpuRequired() {
  const char* v = std::getenv("MOONCAKE_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

#define MC_NEED_GPU()                                                   \
  do {                                                                  \
    if (!HasGpu()) {                                                    \
      if (GpuRequired()) FAIL() << "MOONCAKE_REQUIRE_GPU=1 but no GPU"; \
      GTEST_SKIP() << "no CUDA device on this host";                    \
    }                                                                   \
  } while (false)

struct CudaHostFactory {
  using Transport = CudaTransport;
  static constexpr bool kCrossProcess = false;  // host segments are same-process only
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static std::unique_ptr<CudaTransport> Make() {
    auto t = CudaTransport::Create();
    MC_ASSERT(t.ok(), "a GPU is present but the CUDA transport did not start");
    return std::move(*t);
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(CudaHost, TransportConformanceTest, CudaHostFactory);

// Device memory freed with the scope.
struct GpuBuffer {
  void* ptr = nullptr;
  explicit GpuBuffer(size_t n) { MC_ASSERT(cudaMalloc(&ptr, n) == cudaSuccess, "cudaMalloc"); }
  ~GpuBuffer() { cudaFree(ptr); }
};

absl::StatusOr<BatchResult> RunOn(CudaTransport& t, const std::vector<TransferRequest>& reqs) {
  auto id = t.Submit(reqs);
  if (!id.ok()) return id.status();
  return t.Wait(*id, absl::Now() + absl::Seconds(20));
}

TEST(CudaTransportTest, StartsOrSaysThereIsNoGpu) {
  auto t = CudaTransport::Create();
  if (HasGpu()) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->Name(), "cuda");
    EXPECT_GE((*t)->device_count(), 1);
  } else {
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(t.status().message().find("no CUDA device"), absl::string_view::npos) << t.status();
    EXPECT_FALSE(GpuRequired()) << "MOONCAKE_REQUIRE_GPU=1 but no GPU";
  }
  // Options are validated before the device probe, on every host.
  EXPECT_EQ(CudaTransport::Create(CudaOptions{.streams_per_device = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaTransportTest, ErrorsMapToCanonicalCodes) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  EXPECT_EQ(CudaStatus(cudaErrorInvalidValue, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x").code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status s = CudaStatus(cudaErrorIllegalAddress, "copy");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaErrorIllegalAddress"), absl::string_view::npos) << s;
}

TEST(CudaTransportTest, SameProcessCopiesEveryDirection) {
  MC_NEED_GPU();
  auto t = *CudaTransport::Create();
  constexpr size_t kLen = (8 << 20) + 123;
  GpuBuffer seg_mem(kLen), other(kLen);
  // A segment that starts inside its allocation exercises the base lookup.
  auto seg =
      t->RegisterMemory(static_cast<char*>(seg_mem.ptr) + 64, kLen - 64, MemoryLocation::Gpu(0));
  ASSERT_TRUE(seg.ok()) << seg.status();
  auto remote = t->OpenSegment(t->LocalEndpoint(), seg->id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<std::byte> src(kLen - 64), back(kLen - 64);
  ti::FillPattern(src.data(), src.size(), 3);
  auto w = RunOn(*t, {{OpCode::kWrite, src.data(), remote->handle, 0, src.size()}});
  ASSERT_TRUE(w.ok() && w->ok()) << (w.ok() ? w->FirstError() : w.status());
  // GPU -> GPU through a device pointer as the local buffer, then GPU -> host.
  auto d2d = RunOn(*t, {{OpCode::kRead, other.ptr, remote->handle, 0, src.size()}});
  ASSERT_TRUE(d2d.ok() && d2d->ok());
  ASSERT_EQ(cudaMemcpy(back.data(), other.ptr, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(ti::CheckPattern(back.data(), back.size(), 3), -1);
  std::fill(back.begin(), back.end(), std::byte{0});
  std::vector<TransferRequest> pieces;
  for (size_t off = 0; off < back.size(); off += 1 << 20) {
    pieces.push_back({OpCode::kRead, back.data() + off, remote->handle, off,
                      std::min<size_t>(1 << 20, back.size() - off)});
  }
  auto r = RunOn(*t, pieces);
  ASSERT_TRUE(r.ok() && r->ok());
  EXPECT_EQ(ti::CheckPattern(back.data(), back.size(), 3), -1);
  EXPECT_GE(t->metrics().Bytes(OpCode::kRead), 2 * src.size());
}

TEST(CudaTransportTest, RejectsBadSegmentsAndRequests) {
  MC_NEED_GPU();
  auto t = *CudaTransport::Create();
  std::vector<char> host(4096);
  EXPECT_EQ(t->RegisterMemory(host.data(), host.size(), MemoryLocation::Gpu(0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  GpuBuffer mem(4096);
  EXPECT_EQ(t->RegisterMemory(mem.ptr, 4096, MemoryLocation::Gpu(999)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t->RegisterMemory(mem.ptr, 8192, MemoryLocation::Gpu(0)).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a segment past its allocation must be rejected";
  auto seg = t->RegisterMemory(mem.ptr, 4096, MemoryLocation::Gpu(0));
  ASSERT_TRUE(seg.ok());
  auto remote = t->OpenSegment(t->LocalEndpoint(), seg->id);
  ASSERT_TRUE(remote.ok());
  auto r = RunOn(*t, {{OpCode::kRead, host.data(), remote->handle, 4000, 200},
                      {OpCode::kRead, nullptr, remote->handle, 0, 16},
                      {OpCode::kRead, host.data(), 777, 0, 16},
                      {OpCode::kRead, host.data(), remote->handle, 0, 4096}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->statuses[0].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(r->statuses[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r->statuses[2].code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(r->statuses[3].ok()) << r->statuses[3];
  EXPECT_EQ(t->OpenSegment("cuda://mooncake-cuda-no-such-owner", 1).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(t->OpenSegment("shm://x", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// The owner half of CrossProcessIpc, run in a fresh process (CUDA cannot be
// used across fork()): registers a GPU segment holding pattern 11, prints
// "<endpoint> <id>" on stdout, then on stdin 'c' checks that the first half
// now holds pattern 12 and exits 0 (1 if not).
int OwnerMain() {
  auto t = CudaTransport::Create();
  if (!t.ok()) return 10;
  constexpr size_t kLen = 4 << 20;
  GpuBuffer mem(kLen);
  std::vector<std::byte> host(kLen);
  ti::FillPattern(host.data(), kLen, 11);
  if (cudaMemcpy(mem.ptr, host.data(), kLen, cudaMemcpyHostToDevice) != cudaSuccess) return 11;
  auto seg = (*t)->RegisterMemory(mem.ptr, kLen, MemoryLocation::Gpu(0));
  if (!seg.ok()) return 12;
  std::printf("%s %llu\n", (*t)->LocalEndpoint().c_str(), static_cast<unsigned long long>(seg->id));
  std::fflush(stdout);
  char cmd = 0;
  if (std::fread(&cmd, 1, 1, stdin) != 1 || cmd != 'c') return 13;
  if (cudaMemcpy(host.data(), mem.ptr, kLen, cudaMemcpyDeviceToHost) != cudaSuccess) return 14;
  return ti::CheckPattern(host.data(), kLen / 2, 12) == -1 ? 0 : 1;
}

TEST(CudaTransportTest, CrossProcessIpc) {
  MC_NEED_GPU();
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  char arg0[] = "cuda_transport_test";
  char arg1[] = "--cuda_owner";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  ::close(to_child[0]);
  ::close(from_child[1]);
  char line[256] = {};
  ASSERT_TRUE(ti::ReadFull(from_child[0], line, 1, absl::Now() + absl::Seconds(30)));
  size_t n = 1;
  while (n < sizeof(line) - 1 && line[n - 1] != '\n' &&
         ti::ReadFull(from_child[0], line + n, 1, absl::Now() + absl::Seconds(10))) {
    ++n;
  }
  char endpoint[200] = {};
  unsigned long long id = 0;
  ASSERT_EQ(std::sscanf(line, "%199s %llu", endpoint, &id), 2) << line;

  auto t = *CudaTransport::Create();
  auto remote = t->OpenSegment(endpoint, id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  constexpr size_t kLen = 4 << 20;
  EXPECT_EQ(remote->length, kLen);
  std::vector<std::byte> dst(kLen), src(kLen / 2);
  ti::FillPattern(src.data(), src.size(), 12);
  auto r = RunOn(*t, {{OpCode::kRead, dst.data(), remote->handle, 0, kLen},
                      {OpCode::kRead, dst.data(), remote->handle, kLen, 1}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->statuses[0].ok()) << r->statuses[0];
  EXPECT_EQ(r->statuses[1].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ti::CheckPattern(dst.data(), kLen, 11), -1);
  auto w = RunOn(*t, {{OpCode::kWrite, src.data(), remote->handle, 0, src.size()}});
  ASSERT_TRUE(w.ok() && w->ok());
  // A second open of the same allocation shares the mapping.
  auto again = t->OpenSegment(endpoint, id);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(t->CloseSegment(again->handle).ok());
  ASSERT_TRUE(t->CloseSegment(remote->handle).ok());
  EXPECT_EQ(t->OpenSegment(endpoint, id + 100).status().code(), absl::StatusCode::kNotFound);
  const char cmd = 'c';
  ASSERT_EQ(::write(to_child[1], &cmd, 1), 1);
  ::close(to_child[1]);
  EXPECT_EQ(ti::ReapChild(pid, absl::Now() + absl::Seconds(30)), 0)
      << "the owner did not see the written bytes";
  ::close(from_child[0]);
}

}  // namespace
}  // namespace mooncake::transport

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cuda_owner") == 0) return mooncake::transport::OwnerMain();
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (!mooncake::transport::HasGpu()) {
    std::fprintf(stderr,
                 "no CUDA device on this host: the GPU conformance suite (CudaHost/*) "
                 "is filtered out and GPU tests skip; the no-GPU Status is checked\n");
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += filter.find('-') == std::string::npos ? "-CudaHost/*" : ":CudaHost/*";
    ::testing::GTEST_FLAG(filter) = filter;
  }
  return RUN_ALL_TESTS();
}
