// The servers mooncake_bench compares, each started as its own process on
// 127.0.0.1 with a free port: memcached, redis-server and the mooncake store
// (tools/mooncake_store --role=all). StartStoreNode starts any one node of a
// store (master, worker or all) for the tools that run a cluster.
//
// Thread-safety: a Server is owned and stopped by one thread.
#ifndef MOONCAKE_TOOLS_BENCH_SERVERS_H_
#define MOONCAKE_TOOLS_BENCH_SERVERS_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
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

// A tools/mooncake_store process that is serving, and the addresses its
// ready file names.
struct StoreNode {
  ChildProcess process;
  std::string rpc;   // host:port of its RPC endpoint
  std::string http;  // host:port of its /metrics and /health
};

struct StoreNodeConfig {
  std::string binary;               // tools/mooncake_store
  std::vector<std::string> flags;   // --role and the rest; after the common ones, so they win
  std::string ready_file;           // removed first; the node writes it once serving
  std::string log;                  // the node's stdout and stderr
  std::string name = "store";       // names the node in errors
  std::vector<std::string> prefix;  // run as `prefix... binary ...` (e.g. ip netns exec NS)
  absl::Duration timeout = absl::Seconds(30);
};

// Starts `binary --http=127.0.0.1:0 --demo=false --status_interval=0
// --ready_file=<ready_file> flags...` and waits until its ready file names
// its rpc and http addresses. NOT_FOUND if the binary does not exist;
// UNAVAILABLE if the node exits first, DEADLINE_EXCEEDED if it writes no
// ready file within `timeout` (both with the command and its log's tail).
inline absl::StatusOr<StoreNode> StartStoreNode(const StoreNodeConfig& c) {
  std::remove(c.ready_file.c_str());  // a stale one would read as ready at once
  std::vector<std::string> argv = c.prefix;
  for (std::string a :
       {c.binary, std::string("--http=127.0.0.1:0"), std::string("--demo=false"),
        std::string("--status_interval=0"), absl::StrCat("--ready_file=", c.ready_file)}) {
    argv.push_back(std::move(a));
  }
  argv.insert(argv.end(), c.flags.begin(), c.flags.end());
  StoreNode n;
  ASSIGN_OR_RETURN(n.process, ChildProcess::Spawn(std::move(argv), c.log));
  const absl::Time deadline = absl::Now() + c.timeout;
  while (absl::Now() < deadline) {
    if (!n.process.Running()) {
      return absl::UnavailableError(absl::StrCat(c.name, " exited: ", n.process.Describe()));
    }
    std::map<std::string, std::string> kv = ReadReadyFile(c.ready_file);
    if (!kv.empty()) {
      n.rpc = std::move(kv["rpc"]);
      n.http = std::move(kv["http"]);
      return n;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::DeadlineExceededError(absl::StrCat(c.name, " wrote no ready file ", c.ready_file,
                                                  " in ", absl::FormatDuration(c.timeout), ": ",
                                                  n.process.Describe()));
}

// A single-process store (--role=all) listening on 127.0.0.1.
inline absl::StatusOr<Server> StartStore(const StoreConfig& c, const std::string& log,
                                         const std::string& ready_file) {
  StoreNodeConfig node{.binary = c.binary,
                       .flags = {"--role=all", "--listen=127.0.0.1:0",
                                 absl::StrCat("--segment_bytes=", c.segment_bytes)},
                       .ready_file = ready_file,
                       .log = log};
  node.flags.insert(node.flags.end(), c.extra_args.begin(), c.extra_args.end());
  ASSIGN_OR_RETURN(StoreNode n, StartStoreNode(node));
  ASSIGN_OR_RETURN(auto hp, HostAndPort(n.rpc));
  return Server{std::move(n.process), std::move(n.rpc), std::move(n.http), hp.second};
}

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_SERVERS_H_
