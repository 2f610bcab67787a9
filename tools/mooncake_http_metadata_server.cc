// mooncake_http_metadata_server: the HTTP key/value store transfer engines
// use for their metadata instead of etcd (metadata URL
// http://HOST:PORT/metadata), under Mooncake's program name and flags
// (docs/metadata_server.md).
//
//   mooncake_http_metadata_server                        # 127.0.0.1:8080
//   mooncake_http_metadata_server --host=0.0.0.0 --port=8080
//
//   GET    /metadata?key=K   200 and the stored bytes; 404 when absent
//   PUT    /metadata?key=K   200: stored (replaces)
//   DELETE /metadata?key=K   200; 404 when absent
//
// Exit codes: 0 after a graceful shutdown (SIGINT, SIGTERM or SIGHUP), 1 when
// it cannot start (the port in use), 2 for bad flags, 128 + the signal when a
// second signal cuts a shutdown short.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"
#include "mooncake/store/node/metadata_server.h"
#include "mooncake/store/node/program.h"
#include "mooncake/store/node/status_line.h"
#include "mooncake/store/node/store_node_options.h"

ABSL_FLAG(int32_t, port, 8080, "port to serve on; 0 = any free port");
// Mooncake's binds 0.0.0.0; this one binds loopback unless told otherwise.
ABSL_FLAG(std::string, host, "127.0.0.1",
          "address to bind (numeric IPv4 or IPv6; 0.0.0.0 for all interfaces)");
ABSL_FLAG(std::string, max_value_bytes, "16M",
          "largest value a PUT may store (suffixes K, M, G); larger bodies get 413");
ABSL_FLAG(std::string, max_total_bytes, "256M",
          "all keys and values together at most this (suffixes K, M, G); a PUT past it gets 507");
ABSL_FLAG(std::string, auth_token_file, "",
          "a token file (docs/security.md): every request must carry \"Authorization: Bearer "
          "<secret>\" with a secret it lists, else 401. Empty: no authentication");
ABSL_FLAG(std::string, ready_file, "",
          "when serving, atomically write http=<host:port>, pid=<pid> here");

namespace mooncake {
namespace {

constexpr std::string_view kProgram = "mooncake_http_metadata_server";
constexpr std::string_view kBuiltins[] = {"help", "helpfull", "helpshort", "version"};

[[noreturn]] void BadFlags(std::string_view why) { node::ExitBadFlags(kProgram, why); }

node::MetadataServerOptions OptionsFromFlags() {
  node::MetadataServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  if (o.host.size() > 2 && o.host.front() == '[' && o.host.back() == ']') {
    o.host = o.host.substr(1, o.host.size() - 2);
  }
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, o.host.c_str(), &v4) != 1 &&
      ::inet_pton(AF_INET6, o.host.c_str(), &v6) != 1) {
    BadFlags(absl::StrCat("--host=", o.host, ": want a numeric IPv4 or IPv6 address"));
  }
  const int32_t port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) BadFlags(absl::StrCat("--port=", port, ": want [0, 65535]"));
  o.port = static_cast<uint16_t>(port);
  auto value = node::ParseByteSize("max_value_bytes", absl::GetFlag(FLAGS_max_value_bytes));
  if (!value.ok()) BadFlags(StdView(value.status().message()));
  auto total = node::ParseByteSize("max_total_bytes", absl::GetFlag(FLAGS_max_total_bytes));
  if (!total.ok()) BadFlags(StdView(total.status().message()));
  // One request holds its body in memory: bound it well below the machine.
  if (*value < 1 || *value > (uint64_t{1} << 30)) BadFlags("--max_value_bytes: want [1, 1G]");
  o.store.max_value_bytes = static_cast<size_t>(*value);
  o.store.max_total_bytes = *total;
  if (o.store.max_key_bytes + o.store.max_value_bytes > o.store.max_total_bytes) {
    BadFlags("--max_total_bytes must hold at least one largest value (--max_value_bytes + 4K)");
  }
  auto creds = auth::LoadCredentials(absl::GetFlag(FLAGS_auth_token_file));
  if (!creds.ok()) BadFlags(StdView(creds.status().message()));
  o.auth = *std::move(creds);
  return o;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "an HTTP key/value store for transfer-engine metadata (GET/PUT/DELETE "
      "/metadata?key=K). See docs/metadata_server.md.");
  absl::FlagsUsageConfig usage;
  usage.version_string = [] {
    return absl::StrCat("mooncake_http_metadata_server ", AbslView(node::kStoreVersion), "\n");
  };
  absl::SetFlagsUsageConfig(usage);
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "-h") argv[i] = const_cast<char*>("--help");
  }
  node::PrecheckFlags(kProgram, argc, argv, {}, kBuiltins);
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) BadFlags(absl::StrCat("unexpected argument \"", rest[1], "\""));
  const node::MetadataServerOptions options = OptionsFromFlags();

  node::StopSignals signals;  // before the server's thread starts
  auto started = node::MetadataServer::Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "%s: cannot start: %s\n", kProgram.data(),
                 started.status().ToString().c_str());
    return node::kExitCannotStart;
  }
  node::MetadataServer& server = **started;
  node::Say(absl::StrCat("mooncake_http_metadata_server ", AbslView(node::kStoreVersion),
                         ": http://", server.address(),
                         "/metadata   (GET/PUT/DELETE ?key=K; values up to ",
                         node::HumanBytes(options.store.max_value_bytes), ", ",
                         node::HumanBytes(options.store.max_total_bytes), " in all)"));
  const node::ReadyFile ready(absl::GetFlag(FLAGS_ready_file));
  if (const absl::Status s =
          ready.Write(absl::StrCat("http=", server.address(), "\npid=", ::getpid(), "\n"));
      !s.ok()) {
    std::fprintf(stderr, "%s: --ready_file: %s\n", kProgram.data(), s.ToString().c_str());
    return node::kExitCannotStart;
  }
  node::LogLine("serving; Ctrl-C to stop");
  int sig = 0;
  while ((sig = signals.Wait(absl::Seconds(60))) == 0) {
  }
  node::LogLine(absl::StrCat("received ", node::SignalName(sig), ": stopping"));
  node::RunShutdown(signals, ready, [&server] { server.Stop(); });
  const node::MetadataStoreStats stats = server.store().stats();
  node::LogLine(absl::StrCat("stopped (", stats.keys, " keys, ", stats.bytes, " bytes dropped)"));
  return 0;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) { return mooncake::Main(argc, argv); }
