// MetadataServer: the HTTP metadata server transfer engines use instead of
// etcd (Mooncake's "http://host:port/metadata" metadata URL): a
// MetadataStore (metadata_store.h) served at one path,
//
//   GET    /metadata?key=K          200 and the stored bytes; 404 when absent
//   HEAD   /metadata?key=K          GET's status and length, no body
//   PUT    /metadata?key=K  <body>  200: stored (replacing what was there)
//   DELETE /metadata?key=K          200; 404 when absent
//
// The key is URL-decoded (%XX, '+' is a space). Errors: 400 (no key
// parameter, an empty key, a bad %-escape, a key over max_key_bytes), 411 (a
// PUT without Content-Length), 413 (a body over max_value_bytes), 501 (a
// chunked body), 507 (the store would pass max_total_bytes).
//
// With `auth` (a token file, base/auth.h), every request must carry
// "Authorization: Bearer <secret>" with the secret of any principal the file
// lists; else 401 and nothing read or changed.
//
//   ASSIGN_OR_RETURN(auto server, MetadataServer::Start({.port = 8080}));
//   ... server->address() ...
//   server->Stop();   // or the destructor
//
// Used by //tools:mooncake_http_metadata_server and by mooncake_master
// --enable_http_metadata_server.
//
// Thread-safety: Start, Stop and the destructor from one owning thread;
// address(), store() from any thread.
#ifndef MOONCAKE_STORE_NODE_METADATA_SERVER_H_
#define MOONCAKE_STORE_NODE_METADATA_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/store/node/http_request.h"
#include "mooncake/store/node/http_server.h"
#include "mooncake/store/node/metadata_store.h"

namespace mooncake::node {

inline constexpr std::string_view kMetadataPath = "/metadata";

struct MetadataServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port
  MetadataStoreOptions store;
  std::shared_ptr<const auth::Credentials> auth;  // null: no authentication
};

// One request against `store` (any method the server lets through).
inline HttpResponse ServeMetadata(MetadataStore& store, const HttpRequest& r) {
  auto answer = [](int status, std::string body) {
    return HttpResponse{.status = status, .body = std::move(body)};
  };
  absl::StatusOr<std::optional<std::string>> key = QueryParameter(r.query, "key");
  if (!key.ok()) return answer(400, absl::StrCat(key.status().message(), "\n"));
  if (!key->has_value()) return answer(400, "missing the key parameter: /metadata?key=...\n");
  auto error = [&](const absl::Status& s) {
    int status = 500;
    if (absl::IsNotFound(s)) status = 404;
    if (absl::IsInvalidArgument(s)) status = 400;
    if (absl::IsOutOfRange(s)) status = 413;
    if (absl::IsResourceExhausted(s)) status = 507;
    return answer(status, absl::StrCat(s.message(), "\n"));
  };
  if (r.method == "GET" || r.method == "HEAD") {
    absl::StatusOr<std::string> value = store.Get(**key);
    if (!value.ok()) return error(value.status());
    return HttpResponse{.body = std::move(*value), .content_type = "application/octet-stream"};
  }
  if (r.method == "PUT") {
    const absl::Status s = store.Put(std::move(**key), r.body);
    return s.ok() ? answer(200, "metadata updated\n") : error(s);
  }
  MC_ASSERT(r.method == "DELETE", "the server lets only GET, HEAD, PUT and DELETE through");
  const absl::Status s = store.Delete(**key);
  return s.ok() ? answer(200, "metadata deleted\n") : error(s);
}

class MetadataServer {
 public:
  // Binds and serves. Errors: those of HttpServer::Start (ALREADY_EXISTS for
  // a port in use), INVALID_ARGUMENT (store limits that do not fit).
  static absl::StatusOr<std::unique_ptr<MetadataServer>> Start(MetadataServerOptions options) {
    const MetadataStoreOptions& so = options.store;
    if (so.max_key_bytes == 0 || so.max_value_bytes == 0 ||
        so.max_key_bytes + so.max_value_bytes > so.max_total_bytes) {
      return absl::InvalidArgumentError(
          "metadata store: key and value limits > 0, and one largest entry within the total");
    }
    std::shared_ptr<const auth::Credentials> creds = options.auth;
    std::unique_ptr<MetadataServer> s(new MetadataServer(std::move(options)));
    MetadataStore* store = &s->store_;
    absl::Status handled = s->http_.Handle(
        std::string(kMetadataPath),
        [store, creds](const HttpRequest& r) {
          if (creds != nullptr &&
              !auth::BearerMatchesAny(auth::BearerToken(r.Header("authorization")), *creds)) {
            return HttpResponse{
                .status = 401,
                .body =
                    "the metadata server needs \"Authorization: Bearer <a secret of its "
                    "token file>\"\n"};
          }
          return ServeMetadata(*store, r);
        },
        HttpRoute{.writes = true, .max_body_bytes = so.max_value_bytes});
    if (!handled.ok()) return handled;
    if (absl::Status started = s->http_.Start(); !started.ok()) return started;
    return s;
  }

  MetadataServer(const MetadataServer&) = delete;
  MetadataServer& operator=(const MetadataServer&) = delete;
  ~MetadataServer() { Stop(); }

  // "host:port" (an IPv6 host in brackets).
  std::string address() const { return http_.address(); }
  uint16_t port() const { return http_.port(); }
  MetadataStore& store() { return store_; }
  // Stops serving (idempotent); the store keeps its contents.
  void Stop() { http_.Stop(); }

 private:
  explicit MetadataServer(MetadataServerOptions options)
      : store_(options.store),
        http_(HttpServerOptions{.host = options.host, .port = options.port}) {}

  MetadataStore store_;  // before http_: its handler uses the store until Stop
  HttpServer http_;
};

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_METADATA_SERVER_H_
