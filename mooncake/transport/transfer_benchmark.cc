// transfer_bench: READ/WRITE bandwidth and P50/P99 latency of every transport
// model against raw baselines measured in the same run.
//
//   bazel run -c opt //mooncake/transport:transfer_bench [-- --quick]
//   bazel run -c opt //mooncake/transport:transfer_bench -- --auth   # auth on vs off only
//
// A fork()ed owner process holds one 64 MiB segment, registered with both an
// ShmTransport and a TcpTransport, plus a minimal plain-TCP server. This
// process is the requester. Baselines: single-thread memcpy of the same block
// sizes (same offset pattern); a plain TCP stream (server sends, client recv()s
// each block straight into its buffer) received three ways (blocking recv,
// epoll + non-blocking recv, io_uring recv) to measure the I/O model; and a
// plain 64 KiB request/response on one connection for latency. All traffic is
// on 127.0.0.1. Every figure is the median of `reps` runs. The owner also
// serves the segment through a TcpTransport with an auth token (a random
// cluster secret both processes share): --auth compares it with the plain
// one, interleaved (docs/transport.md, "Authentication").
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/histogram.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/local_transport.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"
#include "tools/bench/memcached_driver.h"
#include "tools/bench/servers.h"

namespace mooncake::transport {
namespace {

constexpr uint64_t kSegmentBytes = 64 << 20;
constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
int g_reps = 5;
uint64_t g_volume = 256 * kMiB;  // bytes per bandwidth run
// Every loop here submits a batch and waits for it at once: with this on
// (the default; --thread_receives turns it off) a transport that can receive
// on the waiting thread (TcpTransport::SubmitForWait) is asked to.
bool g_caller_receives = true;

template <typename T>
absl::StatusOr<BatchId> SubmitThenWait(T& t, std::span<const TransferRequest> reqs) {
  return g_caller_receives ? SubmitForWaitOrSubmit(t, reqs) : t.Submit(reqs);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
int64_t NowNs() { return MonotonicClock::Get().NowNs(); }
std::string LoadAverage() {
  double l[3] = {0, 0, 0};
  if (::getloadavg(l, 3) != 3) return "unknown";
  char b[64];
  std::snprintf(b, sizeof(b), "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return b;
}
std::string SizeName(uint64_t b) {
  return b >= kMiB ? std::to_string(b / kMiB) + "MiB" : std::to_string(b / kKiB) + "KiB";
}
size_t BatchFor(uint64_t block) { return block >= 16 * kMiB ? 1 : block >= kMiB ? 8 : 16; }

// --- Plain TCP baseline: a minimal server and three receivers. -------------

int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  MC_ASSERT(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0, "connect");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void WriteFull(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return;
    c += k;
    n -= static_cast<size_t>(k);
  }
}
bool ReadFull(int fd, void* p, size_t n) {
  return ::recv(fd, p, n, MSG_WAITALL) == static_cast<ssize_t>(n);
}

// Request {mode, block, count}: 'S' streams count blocks; 'R' answers count
// requests of one byte each with a block.
struct PlainRequest {
  char mode;
  uint64_t block;
  uint64_t count;
  uint64_t fixed_offset_plus1 = 0;  // 0: rotate through the segment; else offset + 1
};

// 'F' answers like 'R' but sends each block with sendfile() from the
// segment's memfd (`data_fd`): the kernel references the pages instead of
// copying them into the socket (the candidate for a one-copy owner).
void PlainServe(int fd, const char* data, int data_fd) {
  PlainRequest req;
  while (ReadFull(fd, &req, sizeof(req))) {
    for (uint64_t i = 0; i < req.count; ++i) {
      if (req.mode == 'R' || req.mode == 'F') {
        char b;
        if (!ReadFull(fd, &b, 1)) return;
      }
      const uint64_t off = req.fixed_offset_plus1 != 0
                               ? req.fixed_offset_plus1 - 1
                               : (i * req.block) % (kSegmentBytes - req.block + 1);
      if (req.mode != 'F') {
        WriteFull(fd, data + off, req.block);
        continue;
      }
      off_t at = static_cast<off_t>(off);
      for (uint64_t left = req.block; left > 0;) {
        const ssize_t k = ::sendfile(fd, data_fd, &at, left);
        if (k <= 0) return;
        left -= static_cast<uint64_t>(k);
      }
    }
  }
}

uint16_t StartPlainServer(const char* data, int data_fd) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  MC_ASSERT(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0, "bind");
  ::listen(lfd, 64);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread([lfd, data, data_fd] {
    for (;;) {
      const int fd = ::accept(lfd, nullptr, nullptr);
      if (fd < 0) return;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::thread([fd, data, data_fd] {
        PlainServe(fd, data, data_fd);
        ::close(fd);
      }).detach();
    }
  }).detach();
  return ntohs(a.sin_port);
}

enum class RecvModel { kBlocking, kEpoll, kIoUring };

// Receives `count` blocks on fd; returns false on error.
bool ReceiveBlocks(int fd, char* dst, uint64_t block, uint64_t count, RecvModel model) {
  if (model == RecvModel::kBlocking) {
    for (uint64_t i = 0; i < count; ++i) {
      if (!ReadFull(fd, dst, block)) return false;
    }
    return true;
  }
  if (model == RecvModel::kEpoll) {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{EPOLLIN, {}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t got = 0;
      while (got < block) {
        const ssize_t k = ::recv(fd, dst + got, block - got, MSG_DONTWAIT);
        if (k > 0) {
          got += static_cast<uint64_t>(k);
        } else if (k < 0 && errno == EAGAIN) {
          ::epoll_wait(ep, &ev, 1, 1000);
        } else {
          ::close(ep);
          return false;
        }
      }
    }
    ::close(ep);
    return true;
  }
  io_uring ring;
  if (::io_uring_queue_init(8, &ring, 0) != 0) return false;
  bool ok = true;
  for (uint64_t i = 0; i < count && ok; ++i) {
    uint64_t got = 0;
    while (got < block && ok) {
      io_uring_sqe* sqe = ::io_uring_get_sqe(&ring);
      ::io_uring_prep_recv(sqe, fd, dst + got, block - got, MSG_WAITALL);
      ::io_uring_submit(&ring);
      io_uring_cqe* cqe;
      ok = ::io_uring_wait_cqe(&ring, &cqe) == 0 && cqe->res > 0;
      if (ok) got += static_cast<uint64_t>(cqe->res);
      ::io_uring_cqe_seen(&ring, cqe);
    }
  }
  ::io_uring_queue_exit(&ring);
  return ok;
}

// GB/s of a server->client stream over `pairs` connections in parallel.
double PlainStreamGBps(uint16_t port, uint64_t block, int pairs, RecvModel model,
                       int runs = g_reps) {
  const uint64_t count = std::max<uint64_t>(4, g_volume / block / pairs);
  std::vector<int> fds;
  std::vector<std::vector<char>> bufs;
  for (int p = 0; p < pairs; ++p) {
    fds.push_back(ConnectLoopback(port));
    bufs.emplace_back(block);
  }
  std::vector<double> results;
  for (int r = 0; r < runs; ++r) {
    const int64_t t0 = NowNs();
    std::vector<std::thread> th;
    for (int p = 0; p < pairs; ++p) {
      th.emplace_back([&, p] {
        const PlainRequest req{'S', block, count};
        WriteFull(fds[p], &req, sizeof(req));
        MC_ASSERT(ReceiveBlocks(fds[p], bufs[p].data(), block, count, model), "plain stream");
      });
    }
    for (auto& t : th) t.join();
    results.push_back(double(count * block * pairs) / double(NowNs() - t0));
  }
  for (int fd : fds) ::close(fd);
  return Median(results);
}

// P50/P99 (us) of a plain request/response of `block` bytes on one connection.
std::pair<double, double> PlainRequestResponseUs(uint16_t port, uint64_t block, int n) {
  const int fd = ConnectLoopback(port);
  std::vector<char> buf(block);
  const PlainRequest req{'R', block, static_cast<uint64_t>(n)};
  WriteFull(fd, &req, sizeof(req));
  LatencyHistogram h;
  for (int i = 0; i < n; ++i) {
    const int64_t t0 = NowNs();
    const char b = 'x';
    WriteFull(fd, &b, 1);
    MC_ASSERT(ReadFull(fd, buf.data(), block), "plain response");
    h.Record(static_cast<uint64_t>(NowNs() - t0));
  }
  ::close(fd);
  return {h.P50() / 1e3, h.P99() / 1e3};
}

// --- Transports. -------------------------------------------------------------

// GB/s of `threads` threads each doing batches of `batch` blocks.
template <typename T>
double TransportGBps(T& t, SegmentHandle h, OpCode op, uint64_t block, size_t batch, int threads,
                     int runs = g_reps) {
  const uint64_t per_batch = block * batch;
  const uint64_t iters = std::max<uint64_t>(3, g_volume / per_batch / threads);
  std::vector<std::vector<char>> bufs(threads, std::vector<char>(per_batch, 'w'));
  std::vector<double> results;
  for (int r = 0; r < runs; ++r) {
    const int64_t t0 = NowNs();
    std::vector<std::thread> th;
    for (int w = 0; w < threads; ++w) {
      th.emplace_back([&, w] {
        std::vector<TransferRequest> reqs(batch);
        for (uint64_t it = 0; it < iters; ++it) {
          for (size_t k = 0; k < batch; ++k) {
            const uint64_t off =
                ((it * batch + k) * block + w * 4096) % (kSegmentBytes - block + 1);
            reqs[k] = {op, bufs[w].data() + k * block, h, off / 4096 * 4096, block};
          }
          auto id = SubmitThenWait(t, reqs);
          MC_ASSERT(id.ok(), "submit");
          auto res = t.Wait(*id, absl::Now() + absl::Seconds(60));
          MC_ASSERT(res.ok() && res->ok(), "transfer failed in the benchmark");
        }
      });
    }
    for (auto& x : th) x.join();
    results.push_back(double(iters * per_batch * threads) / double(NowNs() - t0));
  }
  return Median(results);
}

template <typename T>
std::pair<double, double> TransportLatencyUs(T& t, SegmentHandle h, OpCode op, uint64_t block,
                                             int n) {
  std::vector<char> buf(block, 'w');
  LatencyHistogram hist;
  for (int i = 0; i < n; ++i) {
    const TransferRequest r{op, buf.data(), h,
                            (i * block) % (kSegmentBytes - block + 1) / 4096 * 4096, block};
    const int64_t t0 = NowNs();
    auto id = SubmitThenWait(t, std::span<const TransferRequest>(&r, 1));
    MC_ASSERT(id.ok(), "submit");
    auto res = t.Wait(*id, absl::Now() + absl::Seconds(60));
    MC_ASSERT(res.ok() && res->ok(), "transfer failed in the benchmark");
    hist.Record(static_cast<uint64_t>(NowNs() - t0));
  }
  return {hist.P50() / 1e3, hist.P99() / 1e3};
}

double MemcpyGBps(const char* src, uint64_t block, size_t batch, int runs = g_reps) {
  std::vector<char> dst(block * batch);
  const uint64_t iters = std::max<uint64_t>(3, g_volume / (block * batch));
  std::vector<double> results;
  for (int r = 0; r < runs; ++r) {
    const int64_t t0 = NowNs();
    for (uint64_t it = 0; it < iters; ++it) {
      for (size_t k = 0; k < batch; ++k) {
        const uint64_t off = ((it * batch + k) * block) % (kSegmentBytes - block + 1) / 4096 * 4096;
        std::memcpy(dst.data() + k * block, src + off, block);
      }
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    results.push_back(double(iters * block * batch) / double(NowNs() - t0));
  }
  return Median(results);
}

int RoundsFor(uint64_t block) { return block <= 64 * kKiB ? 3000 : block <= kMiB ? 300 : 30; }

// `spread_min_bytes` 0: every request's slices are dealt over the lanes (the
// lane tables measure exactly that); the store-path clients keep the default.
std::unique_ptr<TcpTransport> MakeTcp(
    size_t lanes, uint32_t slice_bytes = 512 << 10,
    uint64_t spread_min_bytes = TcpTransport::Options{}.spread_min_bytes,
    std::shared_ptr<const auth::Credentials> creds = nullptr) {
  TcpTransport::Options o;
  o.lanes_per_peer = lanes;
  o.slice_bytes = slice_bytes;
  o.spread_min_bytes = spread_min_bytes;
  o.auth = std::move(creds);
  auto t = TcpTransport::Create(o);
  MC_ASSERT(t.ok(), "tcp transport");
  return std::move(*t);
}

// A random cluster secret, made before the owner is forked so both processes
// hold it.
const std::shared_ptr<const auth::Credentials>& BenchCredentials() {
  static const auto* creds = [] {
    std::string hex;
    char b[3];
    for (uint8_t x : auth::NewNonce()) {
      std::snprintf(b, sizeof(b), "%02x", x);
      hex += b;
    }
    auto c = auth::Credentials::Parse("cluster " + hex, "transfer_bench");
    MC_ASSERT(c.ok(), "bench credentials");
    return new std::shared_ptr<const auth::Credentials>(
        std::make_shared<const auth::Credentials>(*std::move(c)));
  }();
  return *creds;
}

// --- The owner process. ------------------------------------------------------

struct OwnerInfo {
  char shm_endpoint[128];
  char tcp_endpoint[128];
  char tcp_auth_endpoint[128];  // the same memory behind a TcpTransport with auth
  SegmentId tcp_auth_segment;
  char router_endpoint[512];
  SegmentId shm_segment;
  SegmentId tcp_segment;
  SegmentId router_segment;  // the same memory, served as a store worker does
  uint16_t plain_port;
};

pid_t StartOwner(OwnerInfo* info, int* keepalive_fd) {
  int ad[2], ctl[2];
  MC_ASSERT(::pipe(ad) == 0 && ::pipe(ctl) == 0, "pipe");
  (void)BenchCredentials();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ctl[1]);
    ::alarm(3600);
    auto mem = SharedMemory::Create(kSegmentBytes);
    MC_ASSERT(mem.ok(), "shared memory");
    std::memset(mem->data(), 'o', kSegmentBytes);
    ShmTransport shm;
    TcpTransport tcp;
    TcpTransport::Options auth_options;
    auth_options.auth = BenchCredentials();
    TcpTransport tcp_auth(auth_options);
    auto router = Router::Create({}, std::make_unique<ShmTransport>(), MakeTcp(2));
    MC_ASSERT(router.ok(), "owner router");
    OwnerInfo out{};
    std::snprintf(out.shm_endpoint, sizeof(out.shm_endpoint), "%s", shm.LocalEndpoint().c_str());
    std::snprintf(out.tcp_endpoint, sizeof(out.tcp_endpoint), "%s", tcp.LocalEndpoint().c_str());
    std::snprintf(out.router_endpoint, sizeof(out.router_endpoint), "%s",
                  (*router)->LocalEndpoint().c_str());
    out.shm_segment = shm.RegisterMemory(mem->data(), kSegmentBytes, {})->id;
    out.tcp_segment = tcp.RegisterMemory(mem->data(), kSegmentBytes, {})->id;
    std::snprintf(out.tcp_auth_endpoint, sizeof(out.tcp_auth_endpoint), "%s",
                  tcp_auth.LocalEndpoint().c_str());
    out.tcp_auth_segment = tcp_auth.RegisterMemory(mem->data(), kSegmentBytes, {})->id;
    out.router_segment =
        (*router)->RegisterMemory(mem->data(), kSegmentBytes, MemoryLocation::SharedMemory())->id;
    auto memfd = shm_internal::MemfdDirectory::Get().Dup(mem->data(), kSegmentBytes);
    MC_ASSERT(memfd.ok(), "the segment's memfd");
    out.plain_port = StartPlainServer(static_cast<const char*>(mem->data()), memfd->get());
    MC_ASSERT(::write(ad[1], &out, sizeof(out)) == sizeof(out), "advertise");
    char c;
    while (::read(ctl[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(ctl[0]);
  ::close(ad[1]);
  MC_ASSERT(::read(ad[0], info, sizeof(*info)) == sizeof(*info), "owner info");
  *keepalive_fd = ctl[1];
  return pid;
}

}  // namespace
}  // namespace mooncake::transport

namespace mooncake::transport {
namespace {

struct Row {
  std::string name;
  double gbps;
  double p50_us;
  double p99_us;
};

template <typename T>
Row Measure(const std::string& name, T& t, SegmentHandle h, OpCode op, uint64_t block,
            int threads = 1, size_t batch = 0) {
  Row row{name, TransportGBps(t, h, op, block, batch == 0 ? BatchFor(block) : batch, threads), 0,
          0};
  std::tie(row.p50_us, row.p99_us) = TransportLatencyUs(t, h, op, block, RoundsFor(block));
  return row;
}

void PrintRow(const Row& r, double baseline, const char* baseline_name) {
  std::printf("  %-34s %8.2f GB/s  P50 %9.1f us  P99 %9.1f us  %5.2fx %s\n", r.name.c_str(), r.gbps,
              r.p50_us, r.p99_us, r.gbps / baseline, baseline_name);
}

template <typename T>
SegmentHandle Open(T& t, const std::string& endpoint, SegmentId id) {
  auto r = t.OpenSegment(endpoint, id);
  MC_ASSERT(r.ok(), "open segment in the benchmark");
  return r->handle;
}

// Runs candidate and baseline alternately, one run each per rep, so both see
// the same machine load; returns the medians and the median of the ratios.
struct Paired {
  double candidate, baseline, ratio;
};
Paired RunPaired(const std::function<double()>& candidate,
                 const std::function<double()>& baseline) {
  std::vector<double> c, b, r;
  for (int i = 0; i < g_reps; ++i) {
    c.push_back(candidate());
    b.push_back(baseline());
    r.push_back(c.back() / b.back());
  }
  return {Median(c), Median(b), Median(r)};
}

void PrintPaired(const char* what, const Paired& p, const char* unit, const char* cmp,
                 double target) {
  const bool met = cmp[0] == '>' ? p.ratio >= target : p.ratio <= target;
  std::printf("  %-44s %8.2f vs %8.2f %s  ratio %5.2fx (target %s %.2f) %s\n", what, p.candidate,
              p.baseline, unit, p.ratio, cmp, target, met ? "MET" : "NOT MET");
}

void PairedTargets(const OwnerInfo& info, const char* local_mem, ShmTransport& shm,
                   SegmentHandle sh, TcpTransport& tcp1, SegmentHandle th1, TcpTransport& tcp2,
                   SegmentHandle th2) {
  std::printf("\n[targets, interleaved: candidate and baseline alternate, median of %d ratios]\n",
              g_reps);
  const OpCode rd = OpCode::kRead;
  for (uint64_t block : {kMiB, 16 * kMiB}) {
    const size_t batch = BatchFor(block);
    const std::string b = SizeName(block);
    PrintPaired(("SHM READ " + b + " / memcpy").c_str(),
                RunPaired([&] { return TransportGBps(shm, sh, rd, block, batch, 1, 1); },
                          [&] { return MemcpyGBps(local_mem, block, batch, 1); }),
                "GB/s", ">=", 0.8);
    PrintPaired(
        ("TCP READ " + b + " 1 lane / plain stream").c_str(),
        RunPaired(
            [&] { return TransportGBps(tcp1, th1, rd, block, batch, 1, 1); },
            [&] { return PlainStreamGBps(info.plain_port, block, 1, RecvModel::kBlocking, 1); }),
        "GB/s", ">=", 0.9);
    PrintPaired(("TCP READ " + b + " 2 lanes / 1 lane").c_str(),
                RunPaired([&] { return TransportGBps(tcp2, th2, rd, block, batch, 1, 1); },
                          [&] { return TransportGBps(tcp1, th1, rd, block, batch, 1, 1); }),
                "GB/s", ">=", 1.4);
  }
  const Paired ceiling =
      RunPaired([&] { return PlainStreamGBps(info.plain_port, kMiB, 2, RecvModel::kBlocking, 1); },
                [&] { return PlainStreamGBps(info.plain_port, kMiB, 1, RecvModel::kBlocking, 1); });
  std::printf("  %-44s %8.2f vs %8.2f GB/s  ratio %5.2fx (this run's ceiling for lanes)\n",
              "context: plain TCP 2 pairs / 1 pair, 1MiB", ceiling.candidate, ceiling.baseline,
              ceiling.ratio);
  PrintPaired(
      "TCP READ 64KiB P99 / plain req-resp P99",
      RunPaired([&] { return TransportLatencyUs(tcp1, th1, rd, 64 * kKiB, 2000).second; },
                [&] { return PlainRequestResponseUs(info.plain_port, 64 * kKiB, 2000).second; }),
      "us", "<=", 1.5);
}

// --- The store's GET path: concurrent clients against memcached. ------------

struct Concurrent {
  double gbps, p50_us, p99_us;
};

// `clients` threads each call get(client, op) `ops` times at once; aggregate
// GB/s and the latency quantiles of every get.
Concurrent RunConcurrent(int clients, uint64_t size, int ops,
                         const std::function<void(int, int)>& get) {
  LatencyHistogram hist;  // Record is thread-safe
  const int64_t t0 = NowNs();
  std::vector<std::thread> th;
  for (int c = 0; c < clients; ++c) {
    th.emplace_back([&, c] {
      for (int op = 0; op < ops; ++op) {
        const int64_t start = NowNs();
        get(c, op);
        hist.Record(static_cast<uint64_t>(NowNs() - start));
      }
    });
  }
  for (auto& t : th) t.join();
  const double ns = double(NowNs() - t0);
  return {double(uint64_t(clients) * uint64_t(ops) * size) / ns, hist.P50() / 1e3,
          hist.P99() / 1e3};
}

uint64_t ClientOffset(int client, uint64_t size) {
  return (uint64_t(client) * size) % (kSegmentBytes - size + 1) / 4096 * 4096;
}

// One client's view through any transport: open once, then single-request
// READ batches into its own buffer (what Client::GetInto does per object).
struct TransportClients {
  std::vector<std::unique_ptr<Router>> routers;
  std::vector<std::unique_ptr<TcpTransport>> tcps;
  std::vector<SegmentHandle> handles;
  std::vector<std::vector<char>> bufs;

  // kAfter: the value's checksum from the buffer once the read is done (the
  // store client before chunk digests); kOnLanding: with chunk digests taken
  // by the transport as the bytes land (the store client now).
  enum class Verify { kNone, kAfter, kOnLanding };

  template <typename T>
  void Get(T& t, int c, uint64_t size, Verify verify = Verify::kNone) {
    std::vector<uint64_t> digests;
    if (verify == Verify::kOnLanding) digests.assign(DigestChunkCount(size), kNoDigest);
    const TransferRequest r{OpCode::kRead, bufs[c].data(),
                            handles[c],    ClientOffset(c, size),
                            size,          digests.empty() ? nullptr : digests.data()};
    auto id = SubmitThenWait(t, std::span<const TransferRequest>(&r, 1));
    MC_ASSERT(id.ok(), "submit");
    auto res = t.Wait(*id, absl::Now() + absl::Seconds(60));
    MC_ASSERT(res.ok() && res->ok(), "transfer failed in the benchmark");
    if (verify == Verify::kNone) return;
    const uint64_t sum = verify == Verify::kAfter
                             ? ValueChecksum(bufs[c].data(), size)
                             : ValueChecksumWith(bufs[c].data(), size, digests.data());
    asm volatile("" : : "r"(sum) : "memory");
  }
};

TransportClients RouterClients(const OwnerInfo& info, int clients, bool shm, size_t lanes,
                               bool direct = true, uint32_t tcp_slice_bytes = 512 << 10) {
  TransportClients out;
  RouterOptions o;
  o.direct_path = direct;
  for (int c = 0; c < clients; ++c) {
    auto r = shm ? Router::Create(o, std::make_unique<ShmTransport>(), MakeTcp(lanes))
                 : Router::Create(o, MakeTcp(lanes, tcp_slice_bytes));
    MC_ASSERT(r.ok(), "client router");
    out.handles.push_back(Open(**r, info.router_endpoint, info.router_segment));
    out.routers.push_back(std::move(*r));
    out.bufs.emplace_back(16 * kMiB);
  }
  return out;
}

TransportClients TcpClients(const OwnerInfo& info, int clients, size_t lanes) {
  TransportClients out;
  for (int c = 0; c < clients; ++c) {
    out.tcps.push_back(MakeTcp(lanes));
    out.handles.push_back(Open(*out.tcps.back(), info.tcp_endpoint, info.tcp_segment));
    out.bufs.emplace_back(16 * kMiB);
  }
  return out;
}

struct Variant {
  std::string name;
  std::function<Concurrent(uint64_t size, int ops)> run;
  std::vector<double> gbps, p99, ratio, p99_ratio;  // per rep
};

// Plain request/response clients on the owner's plain server ('R' sendmsg,
// 'F' sendfile): the floor any TCP store pays on this kernel.
Concurrent PlainConcurrent(uint16_t port, char mode, int clients, uint64_t size, int ops) {
  std::vector<int> fds;
  std::vector<std::vector<char>> bufs;
  for (int c = 0; c < clients; ++c) {
    fds.push_back(ConnectLoopback(port));
    bufs.emplace_back(size);
    // Each client's own fixed range, as the transports and memcached read.
    const PlainRequest req{mode, size, static_cast<uint64_t>(ops), ClientOffset(c, size) + 1};
    WriteFull(fds.back(), &req, sizeof(req));
  }
  const Concurrent r = RunConcurrent(clients, size, ops, [&](int c, int) {
    const char b = 'x';
    WriteFull(fds[c], &b, 1);
    MC_ASSERT(ReadFull(fds[c], bufs[c].data(), size), "plain response");
  });
  for (int fd : fds) ::close(fd);
  return r;
}

void StoreGetPath(const OwnerInfo& info, int clients) {
  std::printf(
      "\n[store GET path: %d concurrent clients on loopback, one GET = one single-request READ "
      "batch; interleaved, median of %d reps; load average %s]\n",
      clients, g_reps, LoadAverage().c_str());
  // The same memcached and client mooncake_bench compares against.
  bench::MemcachedConfig mc_config;
  mc_config.memory_mb = 2048;
  mc_config.item_max = "16m";
  mc_config.threads = 4;
  auto mc = bench::StartMemcached(mc_config, "/tmp/transfer_bench_memcached.log");
  if (!mc.ok()) {
    std::printf("  memcached baseline unavailable: %s\n", mc.status().ToString().c_str());
    return;
  }
  std::vector<std::unique_ptr<bench::MemcachedDriver>> conns;
  for (int c = 0; c < clients; ++c) {
    bench::MemcachedOptions options;
    options.port = mc->port;
    auto conn = bench::MemcachedDriver::Connect(options);
    MC_ASSERT(conn.ok(), "memcached connection");
    conns.push_back(std::move(*conn));
  }
  std::vector<std::vector<char>> mc_bufs(clients, std::vector<char>(16 * kMiB, 'v'));
  TransportClients rt2 = RouterClients(info, clients, false, 2);
  TransportClients rt1 = RouterClients(info, clients, false, 1);
  TransportClients rt1s = RouterClients(info, clients, false, 1, true, 1 << 20);
  TransportClients rtq = RouterClients(info, clients, false, 2, false);
  TransportClients rt4 = RouterClients(info, clients, false, 4);
  TransportClients rt2s = RouterClients(info, clients, false, 2, true, 256 << 10);
  TransportClients tcp2 = TcpClients(info, clients, 2);
  TransportClients rshm = RouterClients(info, clients, true, 2);
  using Verify = TransportClients::Verify;
  const auto via = [clients](TransportClients& tc, bool router, Verify verify = Verify::kNone) {
    return [&tc, router, clients, verify](uint64_t size, int ops) {
      return RunConcurrent(clients, size, ops, [&](int c, int) {
        if (router) {
          tc.Get(*tc.routers[c], c, size, verify);
        } else {
          tc.Get(*tc.tcps[c], c, size, verify);
        }
      });
    };
  };
  const int n = clients;
  std::vector<Variant> variants = {
      {"memcached GET, libmemcached (-t 4)",
       [&](uint64_t size, int ops) {
         return RunConcurrent(n, size, ops, [&](int c, int) {
           const absl::StatusOr<std::string_view> v = conns[c]->Get("k" + std::to_string(c));
           MC_ASSERT(v.ok() && v->size() == size, "memcached get");
         });
       }},
      {"plain req/resp, sendmsg (context)",
       [&](uint64_t size, int ops) { return PlainConcurrent(info.plain_port, 'R', n, size, ops); }},
      {"plain req/resp, sendfile (context)",
       [&](uint64_t size, int ops) { return PlainConcurrent(info.plain_port, 'F', n, size, ops); }},
      {"router tcp, 2 lanes (store client)", via(rt2, true)},
      {"router tcp, 1 lane", via(rt1, true)},
      {"router tcp, 1 lane, 1 MiB TCP slices", via(rt1s, true)},
      {"router tcp, 2 lanes, dispatcher only", via(rtq, true)},
      {"router tcp, 4 lanes", via(rt4, true)},
      {"router tcp, 2 lanes, 256 KiB TCP slices", via(rt2s, true)},
      {"tcp transport, 2 lanes, no router", via(tcp2, false)},
      {"router shm (same host)", via(rshm, true)},
      {"router tcp, 2 lanes, checksum after", via(rt2, true, Verify::kAfter)},
      {"router tcp, 2 lanes, checksum on landing", via(rt2, true, Verify::kOnLanding)},
      {"router shm, checksum after", via(rshm, true, Verify::kAfter)},
      {"router shm, checksum on landing", via(rshm, true, Verify::kOnLanding)},
  };
  for (uint64_t size : {kMiB, 4 * kMiB}) {
    for (int c = 0; c < clients; ++c) {
      MC_ASSERT(
          conns[c]->Put("k" + std::to_string(c), std::string_view(mc_bufs[c].data(), size)).ok(),
          "memcached set");
    }
    const int ops = static_cast<int>(std::max<uint64_t>(8, g_volume * 16 / size / clients));
    for (Variant& v : variants) v.gbps.clear(), v.p99.clear(), v.ratio.clear(), v.p99_ratio.clear();
    for (int rep = 0; rep < g_reps; ++rep) {
      Concurrent base{};
      for (size_t k = 0; k < variants.size(); ++k) {
        const Concurrent r = variants[k].run(size, ops);
        if (k == 0) base = r;
        variants[k].gbps.push_back(r.gbps);
        variants[k].p99.push_back(r.p99_us);
        variants[k].ratio.push_back(r.gbps / base.gbps);
        variants[k].p99_ratio.push_back(r.p99_us / base.p99_us);
      }
    }
    std::printf("  %s GET, %d ops per client per rep:\n", SizeName(size).c_str(), ops);
    for (const Variant& v : variants) {
      std::printf("    %-38s %7.2f GB/s  P99 %9.1f us  %5.2fx memcached GB/s, P99 %5.2fx\n",
                  v.name.c_str(), Median(v.gbps), Median(v.p99), Median(v.ratio),
                  Median(v.p99_ratio));
    }
    const Variant& tcp = variants[3];
    const Variant& shm = variants[10];
    MC_ASSERT(shm.name == "router shm (same host)", "variant order");
    // Per rep, on landing over after (same rep, back to back).
    for (size_t k : {11, 13}) {
      std::vector<double> gain;
      for (int rep = 0; rep < g_reps; ++rep) {
        gain.push_back(variants[k + 1].gbps[rep] / variants[k].gbps[rep]);
      }
      std::printf("    %-38s %5.2fx (median of per-rep ratios)\n",
                  k == 11 ? "tcp: checksum on landing / after" : "shm: checksum on landing / after",
                  Median(gain));
    }
    std::printf(
        "    target: router tcp / memcached GB/s  %5.2fx (>= 1.25) %s; P99 %5.2fx (<= 1.00) %s\n",
        Median(tcp.ratio), Median(tcp.ratio) >= 1.25 ? "MET" : "NOT MET", Median(tcp.p99_ratio),
        Median(tcp.p99_ratio) <= 1.0 ? "MET" : "NOT MET");
    std::printf("    target: router shm / memcached GB/s  %5.2fx (>= 3.00) %s\n", Median(shm.ratio),
                Median(shm.ratio) >= 3.0 ? "MET" : "NOT MET");
  }
}

// TcpTransport with an auth token against one without, interleaved: READ
// bandwidth (2 lanes) and 64 KiB latency, and what the handshake adds to
// opening a segment on a fresh transport (control connection and 2 lanes).
void AuthOnOff(const OwnerInfo& info) {
  std::printf("\n[TCP auth on / off, interleaved, median of %d ratios; 2 lanes, READ]\n", g_reps);
  auto on = MakeTcp(2, 512 << 10, /*spread_min_bytes=*/0, BenchCredentials());
  auto off = MakeTcp(2, 512 << 10, /*spread_min_bytes=*/0);
  const SegmentHandle hon = Open(*on, info.tcp_auth_endpoint, info.tcp_auth_segment);
  const SegmentHandle hoff = Open(*off, info.tcp_endpoint, info.tcp_segment);
  const OpCode rd = OpCode::kRead;
  for (uint64_t block : {64 * kKiB, kMiB, 16 * kMiB}) {
    const size_t batch = BatchFor(block);
    const Paired p = RunPaired([&] { return TransportGBps(*on, hon, rd, block, batch, 1, 1); },
                               [&] { return TransportGBps(*off, hoff, rd, block, batch, 1, 1); });
    std::printf("  READ %-6s batch %-3zu  on %8.2f GB/s  off %8.2f GB/s  ratio %5.3fx\n",
                SizeName(block).c_str(), batch, p.candidate, p.baseline, p.ratio);
  }
  const Paired lat =
      RunPaired([&] { return TransportLatencyUs(*on, hon, rd, 64 * kKiB, 2000).first; },
                [&] { return TransportLatencyUs(*off, hoff, rd, 64 * kKiB, 2000).first; });
  std::printf("  READ 64KiB P50         on %8.1f us    off %8.1f us    ratio %5.3fx\n",
              lat.candidate, lat.baseline, lat.ratio);
  const auto open_us = [&](bool with_auth) {
    auto t = MakeTcp(2, 512 << 10, 0, with_auth ? BenchCredentials() : nullptr);
    const int64_t t0 = NowNs();
    (void)Open(*t, with_auth ? info.tcp_auth_endpoint : info.tcp_endpoint,
               with_auth ? info.tcp_auth_segment : info.tcp_segment);
    return double(NowNs() - t0) / 1e3;
  };
  std::vector<double> con, coff;
  for (int i = 0; i < 20 * g_reps; ++i) {
    con.push_back(open_us(true));
    coff.push_back(open_us(false));
  }
  std::printf("  OpenSegment, fresh transport (3 connections)  on %8.1f us  off %8.1f us\n",
              Median(con), Median(coff));
}

int Main(int argc, char** argv) {
  bool store_path_only = false, auth_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      g_reps = 3;
      g_volume = 64 * kMiB;
    }
    if (std::string(argv[i]) == "--store_path") store_path_only = true;
    if (std::string(argv[i]) == "--auth") auth_only = true;
    if (std::string(argv[i]) == "--thread_receives") g_caller_receives = false;
  }
  ::signal(SIGPIPE, SIG_IGN);
  OwnerInfo info;
  int keepalive = -1;
  const pid_t owner = StartOwner(&info, &keepalive);
  std::printf(
      "transfer_bench: %u CPUs, owner pid %d, %d reps (median), %lu MiB per run, TCP receives on "
      "the %s\n",
      std::thread::hardware_concurrency(), owner, g_reps,
      static_cast<unsigned long>(g_volume / kMiB),
      g_caller_receives ? "waiting thread (SubmitForWait)" : "lane's receiver thread (Submit)");
  if (store_path_only || auth_only) {
    if (store_path_only) StoreGetPath(info, 8);
    if (auth_only) AuthOnOff(info);
    ::close(keepalive);
    ::waitpid(owner, nullptr, 0);
    return 0;
  }

  std::vector<char> local_mem(kSegmentBytes, 'o');
  LocalTransport local;
  const SegmentHandle lh = Open(local, local.LocalEndpoint(),
                                local.RegisterMemory(local_mem.data(), kSegmentBytes, {})->id);
  ShmTransport shm;
  const SegmentHandle sh = Open(shm, info.shm_endpoint, info.shm_segment);
  auto tcp1 = MakeTcp(1, 512 << 10, /*spread_min_bytes=*/0);
  auto tcp2 = MakeTcp(2, 512 << 10, /*spread_min_bytes=*/0);
  const SegmentHandle th1 = Open(*tcp1, info.tcp_endpoint, info.tcp_segment);
  const SegmentHandle th2 = Open(*tcp2, info.tcp_endpoint, info.tcp_segment);

  std::printf("\n[baselines]\n");
  const auto [rr_p50, rr_p99] = PlainRequestResponseUs(info.plain_port, 64 * kKiB, 5000);
  std::printf("  plain TCP 64KiB request/response     P50 %9.1f us  P99 %9.1f us\n", rr_p50,
              rr_p99);
  const double s_block = PlainStreamGBps(info.plain_port, kMiB, 1, RecvModel::kBlocking);
  const double s_epoll = PlainStreamGBps(info.plain_port, kMiB, 1, RecvModel::kEpoll);
  const double s_uring = PlainStreamGBps(info.plain_port, kMiB, 1, RecvModel::kIoUring);
  const double s_two = PlainStreamGBps(info.plain_port, kMiB, 2, RecvModel::kBlocking);
  std::printf("  plain TCP stream 1MiB blocks, recv()          %8.2f GB/s\n", s_block);
  std::printf("  plain TCP stream 1MiB blocks, epoll+recv      %8.2f GB/s\n", s_epoll);
  std::printf("  plain TCP stream 1MiB blocks, io_uring recv   %8.2f GB/s\n", s_uring);
  std::printf("  plain TCP stream 1MiB blocks, 2 pairs, recv() %8.2f GB/s\n", s_two);

  double shm_min_ratio = 1e9, tcp1_min_ratio = 1e9, lanes_min_ratio = 1e9, p99_ratio = 0;
  for (uint64_t block : {4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB}) {
    const double mc = MemcpyGBps(local_mem.data(), block, BatchFor(block));
    const double stream =
        block == kMiB ? s_block : PlainStreamGBps(info.plain_port, block, 1, RecvModel::kBlocking);
    std::printf("\n[%s blocks, batch %zu]  memcpy %.2f GB/s, plain TCP stream %.2f GB/s\n",
                SizeName(block).c_str(), BatchFor(block), mc, stream);
    for (OpCode op : {OpCode::kRead, OpCode::kWrite}) {
      const char* opn = op == OpCode::kRead ? "READ" : "WRITE";
      PrintRow(Measure(std::string("local ") + opn, local, lh, op, block), mc, "memcpy");
      const Row s = Measure(std::string("shm ") + opn + " (2 procs)", shm, sh, op, block);
      PrintRow(s, mc, "memcpy");
      const Row t1 =
          Measure(std::string("tcp ") + opn + " 1 lane (2 procs)", *tcp1, th1, op, block);
      PrintRow(t1, stream, "plain stream");
      const Row t2 =
          Measure(std::string("tcp ") + opn + " 2 lanes (2 procs)", *tcp2, th2, op, block);
      PrintRow(t2, stream, "plain stream");
      std::printf("  %-34s %5.2fx\n", "tcp 2 lanes / 1 lane", t2.gbps / t1.gbps);
      if (op == OpCode::kRead && block >= kMiB) {
        shm_min_ratio = std::min(shm_min_ratio, s.gbps / mc);
        tcp1_min_ratio = std::min(tcp1_min_ratio, t1.gbps / stream);
        lanes_min_ratio = std::min(lanes_min_ratio, t2.gbps / t1.gbps);
      }
      if (op == OpCode::kRead && block == 64 * kKiB) p99_ratio = t1.p99_us / rr_p99;
    }
  }

  std::printf("\n[tcp 2 lanes, READ: batch size and concurrency]\n");
  for (size_t batch : {1, 8, 32}) {
    PrintRow(Measure("64KiB batch " + std::to_string(batch), *tcp2, th2, OpCode::kRead, 64 * kKiB,
                     1, batch),
             s_block, "plain stream");
  }
  for (int threads : {1, 2, 4}) {
    PrintRow(Measure("1MiB batch 8, threads " + std::to_string(threads), *tcp2, th2, OpCode::kRead,
                     kMiB, threads),
             s_block, "plain stream");
  }
  auto tcp4 = MakeTcp(4, 512 << 10, /*spread_min_bytes=*/0);
  const SegmentHandle th4 = Open(*tcp4, info.tcp_endpoint, info.tcp_segment);
  PrintRow(Measure("1MiB batch 8, 4 lanes", *tcp4, th4, OpCode::kRead, kMiB), s_block,
           "plain stream");

  PairedTargets(info, local_mem.data(), shm, sh, *tcp1, th1, *tcp2, th2);
  StoreGetPath(info, 8);
  std::printf("\n[targets, from the tables above (not interleaved)]\n");
  std::printf("  SHM READ >=1MiB / memcpy            min %.2fx  (target >= 0.80) %s\n",
              shm_min_ratio, shm_min_ratio >= 0.8 ? "MET" : "NOT MET");
  std::printf("  TCP READ >=1MiB 1 lane / plain      min %.2fx  (target >= 0.90) %s\n",
              tcp1_min_ratio, tcp1_min_ratio >= 0.9 ? "MET" : "NOT MET");
  std::printf("  TCP READ >=1MiB 2 lanes / 1 lane    min %.2fx  (target >= 1.40) %s\n",
              lanes_min_ratio, lanes_min_ratio >= 1.4 ? "MET" : "NOT MET");
  std::printf("  TCP 64KiB READ P99 / plain P99          %.2fx  (target <= 1.50) %s\n", p99_ratio,
              p99_ratio <= 1.5 ? "MET" : "NOT MET");
  ::close(keepalive);
  int status = 0;
  ::waitpid(owner, &status, 0);
  return 0;
}

}  // namespace
}  // namespace mooncake::transport

int main(int argc, char** argv) { return mooncake::transport::Main(argc, argv); }
