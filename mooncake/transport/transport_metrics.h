// Per-transport metrics in a base MetricsRegistry.
//
// Families (label `transport` = the model's Name(), `op` = read | write):
//   mooncake_transport_bytes_total{transport, op}      bytes moved by OK requests
//   mooncake_transport_ops_total{transport, op}        requests that succeeded
//   mooncake_transport_errors_total{transport, op}     requests that failed
//   mooncake_transport_batch_latency_seconds{transport} submit -> done, per batch
// TcpTransport adds (tcp_transport.h; registered there, in the same registry):
//   mooncake_transport_auth_failures_total{transport}  handshakes its owner refused or timed out
//
// Thread-safety: every method may be called concurrently (the series are
// lock-free atomics; registration happens once in the constructor).
#ifndef MOONCAKE_TRANSPORT_TRANSPORT_METRICS_H_
#define MOONCAKE_TRANSPORT_TRANSPORT_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/histogram.h"
#include "mooncake/base/metrics.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport {

class TransportMetrics {
 public:
  // Registers the series in `registry`, or in a private registry when null.
  TransportMetrics(MetricsRegistry* registry, std::string_view transport_name) {
    if (registry == nullptr) {
      owned_ = std::make_unique<MetricsRegistry>();
      registry = owned_.get();
    }
    registry_ = registry;
    const std::string name(transport_name);
    for (int op = 0; op < 2; ++op) {
      const MetricLabels labels = {{"transport", name}, {"op", op == 0 ? "read" : "write"}};
      bytes_[op] = Must(registry->GetCounter("mooncake_transport_bytes_total",
                                             "Bytes moved by successful requests.", labels));
      ops_[op] = Must(
          registry->GetCounter("mooncake_transport_ops_total", "Requests that succeeded.", labels));
      errors_[op] = Must(
          registry->GetCounter("mooncake_transport_errors_total", "Requests that failed.", labels));
    }
    latency_ = Must(registry->GetHistogram("mooncake_transport_batch_latency_seconds",
                                           "Batch latency from Submit to completion.",
                                           {{"transport", name}}, 1e9));
  }

  void RecordRequest(OpCode op, uint64_t bytes, bool ok) {
    const int i = op == OpCode::kRead ? 0 : 1;
    if (ok) {
      bytes_[i]->Increment(bytes);
      ops_[i]->Increment();
    } else {
      errors_[i]->Increment();
    }
  }
  void RecordBatchLatencyNs(uint64_t ns) { latency_->Record(ns); }

  uint64_t Bytes(OpCode op) const { return bytes_[op == OpCode::kRead ? 0 : 1]->Value(); }
  uint64_t Ops(OpCode op) const { return ops_[op == OpCode::kRead ? 0 : 1]->Value(); }
  uint64_t Errors(OpCode op) const { return errors_[op == OpCode::kRead ? 0 : 1]->Value(); }
  const LatencyHistogram& BatchLatency() const { return *latency_; }
  MetricsRegistry& registry() { return *registry_; }

 private:
  template <typename T>
  static T* Must(absl::StatusOr<T*> s) {
    // Names are fixed literals and label sets are the same for every
    // transport, so failure means two families collide: a programmer error.
    MC_ASSERT(s.ok(), "transport metric registration failed (name clash in the registry)");
    return *s;
  }

  std::unique_ptr<MetricsRegistry> owned_;
  MetricsRegistry* registry_ = nullptr;
  Counter* bytes_[2] = {};
  Counter* ops_[2] = {};
  Counter* errors_[2] = {};
  LatencyHistogram* latency_ = nullptr;
};

// An owner's count of refused handshakes, one series per transport ("tcp",
// "shm", "rdma") in `registry`.
inline Counter* AuthFailuresCounter(MetricsRegistry& registry, std::string_view transport) {
  absl::StatusOr<Counter*> c = registry.GetCounter(
      "mooncake_transport_auth_failures_total",
      "Connections the owner refused in the authentication handshake (no, bad or wrong "
      "proof) or that did not finish it within io_timeout.",
      {{"transport", std::string(transport)}});
  MC_ASSERT(c.ok(), "auth failure metric registration failed (name clash in the registry)");
  return *c;
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_TRANSPORT_METRICS_H_
