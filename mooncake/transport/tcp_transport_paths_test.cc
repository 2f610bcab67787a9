// TcpTransport reaching one peer over several paths (link aggregation):
// spraying by weight and by measured capacity, a path killed mid-transfer,
// every path dead, a path coming back after its backoff. Loopback only: the
// paths are lanes bound to 127.0.0.x, and a "link" that can be slowed down,
// killed and restarted is a small forwarding proxy in this process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::transport {
namespace {

// Forwards 127.0.0.1:port() to 127.0.0.1:upstream, optionally paced to
// `rate_bytes_per_s` per direction and connection. Kill() resets every
// connection and stops listening (connects are refused); Start() listens on
// the same port again.
class Proxy {
 public:
  Proxy(uint16_t upstream, uint64_t rate_bytes_per_s)
      : upstream_(upstream), rate_(rate_bytes_per_s) {
    Start();
  }
  ~Proxy() { Kill(); }

  uint16_t port() const { return port_; }

  void Start() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = Addr(port_);
    ASSERT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0)
        << std::strerror(errno);
    ASSERT_EQ(::listen(listen_fd_, 64), 0);
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    stop_ = false;
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  void Kill() {
    stop_ = true;
    // Stops listening at once (connects are refused from here on) and
    // resets every connection, before waiting for any thread.
    if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
    std::vector<std::thread> pumps;
    {
      MutexLock lock(&mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    {
      MutexLock lock(&mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);  // accepted meanwhile
      pumps.swap(pumps_);
    }
    for (auto& t : pumps) t.join();
    MutexLock lock(&mu_);
    for (int fd : fds_) ::close(fd);
    fds_.clear();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

  // The source addresses of the connections accepted so far.
  std::vector<std::string> Sources() {
    MutexLock lock(&mu_);
    return sources_;
  }

 private:
  static sockaddr_in Addr(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }

  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      const int in = ::accept(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len);
      if (in < 0) continue;
      const int out = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in up = Addr(upstream_);
      if (::connect(out, reinterpret_cast<sockaddr*>(&up), sizeof(up)) != 0) {
        ::close(in);
        ::close(out);
        continue;
      }
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &from.sin_addr, text, sizeof(text));
      MutexLock lock(&mu_);
      sources_.emplace_back(text);
      fds_.push_back(in);
      fds_.push_back(out);
      pumps_.emplace_back([this, in, out] { Pump(in, out); });
      pumps_.emplace_back([this, in, out] { Pump(out, in); });
    }
  }

  void Pump(int from, int to) {
    std::vector<char> buf(64 << 10);
    const absl::Time start = absl::Now();
    uint64_t moved = 0;
    for (;;) {
      const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      if (rate_ > 0) {
        moved += static_cast<uint64_t>(n);
        absl::SleepFor(start + absl::Seconds(static_cast<double>(moved) / rate_) - absl::Now());
      }
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = ::send(to, buf.data() + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += w;
      }
    }
    ::shutdown(from, SHUT_RDWR);
    ::shutdown(to, SHUT_RDWR);
  }

  const uint16_t upstream_;
  const uint64_t rate_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  Mutex mu_;
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> sources_ ABSL_GUARDED_BY(mu_);
};

uint16_t PortOf(const std::string& endpoint) {
  return static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
}

class PathsTest : public ::testing::Test {
 protected:
  static constexpr size_t kSegmentBytes = 32 << 20;

  void SetUp() override {
    owner_ = std::move(*TcpTransport::Create({}));
    mem_.resize(kSegmentBytes);
    for (size_t i = 0; i < mem_.size(); ++i) mem_[i] = static_cast<char>(i * 131 + (i >> 12));
    auto seg = owner_->RegisterMemory(mem_.data(), mem_.size(), MemoryLocation::HostDram());
    ASSERT_TRUE(seg.ok());
    segment_ = seg->id;
    port_ = PortOf(owner_->LocalEndpoint());
  }

  TcpTransport::Options RequesterOptions() {
    TcpTransport::Options o;
    o.slice_bytes = 256 << 10;
    o.path_backoff_min = absl::Milliseconds(50);
    o.path_backoff_max = absl::Milliseconds(200);
    o.io_timeout = absl::Seconds(2);
    return o;
  }

  // Opens the owner's segment at `endpoint` on `t`.
  SegmentHandle Open(TcpTransport& t, const std::string& endpoint) {
    auto r = t.OpenSegment(endpoint, segment_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->handle : 0;
  }

  // READs `bytes` from offset 0 in one request; the batch's result.
  absl::StatusOr<BatchResult> Read(TcpTransport& t, SegmentHandle h, std::vector<char>& out,
                                   uint64_t bytes, const std::function<void()>& during = nullptr) {
    out.assign(bytes, 0);
    TransferRequest r{OpCode::kRead, out.data(), h, 0, bytes};
    auto batch = t.Submit({&r, 1});
    if (!batch.ok()) return batch.status();
    if (during) during();
    return t.Wait(*batch, absl::Now() + absl::Seconds(30));
  }

  bool SameAsOwner(const std::vector<char>& got) {
    return std::memcmp(got.data(), mem_.data(), got.size()) == 0;
  }

  std::vector<char> mem_;  // outlives the owner that serves it
  std::unique_ptr<TcpTransport> owner_;
  SegmentId segment_ = 0;
  uint16_t port_ = 0;
};

TEST_F(PathsTest, SpraysByConfiguredWeightOverBoundLocalAddresses) {
  Proxy proxy(port_, 0);
  auto o = RequesterOptions();
  o.local_paths = {{"127.0.0.2", 3}, {"127.0.0.3", 1}};
  auto t = std::move(*TcpTransport::Create(o));
  const std::string ep = absl::StrCat("tcp://127.0.0.1:", proxy.port());
  const SegmentHandle h = Open(*t, ep);
  std::vector<char> got;
  auto result = Read(*t, h, got, 16 << 20);  // 64 slices
  ASSERT_TRUE(result.ok() && result->ok()) << result.status();
  EXPECT_TRUE(SameAsOwner(got));
  const auto stats = t->PathStats(ep);
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, absl::StrCat("127.0.0.2->127.0.0.1:", proxy.port()));
  // First batch: no capacity measured yet, so exactly the 3:1 weights.
  EXPECT_EQ(stats[0].slices, 48u);
  EXPECT_EQ(stats[1].slices, 16u);
  EXPECT_EQ(stats[0].bytes + stats[1].bytes, 16u << 20);
  // Every data lane left from the address its path names.
  std::vector<std::string> sources = proxy.Sources();
  EXPECT_EQ(std::count(sources.begin(), sources.end(), "127.0.0.2"), 2);
  EXPECT_EQ(std::count(sources.begin(), sources.end(), "127.0.0.3"), 2);
  // The metrics carry the same counters.
  const std::string text = t->metrics().registry().RenderPrometheus();
  EXPECT_NE(text.find("mooncake_transport_path_slices_total{path=\"127.0.0.3->"), std::string::npos)
      << text;
}

TEST_F(PathsTest, SlowPathGetsProportionallyFewerSlices) {
  Proxy slow(port_, 20 << 20);  // 20 MB/s a connection against loopback's GB/s
  auto t = std::move(*TcpTransport::Create(RequesterOptions()));
  const std::string ep = absl::StrCat("tcp://127.0.0.1:", port_, ",127.0.0.1:", slow.port());
  const SegmentHandle h = Open(*t, ep);
  std::vector<char> got;
  // Warm up until both paths have a measured capacity that tells them apart
  // (a noisy shared machine can make one early sample look slow).
  for (int i = 0; i < 100; ++i) {
    auto s = t->PathStats(ep);
    if (s[1].capacity_bytes_per_s > 0 &&
        s[0].capacity_bytes_per_s > 3 * s[1].capacity_bytes_per_s) {
      break;
    }
    auto result = Read(*t, h, got, 8 << 20);
    ASSERT_TRUE(result.ok() && result->ok());
  }
  const auto before = t->PathStats(ep);
  ASSERT_GT(before[1].capacity_bytes_per_s, 0);
  EXPECT_GT(before[0].capacity_bytes_per_s, 3 * before[1].capacity_bytes_per_s);
  for (int i = 0; i < 5; ++i) {
    auto result = Read(*t, h, got, 8 << 20);
    ASSERT_TRUE(result.ok() && result->ok());
    EXPECT_TRUE(SameAsOwner(got));
  }
  const auto after = t->PathStats(ep);
  const double fast = after[0].slices - before[0].slices;
  const double slow_slices = after[1].slices - before[1].slices;
  EXPECT_EQ(fast + slow_slices, 5 * 32);
  EXPECT_LT(slow_slices / (fast + slow_slices), 0.25)
      << "fast " << fast << " slow " << slow_slices << " capacities "
      << after[0].capacity_bytes_per_s << " / " << after[1].capacity_bytes_per_s;
}

TEST_F(PathsTest, PathKilledMidTransferIsRetriedOnTheOthers) {
  Proxy doomed(port_, 20 << 20);  // its 16 MiB take ~400 ms: still busy at 50 ms
  auto t = std::move(*TcpTransport::Create(RequesterOptions()));
  const std::string ep = absl::StrCat("tcp://127.0.0.1:", port_, ",127.0.0.1:", doomed.port());
  const SegmentHandle h = Open(*t, ep);
  std::vector<char> got;
  auto result = Read(*t, h, got, 32 << 20, [&] {
    absl::SleepFor(absl::Milliseconds(50));
    doomed.Kill();
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->ok()) << result->FirstError();
  EXPECT_TRUE(SameAsOwner(got));
  const auto stats = t->PathStats(ep);
  EXPECT_GT(stats[1].retries, 0u);
  EXPECT_GE(stats[1].failures, 1u);
  EXPECT_FALSE(stats[1].up);
  EXPECT_EQ(stats[0].retries, 0u);
  // The slices that moved completed on the surviving path.
  EXPECT_EQ(stats[0].bytes + stats[1].bytes, 32u << 20);

  // WRITEs too: every byte lands although the path is gone.
  std::vector<char> src(8 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  TransferRequest w{OpCode::kWrite, src.data(), h, 1 << 20, src.size()};
  auto batch = t->Submit({&w, 1});
  ASSERT_TRUE(batch.ok());
  auto wr = t->Wait(*batch, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(wr.ok() && wr->ok());
  EXPECT_EQ(std::memcmp(mem_.data() + (1 << 20), src.data(), src.size()), 0);
}

TEST_F(PathsTest, AllPathsDeadIsAClearErrorNotAHang) {
  Proxy a(port_, 10 << 20), b(port_, 10 << 20);  // 32 MiB take ~800 ms
  auto t = std::move(*TcpTransport::Create(RequesterOptions()));
  const std::string ep = absl::StrCat("tcp://127.0.0.1:", a.port(), ",127.0.0.1:", b.port());
  const SegmentHandle h = Open(*t, ep);
  std::vector<char> got;
  const absl::Time start = absl::Now();
  auto result = Read(*t, h, got, 32 << 20, [&] {
    absl::SleepFor(absl::Milliseconds(50));
    a.Kill();
    b.Kill();
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->ok());
  EXPECT_EQ(result->FirstError().code(), absl::StatusCode::kUnavailable) << result->FirstError();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A later batch fails at once, naming every path.
  auto again = Read(*t, h, got, 1 << 20);
  ASSERT_TRUE(again.ok());
  ASSERT_FALSE(again->ok());
  const std::string msg(again->FirstError().message());
  EXPECT_NE(msg.find(absl::StrCat("127.0.0.1:", a.port())), std::string::npos) << msg;
  EXPECT_NE(msg.find(absl::StrCat("127.0.0.1:", b.port())), std::string::npos) << msg;
}

TEST_F(PathsTest, RecoveredPathIsUsedAgainAfterBackoff) {
  Proxy flaky(port_, 0);
  auto t = std::move(*TcpTransport::Create(RequesterOptions()));
  const std::string ep = absl::StrCat("tcp://127.0.0.1:", port_, ",127.0.0.1:", flaky.port());
  const SegmentHandle h = Open(*t, ep);
  std::vector<char> got;
  flaky.Kill();  // its lanes die while idle
  absl::SleepFor(absl::Milliseconds(50));
  auto down = Read(*t, h, got, 8 << 20);
  ASSERT_TRUE(down.ok() && down->ok());
  EXPECT_TRUE(SameAsOwner(got));
  auto stats = t->PathStats(ep);
  EXPECT_FALSE(stats[1].up);
  EXPECT_GE(stats[1].failures, 1u);
  const uint64_t slices_before = stats[1].slices;

  flaky.Start();  // same port
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!t->PathStats(ep)[1].up && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(t->PathStats(ep)[1].up) << "the probe never reconnected the path";
  auto up = Read(*t, h, got, 8 << 20);
  ASSERT_TRUE(up.ok() && up->ok());
  EXPECT_TRUE(SameAsOwner(got));
  EXPECT_GT(t->PathStats(ep)[1].slices, slices_before);
}

TEST_F(PathsTest, OwnerAdvertisesEveryAddress) {
  // Declared first, freed last: the owner's threads stop before it goes.
  std::vector<char> mem(1 << 20, 'x');
  TcpTransport::Options o;
  o.bind_host = "0.0.0.0";
  o.advertise_hosts = {"127.0.0.1", "127.0.0.4"};
  auto multi = std::move(*TcpTransport::Create(o));
  const std::string ep = multi->LocalEndpoint();
  const std::string port = ep.substr(ep.rfind(':') + 1);
  EXPECT_EQ(ep, absl::StrCat("tcp://127.0.0.1:", port, ",127.0.0.4:", port));
  auto seg = multi->RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
  ASSERT_TRUE(seg.ok());
  auto t = std::move(*TcpTransport::Create(RequesterOptions()));
  auto remote = t->OpenSegment(ep, seg->id);
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<char> got(mem.size());
  TransferRequest r{OpCode::kRead, got.data(), remote->handle, 0, got.size()};
  auto batch = t->Submit({&r, 1});
  ASSERT_TRUE(batch.ok());
  auto result = t->Wait(*batch, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(result.ok() && result->ok());
  EXPECT_EQ(got, mem);
  EXPECT_EQ(t->PathStats(ep).size(), 2u);
}

TEST_F(PathsTest, SinglePathPeerHasNoPaths) {
  auto t = std::move(*TcpTransport::Create(RequesterOptions()));
  const std::string ep = owner_->LocalEndpoint();
  const SegmentHandle h = Open(*t, ep);
  std::vector<char> got;
  auto result = Read(*t, h, got, 4 << 20);
  ASSERT_TRUE(result.ok() && result->ok());
  EXPECT_TRUE(SameAsOwner(got));
  EXPECT_TRUE(t->PathStats(ep).empty());
}

TEST(PathsOptionsTest, RejectsBadLocalPaths) {
  TcpTransport::Options o;
  o.local_paths = {{"eth0", 1}};
  EXPECT_EQ(TcpTransport::CheckOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o.local_paths = {{"127.0.0.2", 0}};
  EXPECT_EQ(TcpTransport::CheckOptions(o).code(), absl::StatusCode::kInvalidArgument);
  o.local_paths = {{"127.0.0.2", 2}};
  EXPECT_TRUE(TcpTransport::CheckOptions(o).ok());
}

}  // namespace
}  // namespace mooncake::transport
