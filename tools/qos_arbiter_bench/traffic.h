// The benchmark's three traffic roles, over plain TCP sockets:
//
//   server    answers each request (an 8-byte little-endian length, at most
//             kMaxReadBytes) with that many bytes; one thread per connection.
//   bulk      reads in `chunk_bytes` requests, keeping up to
//             `inflight_max_bytes` outstanding (a KV migration that never
//             stops); with an arbiter, each request first acquires
//             `chunk_bytes` of the bulk class, released when its response has
//             arrived (receiver-paced: the bytes flow toward us, so we pace
//             the requests that release them).
//   critical  one 64 KiB read at a time, at `rate_per_s`; with an arbiter,
//             each read first acquires class 0 for its response bytes.
//
// Each client prints `key=value` lines that the runner parses; it measures
// over [warmup, warmup + seconds) of its own clock.
//
// Thread-safety: each role owns its sockets; the bulk role's sender and
// receiver threads share a mutex-protected queue of grants.
#ifndef MOONCAKE_TOOLS_QOS_ARBITER_BENCH_TRAFFIC_H_
#define MOONCAKE_TOOLS_QOS_ARBITER_BENCH_TRAFFIC_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/errno_status.h"
#include "mooncake/base/fd.h"
#include "mooncake/qos/shm_arbiter.h"

namespace mooncake::qos_bench {

inline constexpr uint64_t kMaxReadBytes = 4 << 20;
inline constexpr size_t kCriticalClass = 0;
inline constexpr size_t kBulkClass = 1;

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

inline absl::Status Serve(uint16_t port) {
  UniqueFd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!lfd.valid()) return ErrnoToStatus(errno, "socket");
  int one = 1;
  ::setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("bind 0.0.0.0:", port));
  }
  if (::listen(lfd.get(), 64) != 0) return ErrnoToStatus(errno, "listen");
  std::printf("listening=1\n");
  std::fflush(stdout);
  static const std::vector<char> payload(kMaxReadBytes, 'k');
  for (;;) {
    const int fd = ::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "accept");
    }
    std::thread([fd] {
      UniqueFd conn(fd);
      SetNoDelay(fd);
      uint64_t len = 0;
      while (ReadAll(fd, &len, sizeof(len)) && len <= kMaxReadBytes) {
        if (!WriteAll(fd, payload.data(), len)) break;
      }
    }).detach();
  }
}

inline absl::StatusOr<UniqueFd> Connect(const std::string& ip, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad IPv4 address '", ip, "'"));
  }
  // The server may still be starting: retry for up to 3 s.
  for (int attempt = 0;; ++attempt) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoToStatus(errno, "socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      SetNoDelay(fd.get());
      return fd;
    }
    if (attempt >= 300) return ErrnoToStatus(errno, absl::StrCat("connect ", ip, ":", port));
    ::usleep(10000);
  }
}

struct ClientOptions {
  std::string server_ip;
  uint16_t port = 0;
  double warmup_s = 0.5;
  double seconds = 3;
  std::string arbiter_link;  // empty: no arbiter
  uint64_t arbiter_capacity = 0;
  uint64_t arbiter_burst_bytes = 0;
  uint64_t arbiter_bulk_inflight_bytes = 0;
};

inline absl::StatusOr<std::unique_ptr<qos::ShmArbiter>> OpenArbiter(const ClientOptions& o) {
  if (o.arbiter_link.empty()) return std::unique_ptr<qos::ShmArbiter>();
  qos::ShmArbiterOptions ao;
  ao.priority_classes = 2;
  ao.burst_bytes = o.arbiter_burst_bytes;
  ao.bulk_inflight_max_bytes = o.arbiter_bulk_inflight_bytes;
  return qos::ShmArbiter::Open(o.arbiter_link, o.arbiter_capacity, ao);
}

struct BulkOptions {
  uint64_t chunk_bytes = 64 << 10;
  uint64_t inflight_max_bytes = 4 << 20;
};

inline absl::Status RunBulk(const ClientOptions& o, const BulkOptions& b) {
  absl::StatusOr<std::unique_ptr<qos::ShmArbiter>> arb = OpenArbiter(o);
  if (!arb.ok()) return arb.status();
  absl::StatusOr<UniqueFd> conn = Connect(o.server_ip, o.port);
  if (!conn.ok()) return conn.status();
  const int fd = conn->get();
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::optional<qos::ShmArbiter::Grant>> grants;  // one per request in flight
  uint64_t outstanding = 0;
  bool sender_done = false;
  uint64_t measured_bytes = 0;
  const auto t0 = Clock::now();
  const double end_s = o.warmup_s + o.seconds;

  std::thread receiver([&] {
    std::vector<char> buf(b.chunk_bytes);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return outstanding > 0 || sender_done; });
        if (outstanding == 0) return;
      }
      if (!ReadAll(fd, buf.data(), b.chunk_bytes)) return;
      const double t = SecondsSince(t0);
      std::lock_guard<std::mutex> lock(mu);
      if (t >= o.warmup_s && t < end_s) measured_bytes += b.chunk_bytes;
      grants.pop_front();  // releases the grant: the response is in
      outstanding -= b.chunk_bytes;
      cv.notify_all();
    }
  });
  // Bulk keeps running a little past the window so the critical client's
  // window is loaded to its end.
  while (SecondsSince(t0) < end_s + 0.3) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return outstanding + b.chunk_bytes <= b.inflight_max_bytes; });
    }
    std::optional<qos::ShmArbiter::Grant> grant;
    if (*arb != nullptr) {
      absl::StatusOr<qos::ShmArbiter::Grant> g =
          (*arb)->Acquire(kBulkClass, b.chunk_bytes, absl::Now() + absl::Milliseconds(100));
      if (g.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      if (!g.ok()) return g.status();
      grant = std::move(*g);
    }
    const uint64_t len = b.chunk_bytes;
    {
      std::lock_guard<std::mutex> lock(mu);
      grants.push_back(std::move(grant));
      outstanding += len;
      cv.notify_all();
    }
    if (!WriteAll(fd, &len, sizeof(len))) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    sender_done = true;
    cv.notify_all();
  }
  receiver.join();
  std::printf("bulk_bytes_per_s=%.0f\n", static_cast<double>(measured_bytes) / o.seconds);
  return absl::OkStatus();
}

struct CriticalOptions {
  uint64_t read_bytes = 64 << 10;
  double rate_per_s = 200;
};

// Calls `read_once` (one critical read, its grant included) at
// `c.rate_per_s` with +-50% jitter, and prints the latencies measured after
// the warm-up: critical_n, critical_p50_us, critical_p99_us.
template <typename ReadOnce>
absl::Status RunCriticalLoop(const ClientOptions& o, const CriticalOptions& c,
                             ReadOnce&& read_once) {
  std::vector<double> lat_us;
  const auto t0 = Clock::now();
  const auto interval = std::chrono::duration<double>(1.0 / c.rate_per_s);
  auto next = t0;
  uint32_t jitter = 12345;
  while (SecondsSince(t0) < o.warmup_s + o.seconds) {
    // +-50% jitter (xorshift) so reads do not phase-lock with bulk pacing.
    jitter ^= jitter << 13;
    jitter ^= jitter >> 17;
    jitter ^= jitter << 5;
    const double scale = 0.5 + (jitter % 1000) / 1000.0;
    next += std::chrono::duration_cast<Clock::duration>(interval * scale);
    std::this_thread::sleep_until(next);
    const auto start = Clock::now();
    if (absl::Status s = read_once(); !s.ok()) return s;
    const double t = std::chrono::duration<double>(start - t0).count();
    if (t >= o.warmup_s) {
      lat_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    if (Clock::now() > next + std::chrono::milliseconds(50)) next = Clock::now();
  }
  if (lat_us.empty()) return absl::InternalError("no critical reads measured");
  std::sort(lat_us.begin(), lat_us.end());
  auto pct = [&](double p) {
    return lat_us[std::min(lat_us.size() - 1, static_cast<size_t>(p * lat_us.size()))];
  };
  std::printf("critical_n=%zu\ncritical_p50_us=%.1f\ncritical_p99_us=%.1f\n", lat_us.size(),
              pct(0.50), pct(0.99));
  return absl::OkStatus();
}

inline absl::Status RunCritical(const ClientOptions& o, const CriticalOptions& c) {
  absl::StatusOr<std::unique_ptr<qos::ShmArbiter>> arb = OpenArbiter(o);
  if (!arb.ok()) return arb.status();
  absl::StatusOr<UniqueFd> conn = Connect(o.server_ip, o.port);
  if (!conn.ok()) return conn.status();
  const int fd = conn->get();
  std::vector<char> buf(c.read_bytes);
  return RunCriticalLoop(o, c, [&]() -> absl::Status {
    std::optional<qos::ShmArbiter::Grant> grant;
    if (*arb != nullptr) {
      absl::StatusOr<qos::ShmArbiter::Grant> g =
          (*arb)->Acquire(kCriticalClass, c.read_bytes, absl::Now() + absl::Seconds(1));
      if (!g.ok()) return g.status();
      grant = std::move(*g);
    }
    const uint64_t len = c.read_bytes;
    if (!WriteAll(fd, &len, sizeof(len)) || !ReadAll(fd, buf.data(), len)) {
      return absl::UnavailableError("critical connection closed");
    }
    return absl::OkStatus();
  });
}

}  // namespace mooncake::qos_bench

#endif  // MOONCAKE_TOOLS_QOS_ARBITER_BENCH_TRAFFIC_H_
