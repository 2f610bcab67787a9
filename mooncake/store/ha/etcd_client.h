// EtcdClient: a blocking client for etcd's v3 JSON gateway (etcd 3.4's
// grpc-gateway: POST /v3/kv/range, /v3/kv/put, /v3/kv/deleterange, /v3/kv/txn,
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke). Keys and values
// travel in base64; etcd answers int64 fields as JSON strings (and leaves out
// fields holding their default: 0, false, empty), both of which are read here.
//
//   ASSIGN_OR_RETURN(EtcdClient etcd, EtcdClient::Create("127.0.0.1:2379"));
//   ASSIGN_OR_RETURN(int64_t rev, etcd.Put("/a", "1"));
//   ASSIGN_OR_RETURN(EtcdRange r, etcd.Range("/a", EtcdClient::PrefixEnd("/a")));
//
// Endpoints: "http://h:p", "h:p" (or "etcd://h:p"), or a comma-separated list
// of them, all members of one cluster. A call tries them in order and moves on
// to the next only when one fails with UNAVAILABLE or DEADLINE_EXCEEDED, so a
// call takes at most endpoint_count() x options.timeout. A write that timed out
// may still have been applied; retrying it on the next member is safe for Put
// and DeleteRange (same end state) and for a Txn whose compares would fail on a
// second application (every Txn this package sends is of that kind).
//
// Connections: kept alive between calls (transport/compat/http_client.h's
// HttpConnectionPool, shared by a client's copies), so a call pays etcd's own
// latency (a raft round and an fsync for a write) without a TCP handshake and
// a new gateway connection; a connection etcd closed while idle is replaced
// once, when no byte of an answer came back on it. Fine for elections and
// oplog batches, not for per-object traffic.
//
// Errors (every message names the endpoint and the operation):
//   UNAVAILABLE         no endpoint could be reached (refused, reset, does not
//                       resolve), or etcd answered "unavailable" (no leader).
//   DEADLINE_EXCEEDED   the last endpoint tried did not answer in time.
//   DATA_LOSS           the answer is not the JSON expected (never a crash).
//   RESOURCE_EXHAUSTED  etcd refused the request as too large (default limit
//                       1.5 MiB per request), or the answer was over
//                       options.max_response_bytes.
//   NOT_FOUND           etcd's "not found" (a lease that does not exist:
//                       KeepAlive, Revoke, a Put with a dead lease).
//   FAILED_PRECONDITION any other error etcd returns (bad argument, a
//                       compacted revision, ...), with etcd's text.
//   INVALID_ARGUMENT    Create with a bad endpoint list.
//
// Thread-safety: an EtcdClient is an immutable value (copy it freely); calls
// may run concurrently from any number of threads.
#ifndef MOONCAKE_STORE_HA_ETCD_CLIENT_H_
#define MOONCAKE_STORE_HA_ETCD_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/compat/http_client.h"
#include "nlohmann/json.hpp"

namespace mooncake::ha {

struct EtcdKv {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct EtcdRange {
  std::vector<EtcdKv> kvs;
  int64_t revision = 0;  // the store's revision when the range was served
  bool more = false;     // more keys in the range than `limit`
  int64_t count = 0;     // keys in the range (ignoring limit)
};

// What a Txn compares. `number` is the create/mod revision or version for
// the numeric targets; `value` is used for kValue.
struct EtcdCompare {
  enum Target { kCreate, kMod, kVersion, kValue };
  enum Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = kCreate;
  Result result = kEqual;
  int64_t number = 0;
  std::string value;
};

struct EtcdOp {
  enum Kind { kPut, kRange, kDeleteRange };
  Kind kind = kRange;
  std::string key, value, range_end;
  int64_t lease = 0;       // kPut
  int64_t limit = 0;       // kRange; 0 = no limit
  bool keys_only = false;  // kRange: values left out
};

struct EtcdTxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's revision after the txn
  // One per kRange op of the branch that ran, in order.
  std::vector<EtcdRange> ranges;
};

// Extra knobs of a range read.
struct EtcdRangeOptions {
  int64_t limit = 0;       // 0 = no limit
  bool keys_only = false;  // values left out
  bool descend = false;    // keys in descending order (ascending otherwise)
  int64_t revision = 0;    // read as of this store revision; 0 = latest
};

struct EtcdClientOptions {
  // Per endpoint attempt.
  absl::Duration timeout = absl::Seconds(2);
  size_t max_response_bytes = size_t{64} << 20;
};

}  // namespace mooncake::ha

namespace mooncake::ha_internal {

inline std::string B64(std::string_view s) {
  std::string out;
  absl::Base64Escape(AbslView(s), &out);
  return out;
}

// An int64 field that etcd writes as a string (or, tolerated, a number);
// absent = 0. False when present but not an integer.
inline bool ReadInt64(const nlohmann::json& obj, const char* name, int64_t* out) {
  *out = 0;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  return absl::SimpleAtoi(it->get_ref<const std::string&>(), out);
}

// A base64 field; absent = "". False when present but not base64.
inline bool ReadB64(const nlohmann::json& obj, const char* name, std::string* out) {
  out->clear();
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  return absl::Base64Unescape(it->get_ref<const std::string&>(), out);
}

inline bool ReadBool(const nlohmann::json& obj, const char* name, bool* out) {
  *out = false;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_boolean()) return false;
  *out = it->get<bool>();
  return true;
}

inline int64_t HeaderRevision(const nlohmann::json& obj) {
  const auto it = obj.find("header");
  int64_t rev = 0;
  if (it != obj.end() && it->is_object() && ReadInt64(*it, "revision", &rev)) return rev;
  return 0;
}

// A RangeResponse object ({"header", "kvs", "more", "count"}).
inline absl::StatusOr<mooncake::ha::EtcdRange> ParseRange(const nlohmann::json& obj,
                                                          std::string_view where) {
  mooncake::ha::EtcdRange out;
  out.revision = HeaderRevision(obj);
  if (!ReadBool(obj, "more", &out.more) || !ReadInt64(obj, "count", &out.count)) {
    return absl::DataLossError(absl::StrCat(AbslView(where), ": bad \"more\" or \"count\""));
  }
  const auto kvs = obj.find("kvs");
  if (kvs == obj.end() || kvs->is_null()) return out;
  if (!kvs->is_array()) return absl::DataLossError(absl::StrCat(AbslView(where), ": bad kvs"));
  for (const nlohmann::json& kv : *kvs) {
    mooncake::ha::EtcdKv e;
    if (!kv.is_object() || !ReadB64(kv, "key", &e.key) || !ReadB64(kv, "value", &e.value) ||
        !ReadInt64(kv, "create_revision", &e.create_revision) ||
        !ReadInt64(kv, "mod_revision", &e.mod_revision) || !ReadInt64(kv, "version", &e.version) ||
        !ReadInt64(kv, "lease", &e.lease)) {
      return absl::DataLossError(absl::StrCat(AbslView(where), ": malformed kv entry"));
    }
    out.kvs.push_back(std::move(e));
  }
  return out;
}

inline nlohmann::json RangeRequest(std::string_view key, std::string_view range_end,
                                   const mooncake::ha::EtcdRangeOptions& o) {
  nlohmann::json j;
  j["key"] = B64(key);
  if (!range_end.empty()) j["range_end"] = B64(range_end);
  if (o.limit > 0) j["limit"] = std::to_string(o.limit);
  if (o.keys_only) j["keys_only"] = true;
  if (o.descend) {
    j["sort_order"] = "DESCEND";
    j["sort_target"] = "KEY";
  }
  if (o.revision > 0) j["revision"] = std::to_string(o.revision);
  return j;
}

inline nlohmann::json OpRequest(const mooncake::ha::EtcdOp& op) {
  using mooncake::ha::EtcdOp;
  nlohmann::json j;
  switch (op.kind) {
    case EtcdOp::kPut: {
      nlohmann::json& p = j["request_put"];
      p["key"] = B64(op.key);
      p["value"] = B64(op.value);
      if (op.lease != 0) p["lease"] = std::to_string(op.lease);
      break;
    }
    case EtcdOp::kRange:
      j["request_range"] =
          RangeRequest(op.key, op.range_end, {.limit = op.limit, .keys_only = op.keys_only});
      break;
    case EtcdOp::kDeleteRange: {
      nlohmann::json& d = j["request_delete_range"];
      d["key"] = B64(op.key);
      if (!op.range_end.empty()) d["range_end"] = B64(op.range_end);
      break;
    }
  }
  return j;
}

inline nlohmann::json CompareRequest(const mooncake::ha::EtcdCompare& c) {
  using mooncake::ha::EtcdCompare;
  static constexpr const char* kTargets[] = {"CREATE", "MOD", "VERSION", "VALUE"};
  static constexpr const char* kResults[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  MC_ASSERT(c.target >= EtcdCompare::kCreate && c.target <= EtcdCompare::kValue, "bad target");
  MC_ASSERT(c.result >= EtcdCompare::kEqual && c.result <= EtcdCompare::kLess, "bad result");
  nlohmann::json j;
  j["key"] = B64(c.key);
  j["target"] = kTargets[c.target];
  j["result"] = kResults[c.result];
  switch (c.target) {
    case EtcdCompare::kCreate:
      j["create_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::kMod:
      j["mod_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::kVersion:
      j["version"] = std::to_string(c.number);
      break;
    case EtcdCompare::kValue:
      j["value"] = B64(c.value);
      break;
  }
  return j;
}

// etcd's error answer ({"error": "...", "message": "...", "code": N}, or a
// streaming call's {"error": {"grpc_code": N, "message": "..."}}) as a Status;
// OK when `j` carries no error.
inline absl::Status EtcdError(const nlohmann::json& j, std::string_view where) {
  const auto err = j.find("error");
  if (err == j.end() || err->is_null()) return absl::OkStatus();
  std::string text;
  int64_t code = 0;
  const nlohmann::json& holder = err->is_object() ? *err : j;
  if (const auto m = holder.find("message"); m != holder.end() && m->is_string()) {
    text = m->get<std::string>();
  } else if (err->is_string()) {
    text = err->get<std::string>();
  }
  if (!ReadInt64(holder, "code", &code) || code == 0) {
    if (!ReadInt64(holder, "grpc_code", &code)) code = 0;
  }
  if (text.empty() && code == 0) return absl::OkStatus();  // an empty "error" field
  const std::string msg = absl::StrCat(AbslView(where), ": etcd answered: ", text);
  if (text.find("too large") != std::string::npos ||
      text.find("larger than max") != std::string::npos || code == 8) {
    return absl::ResourceExhaustedError(msg);
  }
  if (code == 5) return absl::NotFoundError(msg);
  if (code == 14) return absl::UnavailableError(msg);
  if (code == 4) return absl::DeadlineExceededError(msg);
  return absl::FailedPreconditionError(msg);
}

inline bool Retryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace mooncake::ha_internal

namespace mooncake::ha {

class EtcdClient {
 public:
  static absl::StatusOr<EtcdClient> Create(std::string_view endpoints,
                                           EtcdClientOptions options = {}) {
    if (options.timeout <= absl::ZeroDuration() || options.max_response_bytes == 0) {
      return absl::InvalidArgumentError("EtcdClientOptions: timeout and max_response_bytes > 0");
    }
    EtcdClient c;
    c.options_ = options;
    c.pool_ = std::make_shared<transport::compat::HttpConnectionPool>();
    for (absl::string_view part : absl::StrSplit(AbslView(endpoints), ',')) {
      part = absl::StripAsciiWhitespace(part);
      if (part.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("etcd endpoints \"", AbslView(endpoints), "\": an empty entry"));
      }
      std::string url(part);
      if (absl::ConsumePrefix(&part, "etcd://")) url = absl::StrCat("http://", part);
      if (url.find("://") == std::string::npos) url = absl::StrCat("http://", url);
      absl::StatusOr<transport::compat::HttpUrl> parsed = transport::compat::ParseHttpUrl(url);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("etcd endpoints \"", AbslView(endpoints),
                                                       "\": ", parsed.status().message()));
      }
      c.endpoints_.push_back(HostPort{parsed->host, parsed->port});
    }
    MC_ASSERT(!c.endpoints_.empty(), "StrSplit yields at least one part");
    return c;
  }

  // A copy whose calls use `timeout` per endpoint attempt (the election bounds
  // each renewal by the time left before it must step down).
  EtcdClient WithTimeout(absl::Duration timeout) const {
    MC_ASSERT(timeout > absl::ZeroDuration(), "a call needs time");
    EtcdClient c = *this;
    c.options_.timeout = timeout;
    return c;
  }

  size_t endpoint_count() const { return endpoints_.size(); }
  const EtcdClientOptions& options() const { return options_; }

  // Keys in [key, range_end) ("" = just `key`), ascending, at most `limit`
  // (0 = all).
  absl::StatusOr<EtcdRange> Range(std::string_view key, std::string_view range_end = {},
                                  int64_t limit = 0) const {
    return Range(key, range_end, EtcdRangeOptions{.limit = limit});
  }
  absl::StatusOr<EtcdRange> Range(std::string_view key, std::string_view range_end,
                                  const EtcdRangeOptions& o) const {
    ASSIGN_OR_RETURN(nlohmann::json j,
                     Call("/v3/kv/range", ha_internal::RangeRequest(key, range_end, o)));
    return ha_internal::ParseRange(j, "etcd range");
  }

  // The store's revision after the put.
  absl::StatusOr<int64_t> Put(std::string_view key, std::string_view value,
                              int64_t lease = 0) const {
    nlohmann::json req;
    req["key"] = ha_internal::B64(key);
    req["value"] = ha_internal::B64(value);
    if (lease != 0) req["lease"] = std::to_string(lease);
    ASSIGN_OR_RETURN(nlohmann::json j, Call("/v3/kv/put", req));
    return ha_internal::HeaderRevision(j);
  }

  // How many keys were deleted.
  absl::StatusOr<int64_t> DeleteRange(std::string_view key, std::string_view range_end = {}) const {
    nlohmann::json req;
    req["key"] = ha_internal::B64(key);
    if (!range_end.empty()) req["range_end"] = ha_internal::B64(range_end);
    ASSIGN_OR_RETURN(nlohmann::json j, Call("/v3/kv/deleterange", req));
    int64_t deleted = 0;
    if (!ha_internal::ReadInt64(j, "deleted", &deleted)) {
      return absl::DataLossError(absl::StrCat(Describe(), ": deleterange: bad \"deleted\""));
    }
    return deleted;
  }

  // If every compare holds, runs `success`, else `failure`, atomically.
  absl::StatusOr<EtcdTxnResult> Txn(const std::vector<EtcdCompare>& compares,
                                    const std::vector<EtcdOp>& success,
                                    const std::vector<EtcdOp>& failure = {}) const {
    nlohmann::json req = nlohmann::json::object();
    req["compare"] = nlohmann::json::array();
    req["success"] = nlohmann::json::array();
    req["failure"] = nlohmann::json::array();
    for (const EtcdCompare& c : compares) req["compare"].push_back(ha_internal::CompareRequest(c));
    for (const EtcdOp& op : success) req["success"].push_back(ha_internal::OpRequest(op));
    for (const EtcdOp& op : failure) req["failure"].push_back(ha_internal::OpRequest(op));
    ASSIGN_OR_RETURN(nlohmann::json j, Call("/v3/kv/txn", req));
    EtcdTxnResult out;
    out.revision = ha_internal::HeaderRevision(j);
    if (!ha_internal::ReadBool(j, "succeeded", &out.succeeded)) {
      return absl::DataLossError(absl::StrCat(Describe(), ": txn: bad \"succeeded\""));
    }
    const std::vector<EtcdOp>& ran = out.succeeded ? success : failure;
    const auto responses = j.find("responses");
    const size_t n = responses != j.end() && responses->is_array() ? responses->size() : 0;
    if (n != ran.size()) {
      return absl::DataLossError(
          absl::StrCat(Describe(), ": txn: ", n, " responses for ", ran.size(), " ops"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (ran[i].kind != EtcdOp::kRange) continue;
      const nlohmann::json& r = (*responses)[i];
      const auto rr = r.is_object() ? r.find("response_range") : r.end();
      if (!r.is_object() || rr == r.end() || !rr->is_object()) {
        return absl::DataLossError(
            absl::StrCat(Describe(), ": txn: response ", i, " is not a range response"));
      }
      ASSIGN_OR_RETURN(EtcdRange range, ha_internal::ParseRange(*rr, "etcd txn range"));
      out.ranges.push_back(std::move(range));
    }
    return out;
  }

  // A lease of `ttl_seconds` (etcd may grant more: its minimum TTL is 1.5 x
  // its election timeout); its id.
  absl::StatusOr<int64_t> Grant(int64_t ttl_seconds) const {
    MC_ASSERT(ttl_seconds > 0, "a lease needs a TTL");
    nlohmann::json req;
    req["TTL"] = std::to_string(ttl_seconds);
    ASSIGN_OR_RETURN(nlohmann::json j, Call("/v3/lease/grant", req));
    int64_t id = 0;
    if (!ha_internal::ReadInt64(j, "ID", &id) || id == 0) {
      return absl::DataLossError(absl::StrCat(Describe(), ": lease grant: no lease ID"));
    }
    return id;
  }

  // Renews `lease`; its remaining TTL in seconds. NOT_FOUND when the lease is
  // gone (expired or revoked).
  absl::StatusOr<int64_t> KeepAlive(int64_t lease) const {
    nlohmann::json req;
    req["ID"] = std::to_string(lease);
    ASSIGN_OR_RETURN(nlohmann::json j, Call("/v3/lease/keepalive", req));
    // A streaming call: {"result": {...}} per message.
    const auto result = j.find("result");
    if (result == j.end() || !result->is_object()) {
      return absl::DataLossError(absl::StrCat(Describe(), ": lease keepalive: no \"result\""));
    }
    int64_t ttl = 0;
    if (!ha_internal::ReadInt64(*result, "TTL", &ttl)) {
      return absl::DataLossError(absl::StrCat(Describe(), ": lease keepalive: bad TTL"));
    }
    if (ttl <= 0) {
      return absl::NotFoundError(
          absl::StrCat(Describe(), ": lease ", lease, " is gone (expired or revoked)"));
    }
    return ttl;
  }

  absl::Status Revoke(int64_t lease) const {
    nlohmann::json req;
    req["ID"] = std::to_string(lease);
    return Call("/v3/lease/revoke", req).status();
  }

  // Discards the key history older than `revision` (etcd keeps every
  // revision until compacted: a log that rewrites keys must compact, or etcd
  // grows to its quota). Current values are kept. FAILED_PRECONDITION when
  // `revision` is already compacted (nothing to do) or in the future.
  absl::Status Compact(int64_t revision) const {
    nlohmann::json req;
    req["revision"] = std::to_string(revision);
    return Call("/v3/kv/compaction", req).status();
  }

  // etcd's range_end covering every key that starts with `prefix`: the prefix
  // with its last byte below 0xff incremented (trailing 0xff bytes dropped);
  // "\0" (every key) when there is none.
  static std::string PrefixEnd(std::string_view prefix) {
    std::string end(prefix);
    while (!end.empty()) {
      auto& last = reinterpret_cast<unsigned char&>(end.back());
      if (last < 0xff) {
        ++last;
        return end;
      }
      end.pop_back();
    }
    return std::string(1, '\0');
  }

  std::string Describe() const {
    std::vector<std::string> names;
    for (const HostPort& hp : endpoints_) names.push_back(hp.ToString());
    return absl::StrCat("etcd ", absl::StrJoin(names, ","));
  }

 private:
  EtcdClient() = default;

  // POSTs `req` to each endpoint in turn until one answers (see the file
  // comment); the answer's JSON object.
  absl::StatusOr<nlohmann::json> Call(std::string_view path, const nlohmann::json& req) const {
    MC_ASSERT(!endpoints_.empty(), "Create makes at least one endpoint");
    const std::string body = req.dump();
    absl::Status last;
    for (const HostPort& hp : endpoints_) {
      absl::StatusOr<nlohmann::json> r = CallOne(hp, path, body);
      if (r.ok() || !ha_internal::Retryable(r.status())) return r;
      last = r.status();
    }
    if (endpoints_.size() == 1) return last;
    return absl::Status(last.code(),
                        absl::StrCat("every etcd endpoint failed; last: ", last.message()));
  }

  absl::StatusOr<nlohmann::json> CallOne(const HostPort& hp, std::string_view path,
                                         const std::string& body) const {
    const std::string where = absl::StrCat("etcd ", hp.ToString(), " ", AbslView(path));
    absl::StatusOr<transport::compat::HttpResult> r = pool_->Call(
        "POST", hp.host, hp.port, path, body,
        {.timeout = options_.timeout, .max_response_bytes = options_.max_response_bytes});
    if (!r.ok())
      return absl::Status(r.status().code(), absl::StrCat(where, ": ", r.status().message()));
    // A streaming answer is one JSON object per line; the first one is ours.
    std::string_view text = r->body;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      if (const size_t eol = text.find('\n'); eol != std::string_view::npos) {
        j = nlohmann::json::parse(text.substr(0, eol), nullptr, /*allow_exceptions=*/false);
      }
    }
    if (j.is_discarded() || !j.is_object()) {
      if (r->status >= 500 && r->status != 501) {
        return absl::UnavailableError(
            absl::StrCat(where, ": HTTP ", r->status, ": ", r->body.substr(0, 200)));
      }
      return absl::DataLossError(
          absl::StrCat(where, ": HTTP ", r->status,
                       ", the answer is not a JSON object: ", r->body.substr(0, 200)));
    }
    RETURN_IF_ERROR(ha_internal::EtcdError(j, where));
    if (r->status < 200 || r->status >= 300) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": HTTP ", r->status, ": ", r->body.substr(0, 200)));
    }
    return j;
  }

  std::vector<HostPort> endpoints_;
  EtcdClientOptions options_;
  // Kept-alive connections to the endpoints, shared by the client's copies:
  // a call over one costs no TCP connect (docs/ha.md has the oplog's figures).
  std::shared_ptr<transport::compat::HttpConnectionPool> pool_;
};

}  // namespace mooncake::ha

#endif  // MOONCAKE_STORE_HA_ETCD_CLIENT_H_
