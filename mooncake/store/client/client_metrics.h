// ClientMetrics: a store client's statistics (ClientStats, client_options.h)
// as Prometheus counters in a MetricsRegistry the embedding process owns and
// serves (its own /metrics endpoint).
//
//   MetricsRegistry registry;
//   ASSIGN_OR_RETURN(auto metrics, ClientMetrics::Create(&registry, client->client_id()));
//   ...
//   metrics->Refresh(client->stats());  // before each render
//   std::string text = registry.RenderPrometheus();
//
// or, in a /metrics handler, both in one call:
//   std::string text = metrics->Render(client->stats());
//
// The client counts with its own atomics and knows nothing of the registry;
// Refresh moves each counter by what the client counted since the previous
// Refresh, so a scrape sees the totals as of its Refresh (the registry has no
// collect callback to do it at render time).
//
// Families (prefix mooncake_client_, every series labelled client=<client_id>):
//   master_rpcs_total                   ClientStats::master_rpcs
//   cache_lookups_total{result=hit}     ClientStats::cache_hits
//   cache_lookups_total{result=miss}    ClientStats::cache_misses
//   replica_fallbacks_total             ClientStats::replica_fallbacks
//   checksum_mismatches_total           ClientStats::checksum_mismatches
//   read_bytes_total                    ClientStats::bytes_read
//   written_bytes_total                 ClientStats::bytes_written
//   registered_buffer_bytes_total       ClientStats::registered_bytes_moved
//   ssd_load_waits_total                ClientStats::ssd_load_waits
//   ssd_put_waits_total                 ClientStats::ssd_put_waits
//   transport_failovers_total           ClientStats::transport_failovers
//   compressed_puts_total               ClientStats::compressed_puts
//   compression_saved_bytes_total       ClientStats::compression_saved_bytes
//   decompressed_gets_total             ClientStats::decompressed_gets
//   measured_link_bytes_per_second      ClientStats::measured_link_bytes_per_s (a gauge)
// docs/client.md ("Metrics") says what each counts.
//
// Two ClientMetrics with one client id (clients that share an id, or a client
// made again under its old id) share the series: each adds its own client's
// counts, so the series stays monotonic and reads the sum. The series stay in
// the registry after the client and this object are gone (a counter that
// vanished would read as a reset); a process that makes many short-lived
// clients gives them one client_id to keep the series bounded.
//
// Thread-safety: Refresh may be called from any thread, concurrently with
// itself and with the registry's rendering. Invariant: each counter has been
// moved by exactly last_'s field, summed over this object's Refreshes.
#ifndef MOONCAKE_STORE_CLIENT_CLIENT_METRICS_H_
#define MOONCAKE_STORE_CLIENT_CLIENT_METRICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/metrics.h"
#include "mooncake/store/client/client_options.h"

namespace mooncake::client {

class ClientMetrics {
 public:
  // Registers (or finds) this client's series in `registry`, which must
  // outlive the returned object. Errors: INVALID_ARGUMENT when `registry`
  // already has a mooncake_client_* family of another type or label set.
  // REQUIRES: registry != nullptr.
  static absl::StatusOr<std::unique_ptr<ClientMetrics>> Create(MetricsRegistry* registry,
                                                               std::string_view client_id) {
    MC_ASSERT(registry != nullptr, "ClientMetrics needs a registry");
    auto m = std::unique_ptr<ClientMetrics>(new ClientMetrics(registry, std::string(client_id)));
    for (size_t i = 0; i < kFamilies.size(); ++i) {
      const Family& f = kFamilies[i];
      MetricLabels labels = {{"client", m->client_id_}};
      if (!f.result.empty()) labels.emplace_back("result", std::string(f.result));
      absl::StatusOr<Counter*> c = registry->GetCounter(f.name, f.help, labels);
      if (!c.ok()) return c.status();
      m->counters_[i] = *c;
    }
    absl::StatusOr<Gauge*> g = registry->GetGauge(
        "mooncake_client_measured_link_bytes_per_second",
        "The client's recent transfer throughput (transfers of 256 KiB or more; 0: none yet), "
        "what network_compression=auto decides with when it was given no bandwidth.",
        {{"client", m->client_id_}});
    if (!g.ok()) return g.status();
    m->link_ = *g;
    return m;
  }

  ClientMetrics(const ClientMetrics&) = delete;
  ClientMetrics& operator=(const ClientMetrics&) = delete;

  // Moves every counter by `stats` minus the previous snapshot. A field below
  // the previous snapshot moves nothing (a counter never goes down).
  // REQUIRES: `stats` are this client's (Client::stats()).
  void Refresh(const ClientStats& stats) {
    const std::array<uint64_t, kFamilyCount> now = Fields(stats);
    std::lock_guard<std::mutex> lock(mu_);  // two Refreshes must not both add one delta
    for (size_t i = 0; i < kFamilyCount; ++i) {
      if (now[i] <= last_[i]) continue;
      counters_[i]->Increment(now[i] - last_[i]);
      last_[i] = now[i];
    }
    link_->Set(static_cast<double>(stats.measured_link_bytes_per_s));
  }

  // Refresh(stats), then the whole registry in Prometheus text: the body of
  // an embedding process's /metrics answer (other families it registered
  // included).
  std::string Render(const ClientStats& stats) {
    Refresh(stats);
    return registry_->RenderPrometheus();
  }

  const std::string& client_id() const { return client_id_; }

 private:
  struct Family {
    std::string_view name;
    std::string_view result;  // "": no result label
    std::string_view help;
  };
  // In the order of Fields().
  static constexpr std::array<Family, 14> kFamilies = {{
      {"mooncake_client_master_rpcs_total", "", "Calls the client made to the master."},
      {"mooncake_client_cache_lookups_total", "hit",
       "Object lookups by outcome: hit served from the metadata cache with no master RPC, miss "
       "asked the master."},
      {"mooncake_client_cache_lookups_total", "miss",
       "Object lookups by outcome: hit served from the metadata cache with no master RPC, miss "
       "asked the master."},
      {"mooncake_client_replica_fallbacks_total", "",
       "Reads that moved on to another replica after one failed."},
      {"mooncake_client_checksum_mismatches_total", "",
       "Replica reads whose bytes did not match the object's checksum."},
      {"mooncake_client_read_bytes_total", "", "Value bytes of objects read (successful gets)."},
      {"mooncake_client_written_bytes_total", "",
       "Value bytes of committed puts (once per object, not per replica)."},
      {"mooncake_client_registered_buffer_bytes_total", "",
       "Bytes moved from or into registered buffers with no staging copy."},
      {"mooncake_client_ssd_load_waits_total", "",
       "Rounds reads waited for the master to load objects back from SSD."},
      {"mooncake_client_ssd_put_waits_total", "",
       "Rounds puts waited for the master to offload older objects to SSD."},
      {"mooncake_client_transport_failovers_total", "",
       "Transfer slices that failed on one transport (e.g. RDMA) and were retried on the next."},
      {"mooncake_client_compressed_puts_total", "",
       "Committed puts stored compressed (ClientOptions.network_compression)."},
      {"mooncake_client_compression_saved_bytes_total", "",
       "Raw bytes less stored bytes of the puts stored compressed."},
      {"mooncake_client_decompressed_gets_total", "",
       "Objects read that were stored compressed (decoded into the caller's buffer)."},
  }};
  static constexpr size_t kFamilyCount = kFamilies.size();

  static std::array<uint64_t, kFamilyCount> Fields(const ClientStats& s) {
    return {s.master_rpcs,
            s.cache_hits,
            s.cache_misses,
            s.replica_fallbacks,
            s.checksum_mismatches,
            s.bytes_read,
            s.bytes_written,
            s.registered_bytes_moved,
            s.ssd_load_waits,
            s.ssd_put_waits,
            s.transport_failovers,
            s.compressed_puts,
            s.compression_saved_bytes,
            s.decompressed_gets};
  }

  ClientMetrics(MetricsRegistry* registry, std::string client_id)
      : registry_(registry), client_id_(std::move(client_id)) {}

  MetricsRegistry* const registry_;
  const std::string client_id_;
  std::array<Counter*, kFamilyCount> counters_{};  // set once in Create
  Gauge* link_ = nullptr;                          // set once in Create
  // std::mutex, as in metrics.h: ThreadSanitizer cannot see Debian's absl::Mutex.
  std::mutex mu_;
  std::array<uint64_t, kFamilyCount> last_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_CLIENT_METRICS_H_
