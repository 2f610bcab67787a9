#include "mooncake/transport/tcp_transport.h"

#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
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

// A hand-written owner that answers OPEN correctly and then misbehaves.
class FakeOwner {
 public:
  // kSlowRead answers each READ after `delay`; kNoRead stops reading after OPEN.
  enum class Mode { kClose, kStall, kGarbage, kWrongTag, kSlowRead, kNoRead };

  explicit FakeOwner(Mode mode, absl::Duration delay = absl::ZeroDuration())
      : mode_(mode), delay_(delay) {
    server_.reset(new transport_internal::TcpServer(absl::Seconds(1), 4));  // just for a port
    listen_ = transport_internal::Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
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
        case Mode::kNoRead:
          return;
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
  transport_internal::Fd listen_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

absl::Status ReadFromFake(FakeOwner::Mode mode, absl::Duration* took) {
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
  auto id = (*t)->Submit({&r, 1});
  if (!id.ok()) return id.status();
  auto res = (*t)->Wait(*id, absl::Now() + absl::Seconds(10));
  *took = absl::Now() - start;
  if (!res.ok()) return res.status();
  return res->statuses[0];
}

TEST(TcpTransportTest, PeerThatClosesIsUnavailable) {
  absl::Duration took;
  const absl::Status s = ReadFromFake(FakeOwner::Mode::kClose, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST(TcpTransportTest, PeerThatStallsIsDeadlineExceededWithinTheIoTimeout) {
  absl::Duration took;
  const absl::Status s = ReadFromFake(FakeOwner::Mode::kStall, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, absl::Seconds(5));  // 300 ms timeout; generous for a loaded machine
}

TEST(TcpTransportTest, PeerThatSendsGarbageIsDataLoss) {
  absl::Duration took;
  const absl::Status s = ReadFromFake(FakeOwner::Mode::kGarbage, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

TEST(TcpTransportTest, ResponseWithAnotherTagIsDataLoss) {
  absl::Duration took;
  const absl::Status s = ReadFromFake(FakeOwner::Mode::kWrongTag, &took);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
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
                                           absl::Duration* cancel_took, size_t* lanes_after) {
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
  auto id = (*t)->Submit({&r, 1});
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
  FakeOwner fake(FakeOwner::Mode::kSlowRead, io * 4 / 5);
  absl::Duration took;
  size_t lanes = 9;
  auto res = CancelThenFree(fake, OpCode::kRead, 10 * (64 << 10), 64 << 10, io, &took, &lanes);
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_EQ(res->statuses.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(res->statuses[0])) << res->statuses[0];
  EXPECT_EQ(lanes, 0u) << "the lane still receiving was broken";
  // io_timeout plus slack on a loaded machine; the 10 answers take 4 s.
  EXPECT_LT(took, absl::Seconds(3));
}

// The owner stops reading: the WRITE payload's sendmsg blocks on a full
// socket. Cancel returns within a bound and no send reads the freed buffer.
TEST(TcpTransportTest, CancelOfAStuckWriteReturnsWithBuffersFree) {
  const absl::Duration io = absl::Milliseconds(500);
  FakeOwner fake(FakeOwner::Mode::kNoRead);
  absl::Duration took;
  size_t lanes = 9;
  auto res = CancelThenFree(fake, OpCode::kWrite, 64 << 20, 4 << 20, io, &took, &lanes);
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_EQ(res->statuses.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(res->statuses[0])) << res->statuses[0];
  EXPECT_EQ(lanes, 0u);
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(TcpTransportTest, BadOptionsAreInvalidArgument) {
  TcpTransport::Options o;
  o.lanes_per_peer = 0;
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.lanes_per_peer = 1;
  o.slice_bytes = 100;
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.slice_bytes = 4096;
  o.bind_host = "not-an-ip";
  EXPECT_EQ(TcpTransport::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mooncake::transport
