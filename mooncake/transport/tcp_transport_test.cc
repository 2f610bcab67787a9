#include "mooncake/transport/tcp_transport.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport {
namespace {

using transport_internal::DecodeHeader;
using transport_internal::EncodeHeader;
using transport_internal::FrameType;

struct TcpFactory {
  using Transport = TcpTransport;
  static constexpr bool kCrossProcess = true;
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<TcpTransport> Make() {
    TcpTransport::Options o;
    o.lanes_per_peer = 2;
    o.slice_bytes = 64 << 10;  // many slices per request in the kit
    o.lane_window_bytes = 512 << 10;
    o.io_timeout = absl::Seconds(3);
    auto t = TcpTransport::Create(o);
    return t.ok() ? std::move(*t) : nullptr;
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(Tcp, TransportConformanceTest, TcpFactory);

// TcpTransport whose Submit is SubmitForWait: the kit's Waits receive on the
// calling thread (and its Polls and Cancels drop the claim).
class CallerReceivesTcp {
 public:
  explicit CallerReceivesTcp(std::unique_ptr<TcpTransport> t) : t_(std::move(t)) {}
  std::string_view Name() const { return t_->Name(); }
  std::string LocalEndpoint() const { return t_->LocalEndpoint(); }
  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation loc) {
    return t_->RegisterMemory(addr, length, loc);
  }
  absl::Status UnregisterMemory(SegmentId id) { return t_->UnregisterMemory(id); }
  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id) {
    return t_->OpenSegment(endpoint, id);
  }
  absl::Status CloseSegment(SegmentHandle h) { return t_->CloseSegment(h); }
  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests) {
    return t_->SubmitForWait(requests);
  }
  absl::StatusOr<BatchProgress> Poll(BatchId b) { return t_->Poll(b); }
  absl::StatusOr<BatchResult> Wait(BatchId b, absl::Time deadline) { return t_->Wait(b, deadline); }
  absl::StatusOr<BatchResult> Cancel(BatchId b) { return t_->Cancel(b); }
  TransportMetrics& metrics() { return t_->metrics(); }

 private:
  std::unique_ptr<TcpTransport> t_;
};
static_assert(Transport<CallerReceivesTcp>);

struct CallerReceivesTcpFactory {
  using Transport = CallerReceivesTcp;
  static constexpr bool kCrossProcess = true;
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static constexpr bool kDigestsOnLanding = true;
  static std::unique_ptr<CallerReceivesTcp> Make() {
    auto t = TcpFactory::Make();
    return t != nullptr ? std::make_unique<CallerReceivesTcp>(std::move(t)) : nullptr;
  }
  static absl::StatusOr<KitBuffer> Allocate(uint64_t length) {
    return AllocateHeapKitBuffer(length);
  }
};
INSTANTIATE_TYPED_TEST_SUITE_P(TcpCallerReceives, TransportConformanceTest,
                               CallerReceivesTcpFactory);

// A hand-written owner that answers OPEN correctly and then misbehaves.
class FakeOwner {
 public:
  // kSlowRead answers each READ after `delay`; kNoRead stops reading after OPEN.
  // kSplitRead sends each READ_DATA's header and first half at once and the
  // rest after `delay`. kLateWrite waits `delay` before it reads a
  // connection's first WRITE payload of >= 256 KiB, and takes WRITEs as an
  // owner does,
  // checking each byte against WritePattern (bad_bytes()).
  enum class Mode {
    kClose,
    kStall,
    kGarbage,
    kWrongTag,
    kSlowRead,
    kNoRead,
    kSplitRead,
    kLateWrite
  };

  static char WritePattern(uint64_t offset) { return static_cast<char>(offset * 7 % 251); }
  uint64_t bad_bytes() const { return bad_bytes_.load(); }
  uint64_t good_bytes() const { return good_bytes_.load(); }

  explicit FakeOwner(Mode mode, absl::Duration delay = absl::ZeroDuration())
      : mode_(mode), delay_(delay) {
    server_.reset(new transport_internal::TcpServer(absl::Seconds(1), 4));  // just for a port
    listen_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    MC_ASSERT(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind");
    MC_ASSERT(::listen(listen_.get(), 16) == 0, "listen");
    socklen_t len = sizeof(addr);
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeOwner() {
    stop_ = true;
    ::shutdown(listen_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::string Endpoint() const { return absl::StrCat("tcp://127.0.0.1:", port_); }

 private:
  void Run() {
    std::vector<std::thread> conns;
    std::vector<int> fds;
    while (!stop_) {
      const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) break;
      fds.push_back(fd);
      conns.emplace_back([this, fd] { Serve(fd); });
    }
    for (int fd : fds) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : conns) t.join();
    for (int fd : fds) ::close(fd);
  }
  void Serve(int fd) {
    transport_internal::WireHeader raw;
    bool first_write = true;
    while (transport_internal::RecvAll(fd, raw.data(), raw.size(), "fake").ok()) {
      auto h = DecodeHeader(raw.data());
      if (!h.ok()) return;
      if (h->type == FrameType::kOpen) {
        auto out = EncodeHeader({FrameType::kOpenOk, 0, h->tag, h->segment, 1ull << 30, 0, 0});
        (void)transport_internal::SendAll(fd, out.data(), out.size(), "fake");
        if (mode_ == Mode::kNoRead) {
          while (!stop_) absl::SleepFor(absl::Milliseconds(10));
          return;
        }
        continue;
      }
      switch (mode_) {
        case Mode::kClose:
          ::shutdown(fd, SHUT_RDWR);
          return;
        case Mode::kStall:
          continue;  // read on, answer nothing
        case Mode::kGarbage: {
          const char junk[64] = "this is not a mooncake frame header, not at all......";
          (void)transport_internal::SendAll(fd, junk, sizeof(junk), "fake");
          continue;
        }
        case Mode::kSlowRead: {
          absl::SleepFor(delay_);
          auto out =
              EncodeHeader({FrameType::kReadData, 0, h->tag, h->segment, h->offset, h->length, 0});
          const std::string payload(h->length, 'r');
          if (!transport_internal::SendAll(fd, out.data(), out.size(), "fake").ok() ||
              !transport_internal::SendAll(fd, payload.data(), payload.size(), "fake").ok()) {
            return;
          }
          continue;
        }
        case Mode::kSplitRead: {
          auto out =
              EncodeHeader({FrameType::kReadData, 0, h->tag, h->segment, h->offset, h->length, 0});
          const std::string payload(h->length, 'r');
          const size_t half = payload.size() / 2;
          if (!transport_internal::SendAll(fd, out.data(), out.size(), "fake").ok() ||
              !transport_internal::SendAll(fd, payload.data(), half, "fake").ok()) {
            return;
          }
          absl::SleepFor(delay_);
          if (!transport_internal::SendAll(fd, payload.data() + half, payload.size() - half, "fake")
                   .ok()) {
            return;
          }
          continue;
        }
        case Mode::kNoRead:
          return;
        case Mode::kLateWrite: {
          if (h->type != FrameType::kWrite) return;
          if (first_write && h->length >= (256u << 10)) {
            absl::SleepFor(delay_);
            first_write = false;
          }
          std::string payload(h->length, '\0');
          if (!transport_internal::RecvAll(fd, payload.data(), payload.size(), "fake").ok()) return;
          uint64_t good = 0;
          for (uint64_t i = 0; i < payload.size(); ++i) {
            good += payload[i] == WritePattern(h->offset + i) ? 1 : 0;
          }
          good_bytes_.fetch_add(good);
          bad_bytes_.fetch_add(payload.size() - good);
          auto ack = EncodeHeader({FrameType::kWriteAck, 0, h->tag, h->segment, h->offset, 0, 0});
          if (!transport_internal::SendAll(fd, ack.data(), ack.size(), "fake").ok()) return;
          continue;
        }
        case Mode::kWrongTag: {
          auto out = EncodeHeader(
              {FrameType::kReadData, 0, h->tag + 1000, h->segment, h->offset, h->length, 0});
          (void)transport_internal::SendAll(fd, out.data(), out.size(), "fake");
          continue;
        }
      }
    }
  }

  const Mode mode_;
  const absl::Duration delay_;
  std::unique_ptr<transport_internal::TcpServer> server_;
  UniqueFd listen_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bad_bytes_{0}, good_bytes_{0};
  std::thread thread_;
};

absl::Status ReadFromFake(FakeOwner::Mode mode, absl::Duration* took, bool for_wait) {
  FakeOwner fake(mode);
  TcpTransport::Options o;
  o.io_timeout = absl::Milliseconds(300);
  o.lanes_per_peer = 2;
  auto t = TcpTransport::Create(o);
  MC_ASSERT(t.ok(), "transport");
  auto remote = (*t)->OpenSegment(fake.Endpoint(), 7);
  if (!remote.ok()) return remote.status();
  std::vector<char> dst(256 << 10);
  const TransferRequest r{OpCode::kRead, dst.data(), remote->handle, 0, dst.size()};
  const absl::Time start = absl::Now();
  auto id = for_wait ? (*t)->SubmitForWait({&r, 1}) : (*t)->Submit({&r, 1});
  if (!id.ok()) return id.status();
  auto res = (*t)->Wait(*id, absl::Now() + absl::Seconds(10));
  *took = absl::Now() - start;
  if (!res.ok()) return res.status();
  return res->statuses[0];
}

// Each misbehaviour is seen the same way by the receiver thread (Submit) and
// by a caller receiving on its own thread (SubmitForWait).
TEST(TcpTransportTest, PeerThatClosesIsUnavailable) {
  for (bool for_wait : {false, true}) {
    absl::Duration took;
    const absl::Status s = ReadFromFake(FakeOwner::Mode::kClose, &took, for_wait);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s << " for_wait=" << for_wait;
  }
}

TEST(TcpTransportTest, PeerThatStallsIsDeadlineExceededWithinTheIoTimeout) {
  for (bool for_wait : {false, true}) {
    absl::Duration took;
    const absl::Status s = ReadFromFake(FakeOwner::Mode::kStall, &took, for_wait);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s << " for_wait=" << for_wait;
    EXPECT_LT(took, absl::Seconds(5));  // 300 ms timeout; generous for a loaded machine
  }
}

TEST(TcpTransportTest, PeerThatSendsGarbageIsDataLoss) {
  for (bool for_wait : {false, true}) {
    absl::Duration took;
    const absl::Status s = ReadFromFake(FakeOwner::Mode::kGarbage, &took, for_wait);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s << " for_wait=" << for_wait;
  }
}

TEST(TcpTransportTest, ResponseWithAnotherTagIsDataLoss) {
  for (bool for_wait : {false, true}) {
    absl::Duration took;
    const absl::Status s = ReadFromFake(FakeOwner::Mode::kWrongTag, &took, for_wait);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s << " for_wait=" << for_wait;
  }
}

// Options with `lanes` lanes and 64 KiB slices (many frames per request).
TcpTransport::Options SmallSlices(size_t lanes) {
  TcpTransport::Options o;
  o.lanes_per_peer = lanes;
  o.slice_bytes = 64 << 10;
  return o;
}

// A pair of transports on loopback, one segment of `bytes` filled with a
// pattern on the owner.
struct Loopback {
  explicit Loopback(size_t bytes, const TcpTransport::Options& o = SmallSlices(1)) : mem(bytes) {
    owner = std::move(*TcpTransport::Create(o));
    requester = std::move(*TcpTransport::Create(o));
    transport_testing_internal::FillPattern(mem.data(), mem.size(), 5);
    auto seg = owner->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
    MC_ASSERT(seg.ok(), "register");
    auto r = requester->OpenSegment(owner->LocalEndpoint(), seg->id);
    MC_ASSERT(r.ok(), "open");
    remote = *r;
  }
  std::vector<std::byte> mem;
  std::unique_ptr<TcpTransport> owner, requester;
  RemoteSegment remote;
};

// Runs 4 KiB `op` transfers at offset 0 until one reserves the lane to `ep`:
// a claim reserves only while the lane's receiver thread watches (it starts
// to once it has run, and goes on for a while after each use).
void AwaitReservable(TcpTransport& t, const std::string& ep, SegmentHandle handle, OpCode op) {
  std::vector<char> buf(4096);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = FakeOwner::WritePattern(i);  // for kLateWrite
  for (int i = 0; i < 2000; ++i) {
    const TransferRequest r{op, buf.data(), handle, 0, buf.size()};
    auto id = t.SubmitForWait({&r, 1});
    MC_ASSERT(id.ok(), "warm-up submit");
    const bool reserved = t.ReservedLanes(ep) == 1;
    auto res = t.Wait(*id, absl::Now() + absl::Seconds(10));
    MC_ASSERT(res.ok() && res->ok(), "warm-up transfer");
    if (reserved) return;
    absl::SleepFor(absl::Milliseconds(1));
  }
  MC_ASSERT(false, "the lane never became reservable");
}

// Chunk digests over two lanes (slices land out of order), through the
// receiver threads and a waiting caller. 128 KiB slices hold whole chunks:
// every slot is digested. 96 KiB slices end inside chunks: none is, except
// the 5-byte tail slice at 3 MiB (it starts on a chunk and ends the request).
TEST(TcpTransportTest, ChunkDigestsOfSpreadSlices) {
  for (uint32_t slice_kib : {128u, 96u}) {
    TcpTransport::Options o;
    o.lanes_per_peer = 2;
    o.slice_bytes = slice_kib << 10;
    o.spread_min_bytes = 64 << 10;
    Loopback lb(4 << 20, o);
    for (bool caller : {false, true}) {
      const uint64_t len = (3 << 20) + 5;
      std::vector<std::byte> dst(len);
      std::vector<uint64_t> d(DigestChunkCount(len), kNoDigest);
      const TransferRequest r{OpCode::kRead, dst.data(), lb.remote.handle, 7, len, d.data()};
      auto id = caller ? lb.requester->SubmitForWait({&r, 1}) : lb.requester->Submit({&r, 1});
      ASSERT_TRUE(id.ok());
      auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(10));
      ASSERT_TRUE(res.ok() && res->ok()) << res.status();
      ASSERT_EQ(std::memcmp(dst.data(), lb.mem.data() + 7, len), 0);
      for (uint64_t k = 0; k < d.size(); ++k) {
        const uint64_t from = k * kDigestChunkBytes, to = std::min(len, from + kDigestChunkBytes);
        if (slice_kib == 128 || k == d.size() - 1) {
          EXPECT_EQ(d[k], ChunkDigest(dst.data() + from, to - from)) << slice_kib << " " << k;
        } else {
          EXPECT_EQ(d[k], kNoDigest) << slice_kib << " " << k;
        }
      }
      EXPECT_EQ(ValueChecksumWith(dst.data(), len, d.data()), ValueChecksum(dst.data(), len));
    }
  }
}

// Which lanes a batch's requests take: a batch starts on one of the first
// whole_request_lanes lanes in turn, and its requests take the lanes after
// its start, one each (a value the Router cut into slices spreads over all
// of them while single requests keep to the first lanes).
TEST(TcpTransportTest, BatchesStartOnTheFirstWholeRequestLanes) {
  for (size_t whole : {size_t{0}, size_t{1}, size_t{2}}) {
    TcpTransport::Options o;
    o.lanes_per_peer = 4;
    o.whole_request_lanes = whole;
    o.slice_bytes = 1 << 20;  // one slice per request
    Loopback lb(1 << 20, o);
    const std::string ep = lb.owner->LocalEndpoint();
    std::vector<std::byte> dst(1 << 20);
    auto run = [&](size_t requests) {
      std::vector<TransferRequest> rs;
      const uint64_t each = dst.size() / requests;
      for (size_t i = 0; i < requests; ++i) {
        rs.push_back({OpCode::kRead, dst.data() + i * each, lb.remote.handle, i * each, each});
      }
      auto id = lb.requester->Submit(rs);
      ASSERT_TRUE(id.ok());
      auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(10));
      ASSERT_TRUE(res.ok() && res->ok()) << res.status();
    };
    for (int i = 0; i < 8; ++i) run(1);  // 8 single-request batches
    const std::vector<std::vector<uint64_t>> singles = {{2, 2, 2, 2}, {8, 0, 0, 0}, {4, 4, 0, 0}};
    EXPECT_EQ(lb.requester->EnqueuedPerLane(ep), singles[whole]) << "whole " << whole;
    run(4);  // one batch of 4 requests: one on each lane
    std::vector<uint64_t> after = singles[whole];
    for (uint64_t& n : after) ++n;
    EXPECT_EQ(lb.requester->EnqueuedPerLane(ep), after) << "whole " << whole;
  }
}

// A claim whose caller never Waits holds the lane back for claim_patience
// only: a later batch on the same lane completes, and so does the unclaimed
// one, collected afterwards.
TEST(TcpTransportTest, ClaimNobodyTakesUpDoesNotStallTheLane) {
  Loopback lb(4 << 20);
  std::vector<std::byte> a(1 << 20), b(1 << 20);
  const TransferRequest ra{OpCode::kRead, a.data(), lb.remote.handle, 0, a.size()};
  const TransferRequest rb{OpCode::kRead, b.data(), lb.remote.handle, 1 << 20, b.size()};
  auto ida = lb.requester->SubmitForWait({&ra, 1});
  ASSERT_TRUE(ida.ok());
  auto idb = lb.requester->Submit({&rb, 1});
  ASSERT_TRUE(idb.ok());
  auto resb = lb.requester->Wait(*idb, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(resb.ok() && resb->ok()) << resb.status();
  EXPECT_EQ(std::memcmp(b.data(), lb.mem.data() + (1 << 20), b.size()), 0);
  // Polled, not waited: the claim is dropped and the thread receives.
  for (;;) {
    auto p = lb.requester->Poll(*ida);
    ASSERT_TRUE(p.ok());
    if (p->done()) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  auto resa = lb.requester->Wait(*ida, absl::InfinitePast());
  ASSERT_TRUE(resa.ok() && resa->ok()) << resa.status();
  EXPECT_EQ(std::memcmp(a.data(), lb.mem.data(), a.size()), 0);
}

// A caller that SubmitForWaits and works for longer than io_timeout before
// it Waits: the receiver thread takes over (after claim_patience, or, for
// the reservation a READ on an idle lane gets, within 2 x 100 ms), so the
// owner's send never stalls past its io_timeout and the batch is fine when
// the caller comes.
TEST(TcpTransportTest, LateWaitAfterSubmitForWaitStillSucceeds) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Milliseconds(500);
  Loopback lb(64 << 20, o);
  std::vector<std::byte> dst(lb.mem.size());
  const TransferRequest r{OpCode::kRead, dst.data(), lb.remote.handle, 0, dst.size()};
  auto id = lb.requester->SubmitForWait({&r, 1});
  ASSERT_TRUE(id.ok());
  absl::SleepFor(absl::Milliseconds(1200));  // > 2 x io_timeout
  auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_TRUE(res->ok()) << res->statuses[0];
  EXPECT_EQ(std::memcmp(dst.data(), lb.mem.data(), dst.size()), 0);
}

// The claimer's own inline send blocks (the owner is busy sending a large
// READ nobody reads yet): the receiver thread takes over after
// claim_patience, so the send goes on and everything completes.
TEST(TcpTransportTest, ClaimerBlockedInItsOwnSendDoesNotDeadlock) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  // Long enough that a reservation (io_timeout / 4, taken over on a later
  // idle wake-up) would overshoot the 2 s bound below: a batch of READs and
  // WRITEs must get an ordinary claim.
  o.io_timeout = absl::Seconds(8);
  o.lane_window_bytes = 256 << 20;
  Loopback lb(64 << 20, o);
  std::vector<std::byte> big(lb.mem.size()), small(64 << 10);
  std::vector<TransferRequest> reqs = {
      {OpCode::kRead, big.data(), lb.remote.handle, 0, big.size()}};
  for (int i = 0; i < 400; ++i) {
    reqs.push_back({OpCode::kWrite, small.data(), lb.remote.handle,
                    static_cast<uint64_t>(i) * small.size(), small.size()});
  }
  const absl::Time start = absl::Now();
  auto id = lb.requester->SubmitForWait(reqs);
  ASSERT_TRUE(id.ok());
  auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE(res->ok()) << res->statuses[0];
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "no request should wait for io_timeout";
}

// A SubmitForWait of only READs (or only WRITEs) on an idle lane reserves it
// for the caller, without a claim that wakes the receiver thread; a mixed
// batch gets an ordinary claim. The caller's Wait receives either way.
TEST(TcpTransportTest, IdleLaneIsReservedForAOneKindBatch) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Seconds(20);
  Loopback lb(4 << 20, o);
  const std::string ep = lb.owner->LocalEndpoint();
  std::vector<std::byte> dst(1 << 20), src(64 << 10, std::byte{7});
  const TransferRequest read{OpCode::kRead, dst.data(), lb.remote.handle, 0, dst.size()};
  const TransferRequest write{OpCode::kWrite, src.data(), lb.remote.handle, 2 << 20, src.size()};
  for (const std::vector<TransferRequest>& batch :
       {std::vector<TransferRequest>{read}, std::vector<TransferRequest>{write, write},
        std::vector<TransferRequest>{read, write}}) {
    const bool one_kind = batch.size() == 1 || batch[0].op == batch[1].op;
    AwaitReservable(*lb.requester, ep, lb.remote.handle, OpCode::kRead);
    auto id = lb.requester->SubmitForWait(batch);
    ASSERT_TRUE(id.ok());
    // The response may already be in; the reservation stays until the Wait.
    EXPECT_EQ(lb.requester->ReservedLanes(ep), one_kind ? 1u : 0u);
    auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(res.ok() && res->ok()) << res.status();
    EXPECT_EQ(lb.requester->ReservedLanes(ep), 0u);
  }
  EXPECT_EQ(std::memcmp(dst.data(), lb.mem.data(), dst.size()), 0);
  EXPECT_EQ(std::memcmp(lb.mem.data() + (2 << 20), src.data(), src.size()), 0);
}

// A lane idle for longer than its receiver thread watches (10 x 100 ms) has
// the thread in an untimed sleep, which no reservation could end: its next
// claim is an ordinary one (it wakes the thread), and the claims after that
// reserve again.
TEST(TcpTransportTest, LongIdleLaneGivesAnOrdinaryClaimFirst) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Seconds(20);
  Loopback lb(1 << 20, o);
  const std::string ep = lb.owner->LocalEndpoint();
  AwaitReservable(*lb.requester, ep, lb.remote.handle, OpCode::kRead);
  absl::SleepFor(absl::Milliseconds(1600));
  std::vector<std::byte> dst(64 << 10);
  const TransferRequest r{OpCode::kRead, dst.data(), lb.remote.handle, 0, dst.size()};
  auto id = lb.requester->SubmitForWait({&r, 1});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(lb.requester->ReservedLanes(ep), 0u) << "reserved while the thread slept untimed";
  auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok() && res->ok()) << res.status();
  EXPECT_EQ(std::memcmp(dst.data(), lb.mem.data(), dst.size()), 0);
  AwaitReservable(*lb.requester, ep, lb.remote.handle, OpCode::kRead);  // watching again
}

// Another batch queued behind a reservation turns it into an ordinary claim:
// the receiver thread takes over after claim_patience (not the reservation's
// io_timeout / 4 = 5 s here), so the second batch completes at once although
// the first caller has not Waited yet.
TEST(TcpTransportTest, BatchBehindAReservationDoesNotWaitForIt) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Seconds(20);
  Loopback lb(16 << 20, o);
  std::vector<std::byte> a(8 << 20), b(1 << 20);
  const TransferRequest ra{OpCode::kRead, a.data(), lb.remote.handle, 0, a.size()};
  const TransferRequest rb{OpCode::kRead, b.data(), lb.remote.handle, 8 << 20, b.size()};
  AwaitReservable(*lb.requester, lb.owner->LocalEndpoint(), lb.remote.handle, OpCode::kRead);
  auto ida = lb.requester->SubmitForWait({&ra, 1});
  ASSERT_TRUE(ida.ok());
  ASSERT_EQ(lb.requester->ReservedLanes(lb.owner->LocalEndpoint()), 1u);
  const absl::Time start = absl::Now();
  auto idb = lb.requester->Submit({&rb, 1});
  ASSERT_TRUE(idb.ok());
  auto resb = lb.requester->Wait(*idb, absl::Now() + absl::Seconds(15));
  ASSERT_TRUE(resb.ok() && resb->ok()) << resb.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(std::memcmp(b.data(), lb.mem.data() + (8 << 20), b.size()), 0);
  auto resa = lb.requester->Wait(*ida, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(resa.ok() && resa->ok()) << resa.status();
  EXPECT_EQ(std::memcmp(a.data(), lb.mem.data(), a.size()), 0);
}

// Polling a reserved batch instead of Waiting hands the lane to the receiver
// thread at once (not after io_timeout / 4 = 5 s here).
TEST(TcpTransportTest, PollingAReservedBatchReleasesTheLane) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Seconds(20);
  Loopback lb(8 << 20, o);
  std::vector<std::byte> dst(lb.mem.size());
  const TransferRequest r{OpCode::kRead, dst.data(), lb.remote.handle, 0, dst.size()};
  AwaitReservable(*lb.requester, lb.owner->LocalEndpoint(), lb.remote.handle, OpCode::kRead);
  auto id = lb.requester->SubmitForWait({&r, 1});
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(lb.requester->ReservedLanes(lb.owner->LocalEndpoint()), 1u);
  const absl::Time start = absl::Now();
  for (;;) {
    auto p = lb.requester->Poll(*id);
    ASSERT_TRUE(p.ok()) << p.status();
    if (p->done()) break;
    ASSERT_LT(absl::Now() - start, absl::Seconds(2)) << "the reservation held the lane";
    absl::SleepFor(absl::Milliseconds(1));
  }
  auto res = lb.requester->Wait(*id, absl::InfinitePast());
  ASSERT_TRUE(res.ok() && res->ok()) << res.status();
  EXPECT_EQ(std::memcmp(dst.data(), lb.mem.data(), dst.size()), 0);
}

// A reserved batch's large WRITEs go out from Submit itself, for one sendmsg:
// with an owner that reads nothing for 300 ms the call returns within about
// one socket tick (50 ms here), the sender thread finishes the frame it left
// mid-way, and every byte arrives in order.
TEST(TcpTransportTest, InlineLargeWriteHandsTheRestToTheSender) {
  FakeOwner fake(FakeOwner::Mode::kLateWrite, absl::Milliseconds(300));
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Seconds(5);  // tick 50 ms
  o.lane_window_bytes = 64 << 20;
  auto t = TcpTransport::Create(o);
  ASSERT_TRUE(t.ok()) << t.status();
  auto remote = (*t)->OpenSegment(fake.Endpoint(), 7);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const uint64_t len = 32 << 20;  // far more than the socket buffers hold
  std::vector<char> src(len);
  for (uint64_t i = 0; i < len; ++i) src[i] = FakeOwner::WritePattern(i);
  const TransferRequest r{OpCode::kWrite, src.data(), remote->handle, 0, len};
  AwaitReservable(**t, fake.Endpoint(), remote->handle, OpCode::kWrite);
  const absl::Time start = absl::Now();
  auto id = (*t)->SubmitForWait({&r, 1});
  const absl::Duration submit_took = absl::Now() - start;
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_LT(submit_took, absl::Milliseconds(250)) << "Submit blocked on the stalled owner";
  EXPECT_EQ((*t)->ReservedLanes(fake.Endpoint()), 1u);
  EXPECT_EQ((*t)->InlineHandoffs(fake.Endpoint()), 1u) << "the inline send never handed off";
  auto res = (*t)->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_TRUE(res->ok()) << res->statuses[0];
  EXPECT_GE(fake.good_bytes(), len);  // and the warm-up's
  EXPECT_EQ(fake.bad_bytes(), 0u);
}

// A caller receiving its batch stops at its deadline even while frames keep
// arriving (no socket tick passes without data): Wait returns about on time,
// the receiver thread receives the rest, and a later Wait collects it.
TEST(TcpTransportTest, CallerReceivingAStreamKeepsItsDeadline) {
  Loopback lb(16 << 20);
  std::vector<std::byte> dst(4 << 20);
  std::vector<TransferRequest> reqs;
  for (int i = 0; i < 1000; ++i) {  // 4 GiB on the one lane
    reqs.push_back({OpCode::kRead, dst.data(), lb.remote.handle,
                    static_cast<uint64_t>(i % 4) * dst.size(), dst.size()});
  }
  auto id = lb.requester->SubmitForWait(reqs);
  ASSERT_TRUE(id.ok());
  const absl::Time start = absl::Now();
  auto early = lb.requester->Wait(*id, start + absl::Milliseconds(100));
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(early.ok() || absl::IsDeadlineExceeded(early.status())) << early.status();
  EXPECT_LT(took, absl::Milliseconds(400)) << "Wait overshot its deadline: " << took;
  if (!early.ok()) {
    auto res = lb.requester->Wait(*id, absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(res.ok() && res->ok()) << res.status();
  }
  EXPECT_EQ(std::memcmp(dst.data(), lb.mem.data() + 3 * dst.size(), dst.size()), 0);
}

// Many threads SubmitForWait on one lane at once: whoever receives settles
// the others' slices too, and every byte lands where it belongs.
TEST(TcpTransportTest, ConcurrentCallersShareTheReceive) {
  Loopback lb(8 << 20, SmallSlices(2));
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> dst(1 << 20);
      for (int i = 0; i < 30; ++i) {
        const uint64_t off = static_cast<uint64_t>((t + i) % 7) << 20;
        const TransferRequest r{OpCode::kRead, dst.data(), lb.remote.handle, off, dst.size()};
        auto id = lb.requester->SubmitForWait({&r, 1});
        auto res = id.ok() ? lb.requester->Wait(*id, absl::Now() + absl::Seconds(20))
                           : absl::StatusOr<BatchResult>(id.status());
        if (!res.ok() || !res->ok() ||
            std::memcmp(dst.data(), lb.mem.data() + off, dst.size()) != 0) {
          bad.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// A caller whose deadline comes in the middle of a frame leaves the rest of
// it to the receiver thread: its Wait says DeadlineExceeded, a later Wait
// gets every byte.
TEST(TcpTransportTest, CallerLeavesAHalfReceivedFrameToTheThread) {
  FakeOwner fake(FakeOwner::Mode::kSplitRead, absl::Milliseconds(400));
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.io_timeout = absl::Seconds(3);
  auto t = TcpTransport::Create(o);
  ASSERT_TRUE(t.ok());
  auto remote = (*t)->OpenSegment(fake.Endpoint(), 7);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<char> dst(256 << 10, 'x');
  const TransferRequest r{OpCode::kRead, dst.data(), remote->handle, 0, dst.size()};
  auto id = (*t)->SubmitForWait({&r, 1});
  ASSERT_TRUE(id.ok());
  const absl::Time start = absl::Now();
  auto early = (*t)->Wait(*id, absl::Now() + absl::Milliseconds(150));
  EXPECT_TRUE(absl::IsDeadlineExceeded(early.status())) << early.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(350));
  auto res = (*t)->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok() && res->ok()) << res.status();
  EXPECT_EQ(std::count(dst.begin(), dst.end(), 'r'), static_cast<long>(dst.size()));
}

TEST(TcpTransportTest, UnreachablePeerIsUnavailable) {
  uint16_t port;
  {
    auto t = TcpTransport::Create({});
    ASSERT_TRUE(t.ok());
    port = static_cast<uint16_t>(std::stoi((*t)->LocalEndpoint().substr(16)));
  }  // nobody listens there now
  auto t = TcpTransport::Create({});
  ASSERT_TRUE(t.ok());
  auto r = (*t)->OpenSegment(absl::StrCat("tcp://127.0.0.1:", port), 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ((*t)->OpenSegment("tcp://nohost", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Whether this host can bind ::1 at all (containers without IPv6 cannot).
bool HostHasIpv6Loopback() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// An owner bound to an IPv6 address advertises a bracketed endpoint, and a
// requester bound to IPv4 reads and writes through it; endpoint text without
// a port is refused.
TEST(TcpTransportTest, Ipv6OwnerServesThroughABracketedEndpoint) {
  if (!HostHasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback here";
  TcpTransport::Options o6 = SmallSlices(2);
  o6.bind_host = "::1";
  auto owner = TcpTransport::Create(o6);
  ASSERT_TRUE(owner.ok()) << owner.status();
  const std::string ep = (*owner)->LocalEndpoint();
  ASSERT_TRUE(ep.starts_with("tcp://[::1]:")) << ep;
  std::vector<std::byte> mem(1 << 20);
  transport_testing_internal::FillPattern(mem.data(), mem.size(), 9);
  auto seg = (*owner)->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok()) << seg.status();
  auto requester = TcpTransport::Create(SmallSlices(2));
  ASSERT_TRUE(requester.ok());
  auto remote = (*requester)->OpenSegment(ep, seg->id);
  ASSERT_TRUE(remote.ok()) << remote.status();

  std::vector<std::byte> got(mem.size());
  const TransferRequest read{OpCode::kRead, got.data(), remote->handle, 0, got.size()};
  auto id = (*requester)->Submit({&read, 1});
  ASSERT_TRUE(id.ok());
  auto res = (*requester)->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok() && res->ok()) << (res.ok() ? res->statuses[0] : res.status());
  EXPECT_EQ(got, mem);

  std::vector<std::byte> put(256 << 10, std::byte{0x5a});
  const TransferRequest write{OpCode::kWrite, put.data(), remote->handle, 4096, put.size()};
  id = (*requester)->Submit({&write, 1});
  ASSERT_TRUE(id.ok());
  res = (*requester)->Wait(*id, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(res.ok() && res->ok());
  EXPECT_TRUE(std::equal(put.begin(), put.end(), mem.begin() + 4096));

  for (std::string_view bad : {"tcp://[::1]", "tcp://[::1]:", "tcp://[::1]:0", "tcp://[]:5"}) {
    EXPECT_EQ((*requester)->OpenSegment(bad, seg->id).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(TcpTransportTest, OpensEveryLaneAndReconnectsAfterOwnerRestart) {
  TcpTransport::Options o;
  o.lanes_per_peer = 3;
  o.io_timeout = absl::Seconds(2);
  auto requester = TcpTransport::Create(o);
  ASSERT_TRUE(requester.ok());
  std::vector<char> mem(1 << 20, 'a');
  auto owner = TcpTransport::Create(o);
  ASSERT_TRUE(owner.ok());
  auto seg = (*owner)->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok());
  const std::string ep = (*owner)->LocalEndpoint();
  auto remote = (*requester)->OpenSegment(ep, seg->id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*requester)->LiveLanes(ep), 3u);
  std::vector<char> dst(mem.size());
  const TransferRequest r{OpCode::kRead, dst.data(), remote->handle, 0, dst.size()};
  auto run = [&]() -> absl::Status {
    auto id = (*requester)->Submit({&r, 1});
    if (!id.ok()) return id.status();
    auto res = (*requester)->Wait(*id, absl::Now() + absl::Seconds(10));
    return res.ok() ? res->statuses[0] : res.status();
  };
  EXPECT_TRUE(run().ok());
  owner->reset();  // the owner goes away: its connections close
  const absl::Status gone = run();
  EXPECT_TRUE(absl::IsUnavailable(gone) || absl::IsDeadlineExceeded(gone)) << gone;
}

TEST(TcpTransportTest, LargeWritesThroughOneNarrowLane) {
  TcpTransport::Options o;
  o.lanes_per_peer = 1;
  o.slice_bytes = 16 << 10;
  o.lane_window_bytes = 64 << 10;  // forces the sender thread to wait for the window
  auto a = TcpTransport::Create(o);
  auto b = TcpTransport::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::byte> mem(3 << 20);
  auto seg = (*a)->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok());
  auto remote = (*b)->OpenSegment((*a)->LocalEndpoint(), seg->id);
  ASSERT_TRUE(remote.ok());
  std::vector<std::byte> src(mem.size());
  transport_testing_internal::FillPattern(src.data(), src.size(), 77);
  std::vector<TransferRequest> reqs;
  for (size_t off = 0; off < src.size(); off += 1 << 20) {
    reqs.push_back({OpCode::kWrite, src.data() + off, remote->handle, off, 1 << 20});
  }
  auto id = (*b)->Submit(reqs);
  ASSERT_TRUE(id.ok());
  auto res = (*b)->Wait(*id, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(res.ok() && res->ok());
  EXPECT_EQ(transport_testing_internal::CheckPattern(mem.data(), mem.size(), 77), -1);
}

// Submits one request to `fake` from a heap buffer, lets Wait time out,
// Cancels, and frees the buffer as soon as Cancel returns: under ASan any
// later touch by a lane is a heap-use-after-free. Returns Cancel's result.
absl::StatusOr<BatchResult> CancelThenFree(FakeOwner& fake, OpCode op, uint64_t length,
                                           uint32_t slice_bytes, absl::Duration io_timeout,
                                           absl::Duration* cancel_took, size_t* lanes_after,
                                           bool for_wait) {
  TcpTransport::Options o;
  o.io_timeout = io_timeout;
  o.lanes_per_peer = 1;
  o.slice_bytes = slice_bytes;
  o.lane_window_bytes = 64 << 20;
  auto t = TcpTransport::Create(o);
  MC_ASSERT(t.ok(), "transport");
  auto remote = (*t)->OpenSegment(fake.Endpoint(), 7);
  if (!remote.ok()) return remote.status();
  auto buf = std::make_unique<char[]>(length);
  std::memset(buf.get(), 'w', length);
  const TransferRequest r{op, buf.get(), remote->handle, 0, length};
  auto id = for_wait ? (*t)->SubmitForWait({&r, 1}) : (*t)->Submit({&r, 1});
  if (!id.ok()) return id.status();
  auto early = (*t)->Wait(*id, absl::Now() + absl::Milliseconds(100));
  if (!absl::IsDeadlineExceeded(early.status())) {
    return absl::InternalError(
        absl::StrCat("Wait should time out, got ", early.status().ToString()));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<BatchResult> res = (*t)->Cancel(*id);
  *cancel_took = absl::Now() - start;
  buf.reset();  // the contract: free after Cancel returned
  *lanes_after = (*t)->LiveLanes(fake.Endpoint());
  absl::SleepFor(io_timeout);  // room for a lane that still held the buffer to touch it
  return res;
}

// The owner answers each READ just inside io_timeout, so the lane never
// times out by itself; Cancel must not wait for all of them (nor give up with
// the lane still receiving into the buffer): it breaks the lane.
TEST(TcpTransportTest, CancelOfSlowReadsReturnsWithBuffersFree) {
  const absl::Duration io = absl::Milliseconds(500);
  for (bool for_wait : {false, true}) {
    FakeOwner fake(FakeOwner::Mode::kSlowRead, io * 4 / 5);
    absl::Duration took;
    size_t lanes = 9;
    auto res =
        CancelThenFree(fake, OpCode::kRead, 10 * (64 << 10), 64 << 10, io, &took, &lanes, for_wait);
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_EQ(res->statuses.size(), 1u);
    EXPECT_TRUE(absl::IsCancelled(res->statuses[0])) << res->statuses[0];
    EXPECT_EQ(lanes, 0u) << "the lane still receiving was broken";
    // io_timeout plus slack on a loaded machine; the 10 answers take 4 s.
    EXPECT_LT(took, absl::Seconds(3));
  }
}

// The owner stops reading: the WRITE payload's sendmsg blocks on a full
// socket. Cancel returns within a bound and no send reads the freed buffer.
TEST(TcpTransportTest, CancelOfAStuckWriteReturnsWithBuffersFree) {
  const absl::Duration io = absl::Milliseconds(500);
  for (bool for_wait : {false, true}) {
    FakeOwner fake(FakeOwner::Mode::kNoRead);
    absl::Duration took;
    size_t lanes = 9;
    auto res = CancelThenFree(fake, OpCode::kWrite, 64 << 20, 4 << 20, io, &took, &lanes, for_wait);
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_EQ(res->statuses.size(), 1u);
    EXPECT_TRUE(absl::IsCancelled(res->statuses[0])) << res->statuses[0];
    EXPECT_EQ(lanes, 0u);
    EXPECT_LT(took, absl::Seconds(3));
  }
}

TEST(TcpTransportTest, BadOptionsAreInvalidArgument) {
  TcpTransport::Options o;
  o.lanes_per_peer = 0;
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.lanes_per_peer = 1;
  o.slice_bytes = 100;
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.slice_bytes = 4096;
  o.io_timeout = absl::ZeroDuration();
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.io_timeout = absl::Seconds(1);
  o.bind_host = "not-an-ip";
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mooncake::transport
