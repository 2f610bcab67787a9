// The servers mooncake_bench compares, each started as its own process on
// 127.0.0.1 with a free port: memcached, redis-server and the mooncake store
// (tools/mooncake_store --role=all).
//
// Thread-safety: a Server is owned and stopped by one thread.
#ifndef MOONCAKE_TOOLS_BENCH_SERVERS_H_
#define MOONCAKE_TOOLS_BENCH_SERVERS_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/child_process.h"
#include "tools/bench/text_query.h"

namespace mooncake::bench {

struct Server {
  ChildProcess process;
  std::string address;       // host:port of the data (or, for the store, RPC) endpoint
  std::string http_address;  // store only: /metrics and /health
  int port = 0;
};

// Where tools/mooncake_store is for a program that starts it: `flag` if set
// (a --store_binary flag), else the one in this program's runfiles
// (RUNFILES_DIR, TEST_SRCDIR, <exe>.runfiles) or beside the program.
inline absl::StatusOr<std::string> FindStoreBinary(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  std::vector<std::filesystem::path> candidates;
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* d = std::getenv(env); d != nullptr) {
      candidates.push_back(std::filesystem::path(d) / "mooncake/tools/mooncake_store");
    }
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.string() + ".runfiles/mooncake/tools/mooncake_store");
    candidates.push_back(exe.parent_path() / "mooncake_store");
    candidates.push_back(exe.parent_path().parent_path() / "mooncake_store");
  }
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c.string();
  }
  return absl::NotFoundError(
      "no tools/mooncake_store in the runfiles or beside this program; pass --store_binary");
}

inline constexpr int kStartAttempts = 3;  // a free port can be taken before the server binds

struct MemcachedConfig {
  std::string binary = "memcached";
  uint64_t memory_mb = 1024;     // -m
  std::string item_max = "16m";  // -I
  int threads = 4;               // -t
};

inline absl::StatusOr<Server> StartMemcached(const MemcachedConfig& c, const std::string& log) {
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    // -U 0: no UDP. -c: enough connections for any client count we run.
    std::vector<std::string> argv = {c.binary,
                                     "-l",
                                     "127.0.0.1",
                                     "-p",
                                     std::to_string(port),
                                     "-U",
                                     "0",
                                     "-m",
                                     std::to_string(c.memory_mb),
                                     "-I",
                                     c.item_max,
                                     "-t",
                                     std::to_string(c.threads),
                                     "-c",
                                     "4096"};
    if (geteuid() == 0) {  // memcached refuses root without naming the user to run as
      argv.push_back("-u");
      argv.push_back("root");
    }
    ASSIGN_OR_RETURN(ChildProcess p, ChildProcess::Spawn(argv, log));
    last = WaitForPort(p, port, absl::Seconds(10));
    if (last.ok()) return Server{std::move(p), absl::StrCat("127.0.0.1:", port), "", port};
  }
  return last;
}

struct RedisConfig {
  std::string binary = "redis-server";
  uint64_t maxmemory_bytes = 0;  // 0: no limit
  std::string policy = "allkeys-lru";
};

inline absl::StatusOr<Server> StartRedis(const RedisConfig& c, const std::string& log) {
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    std::vector<std::string> argv = {c.binary,
                                     "--port",
                                     std::to_string(port),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--dir",
                                     "/tmp",
                                     "--dbfilename",
                                     "mooncake_bench_unused.rdb"};
    if (c.maxmemory_bytes > 0) {
      for (std::string a : {std::string("--maxmemory"), std::to_string(c.maxmemory_bytes),
                            std::string("--maxmemory-policy"), c.policy}) {
        argv.push_back(a);
      }
    }
    ASSIGN_OR_RETURN(ChildProcess p, ChildProcess::Spawn(argv, log));
    last = WaitForPort(p, port, absl::Seconds(10));
    if (last.ok()) return Server{std::move(p), absl::StrCat("127.0.0.1:", port), "", port};
  }
  return last;
}

struct StoreConfig {
  std::string binary;  // tools/mooncake_store
  uint64_t segment_bytes = uint64_t{1} << 30;
  std::vector<std::string> extra_args;  // appended after the fixed flags
};

// "key=value" lines of the store's ready file; empty until all of rpc, http
// and pid are there (the file may be read while being written).
inline std::map<std::string, std::string> ReadReadyFile(const std::string& path) {
  std::ifstream in(path);
  std::map<std::string, std::string> kv;
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  if (!kv.contains("rpc") || !kv.contains("http") || !kv.contains("pid")) kv.clear();
  return kv;
}

inline absl::StatusOr<Server> StartStore(const StoreConfig& c, const std::string& log,
                                         const std::string& ready_file) {
  std::remove(ready_file.c_str());
  std::vector<std::string> argv = {c.binary,
                                   "--role=all",
                                   "--listen=127.0.0.1:0",
                                   "--http=127.0.0.1:0",
                                   "--demo=false",
                                   "--status_interval=0",
                                   absl::StrCat("--segment_bytes=", c.segment_bytes),
                                   absl::StrCat("--ready_file=", ready_file)};
  argv.insert(argv.end(), c.extra_args.begin(), c.extra_args.end());
  ASSIGN_OR_RETURN(ChildProcess p, ChildProcess::Spawn(argv, log));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (!p.Running()) return absl::UnavailableError(absl::StrCat("store exited: ", p.Describe()));
    std::map<std::string, std::string> kv = ReadReadyFile(ready_file);
    if (!kv.empty()) {
      ASSIGN_OR_RETURN(auto hp, HostAndPort(kv["rpc"]));
      return Server{std::move(p), kv["rpc"], kv["http"], hp.second};
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("store wrote no ready file ", ready_file, " in 30 s: ", p.Describe()));
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_SERVERS_H_
