// What elastic_bench's scenarios share: object bytes derived from an id (so
// every read is checked), a TCP-only client, percentiles, and the JSON
// members of a result.
//
// Thread-safety: pure functions; a Connection's client may be used by many
// threads (Client is thread-safe).
#ifndef MOONCAKE_TOOLS_ELASTIC_BENCH_COMMON_H_
#define MOONCAKE_TOOLS_ELASTIC_BENCH_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::elastic_bench {

using Client = client::Client<rpc::TcpChannel>;
inline constexpr int kWorkers = 4;

// The bytes of object `id`: a splitmix64 stream, so any read can be checked.
inline void FillValue(uint64_t id, char* out, size_t n) {
  uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;
  for (size_t at = 0; at < n; at += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out + at, &z, std::min<size_t>(8, n - at));
  }
}

inline bool CheckValue(uint64_t id, const char* got, size_t n, std::string& scratch) {
  scratch.resize(n);
  FillValue(id, scratch.data(), n);
  return std::memcmp(scratch.data(), got, n) == 0;
}

struct Connection {
  std::unique_ptr<rpc::TcpChannel> channel;
  std::unique_ptr<Client> client;
  ~Connection() { client.reset(); }  // before its channel
};

// `report_ms`: ClientOptions::cached_read_report_ms (negative: its default).
inline absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& master, bool cache,
                                                           int64_t report_ms = -1) {
  client::ClientOptions co;
  co.use_local = false;
  co.use_shm = false;
  co.use_tcp = true;
  co.cache_enabled = cache;
  if (report_ms >= 0) co.cached_read_report_ms = report_ms;
  auto c = std::make_unique<Connection>();
  ASSIGN_OR_RETURN(c->channel, rpc::TcpChannel::Connect(master));
  ASSIGN_OR_RETURN(c->client, Client::Create(co, c->channel.get()));
  return c;
}

inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

inline double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

inline double Ratio(double a, double b) { return b > 0 ? a / b : NAN; }

inline const char* Met(bool ok) { return ok ? "MET" : "NOT MET"; }

struct Env {
  std::string store_binary;
  std::string dir;
  int reps = 1;
};

// JSON members of one scenario, "key":value, in order.
struct JsonFields {
  std::vector<std::string> items;
  void Num(std::string_view k, double v) {
    char text[32] = "null";  // JSON has no NaN or infinity
    if (std::isfinite(v)) std::snprintf(text, sizeof(text), "%.10g", v);
    items.push_back(absl::StrCat("\"", AbslView(k), "\":", text));
  }
  void Str(std::string_view k, std::string_view v) {
    items.push_back(absl::StrCat("\"", AbslView(k), "\":\"", AbslView(v), "\""));
  }
  void Bool(std::string_view k, bool v) {
    items.push_back(absl::StrCat("\"", AbslView(k), "\":", v ? "true" : "false"));
  }
  std::string Object() const { return absl::StrCat("{", absl::StrJoin(items, ","), "}"); }
};

}  // namespace mooncake::elastic_bench

#endif  // MOONCAKE_TOOLS_ELASTIC_BENCH_COMMON_H_
