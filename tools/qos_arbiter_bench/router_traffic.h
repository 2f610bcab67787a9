// The benchmark's roles over the transfer engine (--engine=router) instead of
// plain sockets:
//
//   owner     a TcpTransport on the server's namespace holding one 4 MiB
//             segment (id 1) that the clients READ.
//   bulk      a Router over a TcpTransport submitting single-request READ
//             batches of `chunk_bytes` (class 1) with up to
//             `inflight_max_bytes` submitted and not yet collected.
//   critical  a Router over a TcpTransport doing one `read_bytes` READ at a
//             time in class 0.
//
// With an arbiter each client's Router takes grants for its TCP route
// (RouterOptions::arbiters): the router, not the benchmark, acquires per
// slice and releases when the slice's sub-batch settles.
//
// Thread-safety: each role runs on the main thread; the routers run their own.
#ifndef MOONCAKE_TOOLS_QOS_ARBITER_BENCH_ROUTER_TRAFFIC_H_
#define MOONCAKE_TOOLS_QOS_ARBITER_BENCH_ROUTER_TRAFFIC_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/qos/shm_arbiter.h"
#include "mooncake/transport/router.h"
#include "mooncake/transport/tcp_transport.h"
#include "tools/qos_arbiter_bench/traffic.h"

namespace mooncake::qos_bench {

inline constexpr transport::SegmentId kOwnerSegment = 1;  // the owner's only segment

inline absl::Status RunRouterOwner(const std::string& advertise_ip, uint16_t port) {
  transport::TcpTransport::Options o;
  o.bind_host = "0.0.0.0";
  o.port = port;
  o.advertise_hosts = {advertise_ip};
  absl::StatusOr<std::unique_ptr<transport::TcpTransport>> t = transport::TcpTransport::Create(o);
  if (!t.ok()) return t.status();
  std::vector<char> mem(kMaxReadBytes, 'k');
  absl::StatusOr<transport::SegmentDesc> seg =
      (*t)->RegisterMemory(mem.data(), mem.size(), transport::MemoryLocation::HostDram());
  if (!seg.ok()) return seg.status();
  if (seg->id != kOwnerSegment) {
    return absl::InternalError(absl::StrCat("owner segment id ", seg->id, ", expected 1"));
  }
  std::printf("listening=1\n");
  std::fflush(stdout);
  for (;;) ::pause();  // the runner terminates us
}

// A client's router: TCP only, `slice_bytes` slices, the arbiter on the TCP
// route when the options name one; and the owner's segment opened.
struct RouterClient {
  std::shared_ptr<qos::ShmArbiter> arbiter;
  std::unique_ptr<transport::Router> router;
  transport::SegmentHandle handle = 0;
};

inline absl::StatusOr<RouterClient> OpenRouterClient(const ClientOptions& o, uint64_t slice_bytes,
                                                     size_t cls) {
  RouterClient c;
  absl::StatusOr<std::unique_ptr<qos::ShmArbiter>> arb = OpenArbiter(o);
  if (!arb.ok()) return arb.status();
  c.arbiter = std::move(*arb);
  absl::StatusOr<std::unique_ptr<transport::TcpTransport>> tcp =
      transport::TcpTransport::Create(transport::TcpTransport::Options{.bind_host = "0.0.0.0"});
  if (!tcp.ok()) return tcp.status();
  transport::RouterOptions ro;
  ro.slice_bytes = slice_bytes;
  ro.priority_classes = cls + 1;  // the critical client's router has class 0 only
  if (c.arbiter != nullptr) ro.arbiters.push_back({"tcp", c.arbiter});
  absl::StatusOr<std::unique_ptr<transport::Router>> r =
      transport::Router::Create(ro, std::move(*tcp));
  if (!r.ok()) return r.status();
  c.router = std::move(*r);
  // The owner as a router endpoint of one TCP transport (the host part only
  // matters for same-host routes, which this router has none of).
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string endpoint = transport_internal::FormatRouterEndpoint(
      {host, 1, {absl::StrCat("tcp://", o.server_ip, ":", o.port)}});
  const transport::SegmentId id = transport_internal::PackRouterId({kOwnerSegment, 0, 0, 0});
  absl::StatusOr<transport::RemoteSegment> seg;
  for (int attempt = 0; attempt < 300; ++attempt) {  // the owner may still be starting
    seg = c.router->OpenSegment(endpoint, id);
    if (seg.ok()) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!seg.ok()) return seg.status();
  c.handle = seg->handle;
  return c;
}

inline absl::Status RunRouterBulk(const ClientOptions& o, const BulkOptions& b) {
  absl::StatusOr<RouterClient> c = OpenRouterClient(o, b.chunk_bytes, kBulkClass);
  if (!c.ok()) return c.status();
  const size_t depth = std::max<uint64_t>(1, b.inflight_max_bytes / b.chunk_bytes);
  std::vector<char> buf(depth * b.chunk_bytes);
  std::deque<std::pair<transport::BatchId, size_t>> pending;  // (batch, buffer slot)
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < depth; ++i) free_slots.push_back(i);
  uint64_t measured_bytes = 0;
  uint64_t offset = 0;
  const auto t0 = Clock::now();
  const double end_s = o.warmup_s + o.seconds;
  // Bulk keeps running a little past the window so the critical client's
  // window is loaded to its end.
  while (SecondsSince(t0) < end_s + 0.3) {
    while (!free_slots.empty()) {
      const size_t slot = free_slots.back();
      const transport::TransferRequest req{transport::OpCode::kRead,
                                           buf.data() + slot * b.chunk_bytes, c->handle, offset,
                                           b.chunk_bytes};
      offset = (offset + b.chunk_bytes) % (kMaxReadBytes - b.chunk_bytes + 1);
      absl::StatusOr<transport::BatchId> id = c->router->SubmitWithPriority({&req, 1}, kBulkClass);
      if (!id.ok()) return id.status();
      free_slots.pop_back();
      pending.emplace_back(*id, slot);
    }
    auto [id, slot] = pending.front();
    pending.pop_front();
    absl::StatusOr<transport::BatchResult> r = c->router->Wait(id, absl::Now() + absl::Seconds(10));
    if (!r.ok()) return r.status();
    if (!r->ok()) return r->FirstError();
    free_slots.push_back(slot);
    const double t = SecondsSince(t0);
    if (t >= o.warmup_s && t < end_s) measured_bytes += b.chunk_bytes;
  }
  for (auto [id, slot] : pending) {
    (void)c->router->Wait(id, absl::Now() + absl::Seconds(10));
  }
  std::printf("bulk_bytes_per_s=%.0f\n", static_cast<double>(measured_bytes) / o.seconds);
  return absl::OkStatus();
}

inline absl::Status RunRouterCritical(const ClientOptions& o, const CriticalOptions& c) {
  absl::StatusOr<RouterClient> client = OpenRouterClient(o, c.read_bytes, kCriticalClass);
  if (!client.ok()) return client.status();
  std::vector<char> buf(c.read_bytes);
  const transport::TransferRequest req{transport::OpCode::kRead, buf.data(), client->handle, 0,
                                       c.read_bytes};
  return RunCriticalLoop(o, c, [&]() -> absl::Status {
    absl::StatusOr<transport::BatchId> id =
        client->router->SubmitWithPriority({&req, 1}, kCriticalClass);
    if (!id.ok()) return id.status();
    absl::StatusOr<transport::BatchResult> r =
        client->router->Wait(*id, absl::Now() + absl::Seconds(5));
    if (!r.ok()) return r.status();
    return r->ok() ? absl::OkStatus() : r->FirstError();
  });
}

}  // namespace mooncake::qos_bench

#endif  // MOONCAKE_TOOLS_QOS_ARBITER_BENCH_ROUTER_TRAFFIC_H_
