// RunDemo: a short built-in workload against a running store, through a real
// Client over the master's RPC address: for each transport (TCP, and SHM when
// the worker is on this host) and each value size, `count` puts, `count` gets
// of the same keys (every byte checked) and their removal. It shows a new user
// that the store works and what it does on this machine; it is not the
// benchmark (tools/mooncake_bench is).
//
// Thread-safety: a function; it makes its own clients.
#ifndef MOONCAKE_STORE_NODE_DEMO_H_
#define MOONCAKE_STORE_NODE_DEMO_H_

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/histogram.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/client/client_metrics.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::node {

enum class DemoTransport { kTcp, kShm };

struct DemoOptions {
  std::string master_address;
  std::string host_id;  // the worker's host id ("" = gethostname())
  std::vector<uint64_t> value_bytes = {64 << 10, 1 << 20, 4 << 20};
  std::vector<DemoTransport> transports = {DemoTransport::kTcp, DemoTransport::kShm};
  uint64_t bytes_per_row = uint64_t{32} << 20;  // count = clamp(this / size, 4, 256)
  // Where the demo clients' counters go (client/client_metrics.h,
  // mooncake_client_* with client="demo-<path>"); null: nowhere.
  MetricsRegistry* metrics = nullptr;
};

struct DemoRow {
  DemoTransport transport = DemoTransport::kTcp;
  uint64_t value_bytes = 0;
  size_t count = 0;
  double put_gbps = 0;  // bytes / wall time of the puts (1e9 bytes/s)
  double get_gbps = 0;
  uint64_t put_p50_ns = 0, put_p99_ns = 0;
  uint64_t get_p50_ns = 0, get_p99_ns = 0;
};

inline std::string_view DemoTransportName(DemoTransport t) {
  return t == DemoTransport::kTcp ? "tcp" : "shm";
}

}  // namespace mooncake::node

namespace mooncake::node_internal {

inline std::string DemoValue(uint64_t size, size_t i) {
  std::string v(size, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull * (i + 1);
  for (size_t k = 0; k < size; k += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + k, &x, std::min<size_t>(8, size - k));
  }
  return v;
}

// The demo measures this node's own worker: one replica, whatever the
// master's default (a --replicas=2 node waits for other workers).
inline client::PutOptions OneReplica() {
  client::PutOptions o;
  o.replica_count = 1;
  return o;
}

inline absl::StatusOr<node::DemoRow> DemoOneRow(client::Client<rpc::TcpChannel>& c,
                                                node::DemoTransport t, uint64_t size,
                                                size_t count) {
  MC_ASSERT(size > 0 && count > 0, "an empty demo row");
  node::DemoRow row{.transport = t, .value_bytes = size, .count = count};
  std::vector<std::string> keys;
  for (size_t i = 0; i < count; ++i) {
    keys.push_back(absl::StrCat("mooncake-demo/", AbslView(node::DemoTransportName(t)), "/", size,
                                "/", i, "/", ::getpid()));
  }
  LatencyHistogram put_ns, get_ns;
  const std::string value = DemoValue(size, count);
  Clock& clock = MonotonicClock::Get();
  const int64_t put_start = clock.NowNs();
  for (size_t i = 0; i < count; ++i) {
    const int64_t t0 = clock.NowNs();
    if (absl::Status s = c.Put(keys[i], value, OneReplica()); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("demo put of ", size, " bytes over ",
                                       AbslView(node::DemoTransportName(t)), ": ", s.message()));
    }
    put_ns.Record(static_cast<uint64_t>(clock.NowNs() - t0));
  }
  const int64_t get_start = clock.NowNs();
  for (size_t i = 0; i < count; ++i) {
    const int64_t t0 = clock.NowNs();
    absl::StatusOr<std::string> got = c.Get(keys[i]);
    get_ns.Record(static_cast<uint64_t>(clock.NowNs() - t0));
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat("demo get over ", AbslView(node::DemoTransportName(t)), ": ",
                                       got.status().message()));
    }
    if (*got != value) return absl::DataLossError("demo get returned other bytes than put");
  }
  const int64_t end = clock.NowNs();
  for (const std::string& k : keys) c.Remove(k).IgnoreError();  // best effort: tidy up
  const double bytes = static_cast<double>(size) * static_cast<double>(count);
  row.put_gbps = bytes / static_cast<double>(std::max<int64_t>(1, get_start - put_start));
  row.get_gbps = bytes / static_cast<double>(std::max<int64_t>(1, end - get_start));
  row.put_p50_ns = put_ns.P50();
  row.put_p99_ns = put_ns.P99();
  row.get_p50_ns = get_ns.P50();
  row.get_p99_ns = get_ns.P99();
  return row;
}

inline absl::Status DemoWarmUp(client::Client<rpc::TcpChannel>& c, node::DemoTransport t) {
  const std::string key =
      absl::StrCat("mooncake-demo/warmup/", AbslView(node::DemoTransportName(t)), "/", ::getpid());
  const std::string value = DemoValue(4096, 0);
  absl::Status s = c.Put(key, value, OneReplica());
  if (s.ok()) s = c.Get(key).status();
  c.Remove(key).IgnoreError();
  if (s.ok()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat("demo warm-up over ", AbslView(node::DemoTransportName(t)), ": ", s.message()));
}

}  // namespace mooncake::node_internal

namespace mooncake::node {

// Errors: the first failing operation's Status, naming size and transport.
inline absl::StatusOr<std::vector<DemoRow>> RunDemo(const DemoOptions& o) {
  if (o.master_address.empty() || o.value_bytes.empty() || o.bytes_per_row == 0) {
    return absl::InvalidArgumentError("demo: needs a master address, sizes and bytes_per_row");
  }
  std::vector<DemoRow> rows;
  for (DemoTransport t : o.transports) {
    ASSIGN_OR_RETURN(auto channel, rpc::TcpChannel::Connect(o.master_address));
    client::ClientOptions co;
    co.host_id = o.host_id;
    co.use_local = false;  // as another process on this host would
    co.use_shm = t == DemoTransport::kShm;
    co.use_tcp = t == DemoTransport::kTcp;
    co.use_rdma = false;  // the demo names its transport
    co.client_id = absl::StrCat("demo-", AbslView(DemoTransportName(t)));
    ASSIGN_OR_RETURN(auto c, client::Client<rpc::TcpChannel>::Create(co, channel.get()));
    std::unique_ptr<client::ClientMetrics> metrics;
    if (o.metrics != nullptr) {
      ASSIGN_OR_RETURN(metrics, client::ClientMetrics::Create(o.metrics, c->client_id()));
    }
    // Untimed: the first transfer sets the transport up (connects lanes,
    // maps the segment), a cost a long-lived client pays once.
    RETURN_IF_ERROR(node_internal::DemoWarmUp(*c, t));
    for (uint64_t size : o.value_bytes) {
      const size_t count =
          static_cast<size_t>(std::clamp<uint64_t>(o.bytes_per_row / size, 4, 256));
      ASSIGN_OR_RETURN(DemoRow row, node_internal::DemoOneRow(*c, t, size, count));
      rows.push_back(row);
    }
    if (metrics != nullptr) metrics->Refresh(c->stats());
  }
  return rows;
}

// A table for people, one row per (transport, size).
inline std::string FormatDemo(const std::vector<DemoRow>& rows) {
  std::string out =
      absl::StrFormat("%-5s %8s %6s %10s %10s %10s %10s %10s %10s\n", "path", "value", "ops",
                      "put GB/s", "put p50us", "put p99us", "get GB/s", "get p50us", "get p99us");
  for (const DemoRow& r : rows) {
    const std::string size = r.value_bytes >= (1 << 20) ? absl::StrCat(r.value_bytes >> 20, "MiB")
                                                        : absl::StrCat(r.value_bytes >> 10, "KiB");
    absl::StrAppend(&out,
                    absl::StrFormat("%-5s %8s %6d %10.2f %10.0f %10.0f %10.2f %10.0f %10.0f\n",
                                    std::string(DemoTransportName(r.transport)), size, r.count,
                                    r.put_gbps, r.put_p50_ns / 1e3, r.put_p99_ns / 1e3, r.get_gbps,
                                    r.get_p50_ns / 1e3, r.get_p99_ns / 1e3));
  }
  return out;
}

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_DEMO_H_
