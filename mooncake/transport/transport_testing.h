// Conformance kit for the Transport concept (transport.h).
//
// Every model instantiates it in one line with a factory type F:
//
//   struct MyFactory {
//     using Transport = MyTransport;
//     static constexpr bool kCrossProcess = true;     // run the fork()ed-owner tests
//     static constexpr bool kUnregisterRevokes = true; // requests fail once unregistered
//     static constexpr bool kMappingSurvivesOwner = false;  // SHM: reads work after owner death
//     static constexpr bool kDigestsOnLanding = true;  // optional: fills every chunk digest
//     static std::unique_ptr<MyTransport> Make();
//     // Memory the model can register: {holder, data}.
//     static absl::StatusOr<KitBuffer> Allocate(uint64_t length);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, TransportConformanceTest, MyFactory);
//
// It checks: byte-exact WRITE/READ round trips over segments owned by another
// instance (and, for cross-process models, by a fork()ed owner process);
// per-request failures (OutOfRange, InvalidArgument, NotFound) that leave the
// rest of the batch intact; batch-shape errors; NotFound for released ids;
// unregistering; Poll/Wait/Cancel; concurrent batches; metrics; chunk digests
// (any slot filled holds the digest of the bytes that landed; a model with
// kDigestsOnLanding fills them all); and that a dead owner makes new opens
// fail cleanly within a deadline.
#ifndef MOONCAKE_TRANSPORT_TRANSPORT_TESTING_H_
#define MOONCAKE_TRANSPORT_TRANSPORT_TESTING_H_

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport {

struct KitBuffer {
  std::shared_ptr<void> holder;  // owns the memory
  std::byte* data = nullptr;
};

// Plain heap memory, for models that register any host memory.
inline absl::StatusOr<KitBuffer> AllocateHeapKitBuffer(uint64_t length) {
  auto holder = std::shared_ptr<std::byte[]>(new std::byte[length]);
  return KitBuffer{holder, holder.get()};
}

namespace transport_testing_internal {

inline constexpr absl::Duration kKitDeadline = absl::Seconds(20);

// Byte i of a pattern seeded by `seed`: differs per seed and per position.
inline std::byte PatternByte(uint64_t seed, uint64_t i) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xFF);
}
inline void FillPattern(std::byte* p, uint64_t n, uint64_t seed, uint64_t start = 0) {
  for (uint64_t i = 0; i < n; ++i) p[i] = PatternByte(seed, start + i);
}
// Index of the first mismatch, or -1.
inline int64_t CheckPattern(const std::byte* p, uint64_t n, uint64_t seed, uint64_t start = 0) {
  for (uint64_t i = 0; i < n; ++i) {
    if (p[i] != PatternByte(seed, start + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

template <typename T>
absl::StatusOr<BatchResult> RunBatch(T& t, const std::vector<TransferRequest>& reqs) {
  absl::StatusOr<BatchId> id = t.Submit(reqs);
  if (!id.ok()) return id.status();
  return t.Wait(*id, absl::Now() + kKitDeadline);
}

// Reads exactly n bytes from fd before the deadline.
inline bool ReadFull(int fd, void* buf, size_t n, absl::Time deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || ::poll(&pfd, 1, static_cast<int>(ms)) <= 0) return false;
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Waits for a child up to the deadline, then kills it. Returns its exit code
// (or 128 + signal).
inline int ReapChild(pid_t pid, absl::Time deadline) {
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 200;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

template <typename F>
constexpr bool DigestsOnLanding() {
  if constexpr (requires { F::kDigestsOnLanding; }) {
    return F::kDigestsOnLanding;
  } else {
    return false;
  }
}

// What an owner process tells the requester.
struct OwnerAd {
  char endpoint[200] = {};
  SegmentId id = 0;
  uint64_t length = 0;
};

// Body of a fork()ed owner: makes a transport and a segment filled with
// `seed`'s pattern, advertises it on `ad_fd`, waits for a command byte on
// `cmd_fd`: 'c' = check that [0, half) now holds pattern seed+1 and exit
// 0/1; 'x' = exit 0 at once. Never returns; exits itself within 30 s.
template <typename F>
[[noreturn]] void OwnerProcess(int ad_fd, int cmd_fd, uint64_t length, uint64_t seed) {
  ::alarm(30);
  auto t = F::Make();
  absl::StatusOr<KitBuffer> buf = F::Allocate(length);
  if (!buf.ok()) ::_exit(10);
  FillPattern(buf->data, length, seed);
  absl::StatusOr<SegmentDesc> seg =
      t->RegisterMemory(buf->data, length, MemoryLocation::HostDram());
  if (!seg.ok()) ::_exit(11);
  OwnerAd ad;
  std::snprintf(ad.endpoint, sizeof(ad.endpoint), "%s", t->LocalEndpoint().c_str());
  ad.id = seg->id;
  ad.length = length;
  if (::write(ad_fd, &ad, sizeof(ad)) != sizeof(ad)) ::_exit(12);
  char cmd = 0;
  if (!ReadFull(cmd_fd, &cmd, 1, absl::Now() + absl::Seconds(25))) ::_exit(13);
  if (cmd == 'x') ::_exit(0);
  // The requester had its WRITE acknowledged before it sent 'c', but that
  // ordering runs through the other process, where ThreadSanitizer cannot
  // follow it. Unregistering waits for the transport's frames in progress on
  // the segment (TcpServer drains them under the segment's lock), which it can.
  t->UnregisterMemory(seg->id).IgnoreError();
  const bool written = CheckPattern(buf->data, length / 2, seed + 1) == -1;
  t.reset();  // joins the transport's threads (TSAN reports threads left unjoined at exit)
  ::_exit(written ? 0 : 1);
}

// A fork()ed owner process, from the requester's side.
struct Owner {
  pid_t pid = -1;
  int cmd_fd = -1;
  OwnerAd ad;
};

template <typename F>
bool StartOwner(Owner* owner, uint64_t length, uint64_t seed) {
  int ad[2], cmd[2];
  if (::pipe(ad) != 0 || ::pipe(cmd) != 0) return false;
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::close(ad[0]);
    ::close(cmd[1]);
    OwnerProcess<F>(ad[1], cmd[0], length, seed);
  }
  ::close(ad[1]);
  ::close(cmd[0]);
  owner->pid = pid;
  owner->cmd_fd = cmd[1];
  const bool ok = ReadFull(ad[0], &owner->ad, sizeof(owner->ad), absl::Now() + kKitDeadline);
  ::close(ad[0]);
  return ok;
}

}  // namespace transport_testing_internal

template <typename Factory>
class TransportConformanceTest : public ::testing::Test {
 protected:
  using T = typename Factory::Transport;

  // An owner instance with one registered segment of `length` bytes holding
  // pattern `seed`, opened from a separate requester instance.
  void SetUpPair(uint64_t length, uint64_t seed) {
    owner_ = Factory::Make();
    requester_ = Factory::Make();
    absl::StatusOr<KitBuffer> buf = Factory::Allocate(length);
    ASSERT_TRUE(buf.ok()) << buf.status();
    buf_ = *buf;
    transport_testing_internal::FillPattern(buf_.data, length, seed);
    absl::StatusOr<SegmentDesc> seg =
        owner_->RegisterMemory(buf_.data, length, MemoryLocation::HostDram());
    ASSERT_TRUE(seg.ok()) << seg.status();
    seg_ = *seg;
    EXPECT_EQ(seg_.length, length);
    absl::StatusOr<RemoteSegment> remote =
        requester_->OpenSegment(owner_->LocalEndpoint(), seg_.id);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = *remote;
    EXPECT_EQ(remote_.length, length);
  }

  TransferRequest Req(OpCode op, void* local, uint64_t offset, uint64_t length) const {
    return TransferRequest{op, local, remote_.handle, offset, length};
  }

  // Declared first, destroyed last: the owner's memory outlives both
  // transports (an owner thread may still be in the sendmsg of a READ reply).
  KitBuffer buf_;
  std::unique_ptr<T> owner_;
  std::unique_ptr<T> requester_;
  SegmentDesc seg_;
  RemoteSegment remote_;
};

TYPED_TEST_SUITE_P(TransportConformanceTest);

TYPED_TEST_P(TransportConformanceTest, ModelsTheConcept) {
  static_assert(Transport<typename TypeParam::Transport>);
  auto t = TypeParam::Make();
  EXPECT_FALSE(std::string_view(t->Name()).empty());
  EXPECT_FALSE(t->LocalEndpoint().empty());
}

TYPED_TEST_P(TransportConformanceTest, ReadsWhatTheOwnerHolds) {
  namespace ti = transport_testing_internal;
  constexpr uint64_t kLen = (3 << 20) + 4097;  // several slices and an odd tail
  this->SetUpPair(kLen, 7);
  std::vector<std::byte> whole(kLen), head(100), mid(300000);
  std::vector<TransferRequest> reqs = {this->Req(OpCode::kRead, whole.data(), 0, kLen),
                                       this->Req(OpCode::kRead, head.data(), 0, head.size()),
                                       this->Req(OpCode::kRead, mid.data(), 12345, mid.size())};
  absl::StatusOr<BatchResult> r = ti::RunBatch(*this->requester_, reqs);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->statuses.size(), 3u);
  EXPECT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(ti::CheckPattern(whole.data(), kLen, 7), -1);
  EXPECT_EQ(ti::CheckPattern(head.data(), head.size(), 7), -1);
  EXPECT_EQ(ti::CheckPattern(mid.data(), mid.size(), 7, 12345), -1);
}

TYPED_TEST_P(TransportConformanceTest, ChunkDigestsAreOfTheLandedBytes) {
  namespace ti = transport_testing_internal;
  constexpr uint64_t kLen = (3 << 20) + 4097;
  this->SetUpPair(kLen, 5);
  std::vector<std::byte> whole(kLen), mid(700001);
  std::vector<uint64_t> dw(DigestChunkCount(whole.size()), kNoDigest);
  std::vector<uint64_t> dm(DigestChunkCount(mid.size()), kNoDigest);
  std::vector<TransferRequest> reqs = {this->Req(OpCode::kRead, whole.data(), 0, kLen),
                                       this->Req(OpCode::kRead, mid.data(), 777, mid.size())};
  reqs[0].chunk_digests = dw.data();
  reqs[1].chunk_digests = dm.data();
  absl::StatusOr<BatchResult> r = ti::RunBatch(*this->requester_, reqs);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->ok()) << r->FirstError();
  EXPECT_EQ(ti::CheckPattern(whole.data(), kLen, 5), -1);
  EXPECT_EQ(ti::CheckPattern(mid.data(), mid.size(), 5, 777), -1);
  constexpr bool kAll = ti::DigestsOnLanding<TypeParam>();
  for (auto [buf, d] : {std::pair{&whole, &dw}, std::pair{&mid, &dm}}) {
    for (uint64_t k = 0; k < d->size(); ++k) {
      const uint64_t from = k * kDigestChunkBytes;
      const uint64_t n = std::min(kDigestChunkBytes, buf->size() - from);
      if ((*d)[k] == kNoDigest && !kAll) continue;
      EXPECT_EQ((*d)[k], ChunkDigest(buf->data() + from, n)) << "chunk " << k;
    }
    EXPECT_EQ(ValueChecksumWith(buf->data(), buf->size(), d->data()),
              ValueChecksum(buf->data(), buf->size()));
  }
}

TYPED_TEST_P(TransportConformanceTest, WritesLandExactlyInRange) {
  namespace ti = transport_testing_internal;
  constexpr uint64_t kLen = 1 << 20;
  this->SetUpPair(kLen, 1);
  std::vector<std::byte> src(600000);
  ti::FillPattern(src.data(), src.size(), 2);
  auto r = ti::RunBatch(*this->requester_, {this->Req(OpCode::kWrite, src.data(), 1000, src.size()),
                                            this->Req(OpCode::kWrite, src.data(), kLen - 10, 10)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->FirstError();
  // Read the whole segment back through the transport and check every byte.
  std::vector<std::byte> back(kLen);
  auto rb = ti::RunBatch(*this->requester_, {this->Req(OpCode::kRead, back.data(), 0, kLen)});
  ASSERT_TRUE(rb.ok() && rb->ok());
  EXPECT_EQ(ti::CheckPattern(back.data(), 1000, 1), -1);
  EXPECT_EQ(ti::CheckPattern(back.data() + 1000, src.size(), 2), -1);
  EXPECT_EQ(ti::CheckPattern(back.data() + 601000, kLen - 10 - 601000, 1, 601000), -1);
  EXPECT_EQ(ti::CheckPattern(back.data() + kLen - 10, 10, 2), -1);
}

TYPED_TEST_P(TransportConformanceTest, PerRequestFailuresLeaveTheRestIntact) {
  namespace ti = transport_testing_internal;
  constexpr uint64_t kLen = 64 << 10;
  this->SetUpPair(kLen, 3);
  std::vector<std::byte> a(4096), b(4096), big(kLen + 1);
  std::vector<TransferRequest> reqs = {
      this->Req(OpCode::kRead, a.data(), 0, a.size()),
      this->Req(OpCode::kRead, b.data(), kLen - 100, 200),         // past the end
      this->Req(OpCode::kWrite, big.data(), 0, big.size()),        // longer than the segment
      this->Req(OpCode::kRead, b.data(), 0, 0),                    // zero length
      this->Req(OpCode::kRead, nullptr, 0, 16),                    // null address
      TransferRequest{OpCode::kRead, b.data(), 987654321, 0, 16},  // unknown handle
      this->Req(OpCode::kRead, b.data(), ~uint64_t{0} - 8, 16),    // offset overflow
      this->Req(OpCode::kRead, b.data(), kLen - b.size(), b.size()),
  };
  auto r = ti::RunBatch(*this->requester_, reqs);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->statuses.size(), reqs.size());
  EXPECT_TRUE(r->statuses[0].ok()) << r->statuses[0];
  EXPECT_EQ(r->statuses[1].code(), absl::StatusCode::kOutOfRange) << r->statuses[1];
  EXPECT_EQ(r->statuses[2].code(), absl::StatusCode::kOutOfRange) << r->statuses[2];
  EXPECT_EQ(r->statuses[3].code(), absl::StatusCode::kInvalidArgument) << r->statuses[3];
  EXPECT_EQ(r->statuses[4].code(), absl::StatusCode::kInvalidArgument) << r->statuses[4];
  EXPECT_EQ(r->statuses[5].code(), absl::StatusCode::kNotFound) << r->statuses[5];
  EXPECT_EQ(r->statuses[6].code(), absl::StatusCode::kInvalidArgument) << r->statuses[6];
  EXPECT_TRUE(r->statuses[7].ok()) << r->statuses[7];
  EXPECT_EQ(r->failed_count(), 6u);
  EXPECT_EQ(ti::CheckPattern(a.data(), a.size(), 3), -1);
  EXPECT_EQ(ti::CheckPattern(b.data(), b.size(), 3, kLen - b.size()), -1);
  // The rejected write must not have touched the owner's bytes.
  std::vector<std::byte> back(kLen);
  auto rb = ti::RunBatch(*this->requester_, {this->Req(OpCode::kRead, back.data(), 0, kLen)});
  ASSERT_TRUE(rb.ok() && rb->ok());
  EXPECT_EQ(ti::CheckPattern(back.data(), kLen, 3), -1);
}

TYPED_TEST_P(TransportConformanceTest, BatchShapeErrorsAndReleasedIds) {
  namespace ti = transport_testing_internal;
  this->SetUpPair(4096, 4);
  auto& t = *this->requester_;
  EXPECT_EQ(t.Submit(std::span<const TransferRequest>()).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::byte> dst(8);
  std::vector<TransferRequest> too_many(kMaxBatchRequests + 1,
                                        this->Req(OpCode::kRead, dst.data(), 0, 8));
  EXPECT_EQ(t.Submit(too_many).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<TransferRequest> one = {this->Req(OpCode::kRead, dst.data(), 0, 8)};
  absl::StatusOr<BatchId> id = t.Submit(one);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<BatchProgress> p = t.Poll(*id);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->total_requests, 1u);
  auto r = t.Wait(*id, absl::Now() + ti::kKitDeadline);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(t.Wait(*id, absl::Now()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.Poll(*id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.Cancel(*id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.CloseSegment(424242).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.UnregisterMemory(424242).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.OpenSegment(this->owner_->LocalEndpoint(), 424242).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(t.OpenSegment("no-such-scheme://x", 1).ok());
  EXPECT_FALSE(this->owner_->RegisterMemory(nullptr, 10, MemoryLocation::HostDram()).ok());
}

TYPED_TEST_P(TransportConformanceTest, UnregisterStopsNewOpens) {
  namespace ti = transport_testing_internal;
  this->SetUpPair(8192, 5);
  ASSERT_TRUE(this->owner_->UnregisterMemory(this->seg_.id).ok());
  EXPECT_EQ(this->owner_->UnregisterMemory(this->seg_.id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(
      this->requester_->OpenSegment(this->owner_->LocalEndpoint(), this->seg_.id).status().code(),
      absl::StatusCode::kNotFound);
  std::vector<std::byte> dst(16);
  auto r = ti::RunBatch(*this->requester_, {this->Req(OpCode::kRead, dst.data(), 0, 16)});
  ASSERT_TRUE(r.ok()) << r.status();
  if (TypeParam::kUnregisterRevokes) {
    EXPECT_EQ(r->statuses[0].code(), absl::StatusCode::kNotFound) << r->statuses[0];
  } else {
    EXPECT_TRUE(r->statuses[0].ok()) << "an existing mapping stays readable";
  }
  ASSERT_TRUE(this->requester_->CloseSegment(this->remote_.handle).ok());
  auto closed = ti::RunBatch(*this->requester_, {this->Req(OpCode::kRead, dst.data(), 0, 16)});
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(closed->statuses[0].code(), absl::StatusCode::kNotFound);
}

TYPED_TEST_P(TransportConformanceTest, CancelReleasesTheBatch) {
  this->SetUpPair(2 << 20, 6);
  std::vector<std::byte> dst(2 << 20);
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(
        this->Req(OpCode::kRead, dst.data() + i * (256 << 10), i * (256 << 10), 256 << 10));
  }
  absl::StatusOr<BatchId> id = this->requester_->Submit(reqs);
  ASSERT_TRUE(id.ok());
  absl::StatusOr<BatchResult> r = this->requester_->Cancel(*id);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->statuses.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const absl::Status& s = r->statuses[i];
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kCancelled) << s;
    if (s.ok()) {
      EXPECT_EQ(transport_testing_internal::CheckPattern(dst.data() + i * (256 << 10), 256 << 10, 6,
                                                         i * (256 << 10)),
                -1);
    }
  }
  EXPECT_EQ(this->requester_->Wait(*id, absl::Now()).status().code(), absl::StatusCode::kNotFound);
}

TYPED_TEST_P(TransportConformanceTest, ConcurrentBatchesFromManyThreads) {
  namespace ti = transport_testing_internal;
  constexpr uint64_t kLen = 1 << 20;
  this->SetUpPair(kLen, 9);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      // Disjoint destinations: the two requests of a batch may be received at
      // once (TCP lanes), and two READs into the same bytes would race.
      std::vector<std::byte> dst(64 << 10), first(1);
      for (int i = 0; i < 10; ++i) {
        const uint64_t off = ((w * 10 + i) * 20011ull) % (kLen - dst.size());
        auto r =
            ti::RunBatch(*this->requester_, {this->Req(OpCode::kRead, dst.data(), off, dst.size()),
                                             this->Req(OpCode::kRead, first.data(), off, 1)});
        if (!r.ok() || !r->ok() || ti::CheckPattern(dst.data(), dst.size(), 9, off) != -1 ||
            ti::CheckPattern(first.data(), 1, 9, off) != -1) {
          ++bad[w];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(bad[w], 0) << "worker " << w;
}

TYPED_TEST_P(TransportConformanceTest, MetricsCountBytesOpsAndErrors) {
  namespace ti = transport_testing_internal;
  this->SetUpPair(8192, 10);
  // The WRITE's source is its own buffer (the READ may fill dst meanwhile),
  // and its range at the owner is not one the READs read at the same time.
  std::vector<std::byte> dst(8192), src(100);
  auto& m = this->requester_->metrics();
  const uint64_t bytes0 = m.Bytes(OpCode::kRead), errors0 = m.Errors(OpCode::kRead);
  const uint64_t writes0 = m.Ops(OpCode::kWrite);
  auto r = ti::RunBatch(*this->requester_, {this->Req(OpCode::kRead, dst.data(), 0, 5000),
                                            this->Req(OpCode::kRead, dst.data(), 8000, 500),
                                            this->Req(OpCode::kWrite, src.data(), 6000, 100)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(m.Bytes(OpCode::kRead) - bytes0, 5000u);
  EXPECT_EQ(m.Errors(OpCode::kRead) - errors0, 1u);
  EXPECT_EQ(m.Ops(OpCode::kWrite) - writes0, 1u);
  EXPECT_GE(m.BatchLatency().Count(), 1u);
}

TYPED_TEST_P(TransportConformanceTest, CrossProcessOwner) {
  namespace ti = transport_testing_internal;
  if (!TypeParam::kCrossProcess) GTEST_SKIP() << "same-process model";
  constexpr uint64_t kLen = 2 << 20;
  ti::Owner owner;
  ASSERT_TRUE(ti::StartOwner<TypeParam>(&owner, kLen, 21)) << "owner process did not start";
  auto t = TypeParam::Make();
  absl::StatusOr<RemoteSegment> remote = t->OpenSegment(owner.ad.endpoint, owner.ad.id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<std::byte> dst(kLen), src(kLen / 2);
  ti::FillPattern(src.data(), src.size(), 22);
  auto r = ti::RunBatch(*t, {TransferRequest{OpCode::kRead, dst.data(), remote->handle, 0, kLen},
                             TransferRequest{OpCode::kRead, dst.data(), remote->handle, kLen, 1}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->statuses[0].ok()) << r->statuses[0];
  EXPECT_EQ(r->statuses[1].code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ti::CheckPattern(dst.data(), kLen, 21), -1);
  auto w = ti::RunBatch(
      *t, {TransferRequest{OpCode::kWrite, src.data(), remote->handle, 0, src.size()}});
  ASSERT_TRUE(w.ok() && w->ok()) << (w.ok() ? w->FirstError() : w.status());
  const char cmd = 'c';
  ASSERT_EQ(::write(owner.cmd_fd, &cmd, 1), 1);
  ::close(owner.cmd_fd);
  EXPECT_EQ(ti::ReapChild(owner.pid, absl::Now() + ti::kKitDeadline), 0)
      << "the owner did not see the written bytes";
}

TYPED_TEST_P(TransportConformanceTest, DeadOwnerFailsCleanly) {
  namespace ti = transport_testing_internal;
  if (!TypeParam::kCrossProcess) GTEST_SKIP() << "same-process model";
  constexpr uint64_t kLen = 256 << 10;
  ti::Owner owner;
  ASSERT_TRUE(ti::StartOwner<TypeParam>(&owner, kLen, 31));
  auto t = TypeParam::Make();
  absl::StatusOr<RemoteSegment> remote = t->OpenSegment(owner.ad.endpoint, owner.ad.id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ::kill(owner.pid, SIGKILL);
  ti::ReapChild(owner.pid, absl::Now() + ti::kKitDeadline);
  ::close(owner.cmd_fd);
  const absl::Time start = absl::Now();
  absl::StatusOr<RemoteSegment> again = t->OpenSegment(owner.ad.endpoint, owner.ad.id);
  EXPECT_FALSE(again.ok());
  EXPECT_TRUE(absl::IsUnavailable(again.status()) || absl::IsDeadlineExceeded(again.status()))
      << again.status();
  std::vector<std::byte> dst(kLen);
  auto r = ti::RunBatch(*t, {TransferRequest{OpCode::kRead, dst.data(), remote->handle, 0, kLen}});
  ASSERT_TRUE(r.ok()) << r.status();
  if (TypeParam::kMappingSurvivesOwner) {
    EXPECT_TRUE(r->statuses[0].ok()) << r->statuses[0];
    EXPECT_EQ(ti::CheckPattern(dst.data(), kLen, 31), -1);
  } else {
    EXPECT_TRUE(absl::IsUnavailable(r->statuses[0]) || absl::IsDeadlineExceeded(r->statuses[0]))
        << r->statuses[0];
  }
  EXPECT_LT(absl::Now() - start, ti::kKitDeadline);
}

REGISTER_TYPED_TEST_SUITE_P(TransportConformanceTest, ModelsTheConcept, ReadsWhatTheOwnerHolds,
                            ChunkDigestsAreOfTheLandedBytes, WritesLandExactlyInRange,
                            PerRequestFailuresLeaveTheRestIntact, BatchShapeErrorsAndReleasedIds,
                            UnregisterStopsNewOpens, CancelReleasesTheBatch,
                            ConcurrentBatchesFromManyThreads, MetricsCountBytesOpsAndErrors,
                            CrossProcessOwner, DeadOwnerFailsCleanly);

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_TRANSPORT_TESTING_H_
