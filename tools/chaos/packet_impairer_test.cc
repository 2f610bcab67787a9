#include "tools/chaos/packet_impairer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace mooncake::chaos {
namespace {

TEST(ParseImpairSpec, ReadsNetemWords) {
  absl::StatusOr<ImpairSpec> s = ParseImpairSpec("delay 80ms 40ms");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->delay_ms, 80);
  EXPECT_DOUBLE_EQ(s->jitter_ms, 40);
  EXPECT_DOUBLE_EQ(s->loss, 0);

  s = ParseImpairSpec("loss 15%");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->loss, 0.15);
  EXPECT_DOUBLE_EQ(s->delay_ms, 0);

  s = ParseImpairSpec("delay 10ms reorder 50% 50%");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->delay_ms, 10);
  EXPECT_DOUBLE_EQ(s->reorder, 0.5);

  s = ParseImpairSpec("delay 1s 500us 25% loss 1% 10%");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->delay_ms, 1000);
  EXPECT_DOUBLE_EQ(s->jitter_ms, 0.5);
  EXPECT_DOUBLE_EQ(s->loss, 0.01);
}

TEST(ParseImpairSpec, RefusesWhatItCannotDo) {
  for (const char* bad : {"delay", "delay fast", "loss 15", "loss 150%", "reorder 50%",
                          "delay 10ms 20ms", "rate 1mbit", "duplicate 1%", "corrupt 1%"}) {
    EXPECT_FALSE(ParseImpairSpec(bad).ok()) << bad;
  }
}

// Two namespaces joined by a veth pair: "mc<pid>n9a" at 10.77.<s>.1, "...b" at .2.
class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = PacketImpairer::Probe(); !s.ok()) {
      GTEST_SKIP() << "NFQUEUE impairment unavailable: " << s;
    }
    const int pid = getpid();
    prefix_ = absl::StrCat("mc", pid, "n9");  // NetLab::SweepStale's names: swept if we die
    net_ = absl::StrCat("10.77.", pid % 250, ".");
    for (const std::string& cmd : {
             absl::StrCat("ip netns add ", prefix_, "a"),
             absl::StrCat("ip netns add ", prefix_, "b"),
             absl::StrCat("ip link add ", prefix_, "x type veth peer name ", prefix_, "y"),
             absl::StrCat("ip link set ", prefix_, "x netns ", prefix_, "a"),
             absl::StrCat("ip link set ", prefix_, "y netns ", prefix_, "b"),
             absl::StrCat("ip -n ", prefix_, "a addr add ", net_, "1/24 dev ", prefix_, "x"),
             absl::StrCat("ip -n ", prefix_, "b addr add ", net_, "2/24 dev ", prefix_, "y"),
             absl::StrCat("ip -n ", prefix_, "a link set ", prefix_, "x up"),
             absl::StrCat("ip -n ", prefix_, "b link set ", prefix_, "y up"),
         }) {
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    a_ = UdpSocketIn(prefix_ + "a", 1);
    b_ = UdpSocketIn(prefix_ + "b", 2);
    ASSERT_GE(a_, 0);
    ASSERT_GE(b_, 0);
    // The link carries packets once both ends are up and b has a's address.
    bool through = false;
    for (int i = 0; i < 40 && !through; ++i) through = !SendBToA(1, 50).empty();
    ASSERT_TRUE(through) << "the veth pair never carried a datagram";
  }
  void TearDown() override {
    if (a_ >= 0) ::close(a_);
    if (b_ >= 0) ::close(b_);
    if (!prefix_.empty()) {
      std::system(absl::StrCat("ip netns del ", prefix_, "a 2>/dev/null").c_str());
      std::system(absl::StrCat("ip netns del ", prefix_, "b 2>/dev/null").c_str());
    }
  }

  // A UDP socket bound to <net>.<host>:7000 inside namespace `ns` (a socket
  // belongs to the namespace it was made in, whichever thread uses it).
  int UdpSocketIn(const std::string& ns, int host) {
    int fd = -1;
    std::thread([&] {
      const int nsfd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY);
      if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) return;
      ::close(nsfd);
      fd = ::socket(AF_INET, SOCK_DGRAM, 0);
      const int buf = 8 << 20;  // a whole burst waits unread
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
      sockaddr_in addr = Addr(host);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(fd);
        fd = -1;
      }
    }).join();
    return fd;
  }
  sockaddr_in Addr(int host) const {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(7000);
    inet_pton(AF_INET, absl::StrCat(net_, host).c_str(), &addr.sin_addr);
    return addr;
  }
  // Sends `n` numbered datagrams from b to a, then reads what a got within
  // `wait_ms` of the last: the numbers in arrival order.
  std::vector<uint32_t> SendBToA(uint32_t n, int wait_ms) {
    const sockaddr_in to = Addr(1);
    for (uint32_t i = 0; i < n; ++i) {
      ::sendto(b_, &i, sizeof(i), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
      if (i % 64 == 63) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::vector<uint32_t> got;
    pollfd pfd{a_, POLLIN, 0};
    while (::poll(&pfd, 1, wait_ms) > 0) {
      uint32_t v = 0;
      if (::recv(a_, &v, sizeof(v), 0) == sizeof(v)) got.push_back(v);
    }
    return got;
  }
  ImpairTarget OnA(const std::string& peer) const {
    return {.netns = prefix_ + "a", .interface = prefix_ + "x", .peer = peer, .queue = 3};
  }

  std::string prefix_, net_;
  int a_ = -1, b_ = -1;
};

TEST_F(TwoHosts, LossDropsTheShareItNamesAndStopRestoresTheLink) {
  ASSERT_EQ(SendBToA(100, 200).size(), 100u);
  {
    absl::StatusOr<std::unique_ptr<PacketImpairer>> imp =
        PacketImpairer::Start(OnA(""), {.loss = 0.3}, 1);
    ASSERT_TRUE(imp.ok()) << imp.status();
    const size_t got = SendBToA(2000, 200).size();
    EXPECT_GT(got, 1200u);
    EXPECT_LT(got, 1600u);
    (*imp)->Stop();
    EXPECT_EQ((*imp)->seen(), 2000u);
    EXPECT_EQ((*imp)->dropped(), 2000u - got);
  }
  EXPECT_EQ(SendBToA(100, 200).size(), 100u);  // rules gone
}

TEST_F(TwoHosts, TotalLossToOnePeerOnly) {
  absl::StatusOr<std::unique_ptr<PacketImpairer>> imp =
      PacketImpairer::Start(OnA(net_ + "9"), {.loss = 1.0}, 1);  // another peer
  ASSERT_TRUE(imp.ok()) << imp.status();
  EXPECT_EQ(SendBToA(50, 200).size(), 50u);
  (*imp)->Stop();
  imp = PacketImpairer::Start(OnA(net_ + "2"), {.loss = 1.0}, 1);  // b itself
  ASSERT_TRUE(imp.ok()) << imp.status();
  EXPECT_EQ(SendBToA(50, 200).size(), 0u);
}

TEST_F(TwoHosts, DelayHoldsEveryPacketBothWays) {
  absl::StatusOr<std::unique_ptr<PacketImpairer>> imp =
      PacketImpairer::Start(OnA(""), {.delay_ms = 60}, 1);
  ASSERT_TRUE(imp.ok()) << imp.status();
  const sockaddr_in to_a = Addr(1), to_b = Addr(2);
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t v = 7;
  ::sendto(b_, &v, sizeof(v), 0, reinterpret_cast<const sockaddr*>(&to_a), sizeof(to_a));
  pollfd pa{a_, POLLIN, 0};
  ASSERT_EQ(::poll(&pa, 1, 2000), 1);
  ASSERT_EQ(::recv(a_, &v, sizeof(v), 0), static_cast<ssize_t>(sizeof(v)));
  const double in_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ::sendto(a_, &v, sizeof(v), 0, reinterpret_cast<const sockaddr*>(&to_b), sizeof(to_b));
  pollfd pb{b_, POLLIN, 0};
  ASSERT_EQ(::poll(&pb, 1, 2000), 1);
  const double rtt_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(in_ms, 59);
  EXPECT_GE(rtt_ms, 118);
  EXPECT_LT(rtt_ms, 1000);
}

TEST_F(TwoHosts, ReorderSendsSomeAtOnceAndTheRestLate) {
  absl::StatusOr<std::unique_ptr<PacketImpairer>> imp =
      PacketImpairer::Start(OnA(""), {.delay_ms = 20, .reorder = 0.5}, 1);
  ASSERT_TRUE(imp.ok()) << imp.status();
  const std::vector<uint32_t> got = SendBToA(1000, 300);
  ASSERT_EQ(got.size(), 1000u);  // nothing lost
  size_t late = 0;               // arrived after a later-numbered datagram
  uint32_t highest = 0;
  for (uint32_t v : got) {
    late += v < highest;
    highest = std::max(highest, v);
  }
  EXPECT_GT(late, 200u);
  (*imp)->Stop();
  EXPECT_GT((*imp)->delayed(), 300u);
  EXPECT_LT((*imp)->delayed(), 700u);
}

}  // namespace
}  // namespace mooncake::chaos
