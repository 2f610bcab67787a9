// MetadataClient: where transfer engines publish how to reach them, in
// Mooncake's layout, so a peer named by its local_server_name can be found.
//
// The metadata_server string, read as Mooncake's TransferEngine reads it:
//   "P2PHANDSHAKE"                 no server: a peer's name is its address
//                                  ("host:rpc_port"); Put/Get/Delete are not used.
//   "http://host:port/path"        Mooncake's HTTP metadata server
//                                  (GET/PUT/DELETE on <url>?key=K;
//                                  //tools:mooncake_http_metadata_server).
//   "etcd://host:port", "host:port"  etcd, through its v3 JSON gateway
//                                  (POST /v3/kv/put, /v3/kv/range,
//                                  /v3/kv/deleterange; keys and values in base64).
//   anything else ("redis://...", "https://...") is INVALID_ARGUMENT.
//
// Key layout (Mooncake's, once here for both sides):
//   mooncake/rpc_meta/<local_server_name>  ->  {"ip_or_host_name": "10.0.0.2", "rpc_port": 15123}
//
// Errors: what HttpCall returns (UNAVAILABLE, DEADLINE_EXCEEDED, ...), and
// UNAVAILABLE for a server answering an unexpected HTTP status; Get answers
// nullopt for an absent key.
//
// Thread-safety: const after Parse; calls may run concurrently.
#ifndef MOONCAKE_TRANSPORT_COMPAT_METADATA_CLIENT_H_
#define MOONCAKE_TRANSPORT_COMPAT_METADATA_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/transport/compat/http_client.h"
#include "nlohmann/json.hpp"

namespace mooncake::transport::compat {

inline constexpr std::string_view kP2PHandshake = "P2PHANDSHAKE";
inline constexpr std::string_view kRpcMetaPrefix = "mooncake/rpc_meta/";

inline std::string RpcMetaKey(std::string_view local_server_name) {
  return absl::StrCat(AbslView(kRpcMetaPrefix), AbslView(local_server_name));
}

struct RpcMeta {
  std::string ip_or_host_name;
  uint16_t rpc_port = 0;
};

inline std::string EncodeRpcMeta(const RpcMeta& m) {
  nlohmann::json j;
  j["ip_or_host_name"] = m.ip_or_host_name;
  j["rpc_port"] = m.rpc_port;
  return j.dump();
}

inline absl::StatusOr<RpcMeta> DecodeRpcMeta(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("ip_or_host_name") ||
      !j["ip_or_host_name"].is_string() || !j.contains("rpc_port") ||
      !j["rpc_port"].is_number_integer()) {
    return absl::DataLossError(
        "rpc_meta entry is not {\"ip_or_host_name\": str, \"rpc_port\": int}");
  }
  const int64_t port = j["rpc_port"].get<int64_t>();
  if (port <= 0 || port > 65535) return absl::DataLossError("rpc_meta entry: bad rpc_port");
  return RpcMeta{j["ip_or_host_name"].get<std::string>(), static_cast<uint16_t>(port)};
}

class MetadataClient {
 public:
  enum class Kind { kP2PHandshake, kHttp, kEtcd };

  // `auth`: for an HTTP metadata server, every call carries "Authorization:
  // Bearer <the secret of auth->self()>" (a server started with a token file
  // answers 401 without it). etcd has its own access control: not sent there.
  static absl::StatusOr<MetadataClient> Parse(
      std::string_view conn, std::shared_ptr<const auth::Credentials> auth = nullptr) {
    MetadataClient c;
    if (conn == kP2PHandshake) return c;
    if (conn.starts_with("http://")) {
      ASSIGN_OR_RETURN(c.url_, ParseHttpUrl(conn));
      c.kind_ = Kind::kHttp;
      if (auth != nullptr) c.http_.authorization = absl::StrCat("Bearer ", auth->self().secret);
      return c;
    }
    std::string_view hostport = conn;
    if (conn.starts_with("etcd://")) {
      hostport = conn.substr(7);
    } else if (conn.find("://") != std::string_view::npos || conn.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata server \"", AbslView(conn),
                       "\": this build speaks P2PHANDSHAKE, http://host:port/path and etcd "
                       "(etcd://host:port or host:port)"));
    }
    ASSIGN_OR_RETURN(c.url_, ParseHttpUrl(absl::StrCat("http://", AbslView(hostport))));
    c.url_.path = "/v3/kv/";
    c.kind_ = Kind::kEtcd;
    return c;
  }

  Kind kind() const { return kind_; }
  std::string Describe() const {
    if (kind_ == Kind::kP2PHandshake) return std::string(kP2PHandshake);
    return absl::StrCat(kind_ == Kind::kEtcd ? "etcd " : "http ",
                        JoinHostPort(url_.host, url_.port), kind_ == Kind::kHttp ? url_.path : "");
  }

  absl::Status Put(std::string_view key, std::string_view value) const {
    if (kind_ == Kind::kHttp) {
      ASSIGN_OR_RETURN(HttpResult r,
                       HttpCall("PUT", url_.host, url_.port, Target(key), value, http_));
      return Expect(r, "PUT", key);
    }
    nlohmann::json j;
    j["key"] = Base64(key);
    j["value"] = Base64(value);
    ASSIGN_OR_RETURN(HttpResult r, HttpCall("POST", url_.host, url_.port, "/v3/kv/put", j.dump()));
    return Expect(r, "put", key);
  }

  absl::StatusOr<std::optional<std::string>> Get(std::string_view key) const {
    if (kind_ == Kind::kHttp) {
      ASSIGN_OR_RETURN(HttpResult r, HttpCall("GET", url_.host, url_.port, Target(key), "", http_));
      if (r.status == 404) return std::optional<std::string>();
      RETURN_IF_ERROR(Expect(r, "GET", key));
      return std::optional<std::string>(std::move(r.body));
    }
    nlohmann::json j;
    j["key"] = Base64(key);
    ASSIGN_OR_RETURN(HttpResult r,
                     HttpCall("POST", url_.host, url_.port, "/v3/kv/range", j.dump()));
    RETURN_IF_ERROR(Expect(r, "range", key));
    const nlohmann::json answer = nlohmann::json::parse(r.body, nullptr, false);
    if (answer.is_discarded() || !answer.is_object()) {
      return absl::DataLossError("etcd range: the answer is not a JSON object");
    }
    if (!answer.contains("kvs") || !answer["kvs"].is_array() || answer["kvs"].empty()) {
      return std::optional<std::string>();
    }
    const nlohmann::json& kv = answer["kvs"][0];
    std::string value;
    // etcd leaves "value" out for an empty value.
    if (kv.contains("value") && kv["value"].is_string() &&
        !absl::Base64Unescape(kv["value"].get<std::string>(), &value)) {
      return absl::DataLossError("etcd range: value is not base64");
    }
    return std::optional<std::string>(std::move(value));
  }

  absl::Status Delete(std::string_view key) const {
    if (kind_ == Kind::kHttp) {
      ASSIGN_OR_RETURN(HttpResult r,
                       HttpCall("DELETE", url_.host, url_.port, Target(key), "", http_));
      return r.status == 404 ? absl::OkStatus() : Expect(r, "DELETE", key);
    }
    nlohmann::json j;
    j["key"] = Base64(key);
    ASSIGN_OR_RETURN(HttpResult r,
                     HttpCall("POST", url_.host, url_.port, "/v3/kv/deleterange", j.dump()));
    return Expect(r, "deleterange", key);
  }

 private:
  std::string Target(std::string_view key) const {
    return absl::StrCat(url_.path, url_.path.find('?') == std::string::npos ? "?" : "&",
                        "key=", UrlEncode(key));
  }
  static std::string Base64(std::string_view s) {
    std::string out;
    absl::Base64Escape(AbslView(s), &out);
    return out;
  }
  absl::Status Expect(const HttpResult& r, std::string_view op, std::string_view key) const {
    if (r.status >= 200 && r.status < 300) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("metadata ", Describe(), ": ", AbslView(op),
                                               " of \"", AbslView(key), "\" answered HTTP ",
                                               r.status, ": ", r.body.substr(0, 200)));
  }

  Kind kind_ = Kind::kP2PHandshake;
  HttpUrl url_;
  HttpClientOptions http_;  // the HTTP server's calls (authorization)
};

}  // namespace mooncake::transport::compat

#endif  // MOONCAKE_TRANSPORT_COMPAT_METADATA_CLIENT_H_
