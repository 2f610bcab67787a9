// mooncake_client: Mooncake's standalone "real client" daemon (docs/python.md,
// "Dummy clients"). It joins the master with a memory pool of
// --global_segment_size bytes mounted as a segment, and serves on --port the
// one RPC (DaemonInfo) that clients on this host call from
// MooncakeDistributedStore.setup_dummy to attach: they then put into this
// pool and read from the store through shared memory.
//
//   mooncake_client --master_server_address=127.0.0.1:50051
//       --global_segment_size=4GB --port=50052 --host=127.0.0.1
//
// Exit codes: 0 after SIGINT/SIGTERM, 1 when it cannot start (master down,
// port in use), 2 for bad flags (a flag of Mooncake's client this daemon does
// not implement is refused by name).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/store/compat/client_daemon.pb.h"
#include "mooncake/store/compat/client_state.h"
#include "mooncake/store/compat/distributed_store.h"
#include "mooncake/store/compat/store_config.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_server.h"

ABSL_FLAG(int32_t, port, 50052, "RPC port clients attach to with setup_dummy");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "this host's address: the daemon's RPC and its segment's TCP endpoint listen here");
ABSL_FLAG(std::string, global_segment_size, "1GB",
          "memory this daemon adds to the pool (16MB, 1 GB, 4GB or bytes)");
ABSL_FLAG(std::string, local_buffer_size, "16MB", "the daemon's own staging buffer");
ABSL_FLAG(std::string, master_server_address, "127.0.0.1:50051", "the master to join");
ABSL_FLAG(std::string, metadata_server, "P2PHANDSHAKE",
          "P2PHANDSHAKE, http://... or etcd://...: accepted; this store keeps segment metadata "
          "in the master");
ABSL_FLAG(std::string, auth_token_file, "",
          "access control (docs/security.md): the token file whose principal this daemon proves "
          "to the master and workers; its RPC port and segment then serve only peers proving a "
          "principal it lists (setup_dummy clients: MOONCAKE_AUTH_TOKEN_FILE). Empty: none "
          "(or MOONCAKE_AUTH_TOKEN_FILE)");
ABSL_FLAG(std::string, protocol, "tcp", "tcp (rdma is not built into this program)");

namespace {

// Mooncake's client flags this daemon does not implement: refused by name.
constexpr std::string_view kUnimplemented[] = {"device_names", "threads", "enable_offload",
                                               "transfer_timeout"};

int Fail(const std::string& why, int code) {
  std::fprintf(stderr, "mooncake_client: %s\n", why.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a(argv[i]);
    if (!a.starts_with("--")) continue;
    a.remove_prefix(2);
    a = a.substr(0, a.find('='));
    for (std::string_view u : kUnimplemented) {
      if (a == u) {
        return Fail(absl::StrCat("--", std::string(u),
                                 " is a flag of Mooncake's client that this daemon does not "
                                 "implement"),
                    2);
      }
    }
  }
  absl::SetProgramUsageMessage("mooncake_client --master_server_address=HOST:PORT [flags]");
  absl::ParseCommandLine(argc, argv);
  namespace compat = mooncake::compat;
  const int port = absl::GetFlag(FLAGS_port);
  if (port <= 0 || port > 65535) return Fail("--port: want 1..65535", 2);
  compat::StoreConfig config;
  config.local_hostname = absl::GetFlag(FLAGS_host);
  config.metadata_server = absl::GetFlag(FLAGS_metadata_server);
  config.protocol = absl::GetFlag(FLAGS_protocol);
  config.master_server_addr = absl::GetFlag(FLAGS_master_server_address);
  auto segment =
      compat::ParseSizeText("--global_segment_size", absl::GetFlag(FLAGS_global_segment_size));
  auto buffer =
      compat::ParseSizeText("--local_buffer_size", absl::GetFlag(FLAGS_local_buffer_size));
  if (!segment.ok()) return Fail(std::string(segment.status().message()), 2);
  if (!buffer.ok()) return Fail(std::string(buffer.status().message()), 2);
  if (*segment == 0) return Fail("--global_segment_size must be positive", 2);
  config.global_segment_size = *segment;
  config.local_buffer_size = *buffer;
  // The compat layer reads the token file's path from the environment.
  if (const std::string tokens = absl::GetFlag(FLAGS_auth_token_file); !tokens.empty()) {
    ::setenv("MOONCAKE_AUTH_TOKEN_FILE", tokens.c_str(), 1);
  }
  auto auth = compat::AuthFromEnvironment();
  if (!auth.ok()) return Fail(std::string(auth.status().message()), 2);

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  compat::DistributedStore store;
  if (int rc = store.Setup(config); rc != 0) {
    return Fail(absl::StrCat("cannot join the master (code ", rc, "): ", store.last_error()), 1);
  }
  mooncake::rpc::ServiceRegistry registry;
  const std::string master = config.master_server_addr;
  const std::string segment_name = store.GetHostname();
  const uint64_t segment_bytes = config.global_segment_size;
  char host_buf[256] = {};
  ::gethostname(host_buf, sizeof(host_buf) - 1);
  const std::string host_id = host_buf;
  absl::Status reg = registry.Register<compat::ClientDaemonInfoMethod>(
      [&](const compat::proto::DaemonInfoRequest&)
          -> absl::StatusOr<compat::proto::DaemonInfoResponse> {
        compat::proto::DaemonInfoResponse r;
        r.set_master_address(master);
        r.set_segment_name(segment_name);
        r.set_segment_bytes(segment_bytes);
        r.set_host_id(host_id);
        return r;
      });
  if (!reg.ok()) return Fail(std::string(reg.message()), 1);
  mooncake::rpc::RpcServerOptions so;
  so.host = absl::GetFlag(FLAGS_host) == "localhost" ? "127.0.0.1" : absl::GetFlag(FLAGS_host);
  so.port = static_cast<uint16_t>(port);
  so.auth = *auth;
  mooncake::rpc::RpcServer server(&registry, so);
  if (absl::Status st = server.Start(); !st.ok()) {
    return Fail(absl::StrCat("--port=", port, ": ", st.message()), 1);
  }
  std::printf("mooncake_client: serving on %s; segment %s (%llu bytes) joined master %s\n",
              server.address().c_str(), segment_name.c_str(),
              static_cast<unsigned long long>(segment_bytes), master.c_str());
  std::fflush(stdout);
  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }
  std::printf("mooncake_client: received signal %d: leaving the pool\n", sig);
  server.Stop();
  store.Close();
  std::printf("mooncake_client: stopped\n");
  return 0;
}
