// store_client: a small client of a running store, for the binary's process
// tests (store_binary_process_test.sh).
//
//   store_client put <master> <prefix> <count> <bytes> <replicas> tcp|shm
//   store_client get <master> <prefix> <count> <bytes> tcp|shm
//
// put writes <prefix>/<i> for i < count with deterministic bytes; get reads
// them back and checks every byte. Exit 0 only if every operation succeeded;
// each failure is printed.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "mooncake/store/client.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake {
namespace {

std::string Value(const std::string& key, size_t bytes) {
  std::string v(bytes, '\0');
  uint64_t x = 1469598103934665603ull;
  for (char c : key) x = (x ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = static_cast<char>(x >> 56);
  }
  return v;
}

int Run(const std::string& mode, const std::string& master, const std::string& prefix, int count,
        size_t bytes, uint32_t replicas, const std::string& path) {
  auto channel = rpc::TcpChannel::Connect(master);
  if (!channel.ok()) {
    std::fprintf(stderr, "connect %s: %s\n", master.c_str(), channel.status().ToString().c_str());
    return 1;
  }
  client::ClientOptions o;
  o.use_local = false;
  o.use_shm = path == "shm";
  o.use_tcp = path == "tcp";
  auto c = client::Client<rpc::TcpChannel>::Create(o, channel->get());
  if (!c.ok()) return 1;
  int failed = 0;
  for (int i = 0; i < count; ++i) {
    const std::string key = absl::StrCat(prefix, "/", i);
    if (mode == "put") {
      const absl::Status s = (*c)->Put(key, Value(key, bytes), {.replica_count = replicas});
      if (!s.ok()) {
        std::fprintf(stderr, "put %s: %s\n", key.c_str(), s.ToString().c_str());
        ++failed;
      }
    } else {
      auto got = (*c)->Get(key, {.bypass_cache = true});
      if (!got.ok()) {
        std::fprintf(stderr, "get %s: %s\n", key.c_str(), got.status().ToString().c_str());
        ++failed;
      } else if (*got != Value(key, bytes)) {
        std::fprintf(stderr, "get %s: wrong bytes\n", key.c_str());
        ++failed;
      }
    }
  }
  std::printf("%s %s x%d over %s: %d failed\n", mode.c_str(), prefix.c_str(), count, path.c_str(),
              failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "put" && argc == 8) {
    return mooncake::Run(mode, argv[2], argv[3], std::atoi(argv[4]),
                         std::strtoull(argv[5], nullptr, 10),
                         static_cast<uint32_t>(std::atoi(argv[6])), argv[7]);
  }
  if (mode == "get" && argc == 7) {
    return mooncake::Run(mode, argv[2], argv[3], std::atoi(argv[4]),
                         std::strtoull(argv[5], nullptr, 10), 0, argv[6]);
  }
  std::fprintf(stderr, "usage: see store_client_testing.cc\n");
  return 64;
}
