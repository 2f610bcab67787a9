// ProcessStats: what the standard Prometheus process_* metrics report, read
// from /proc/self (Linux): memory, file descriptors, threads.
//
//   const ProcessStats p = ReadProcessStats();
//   if (p.resident_bytes > 0) ...
//
// A field that cannot be read is 0 (never an error: metrics are best effort).
// Thread-safety: a pure function of the process's state.
#ifndef MOONCAKE_STORE_NODE_PROCESS_STATS_H_
#define MOONCAKE_STORE_NODE_PROCESS_STATS_H_

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mooncake::node {

struct ProcessStats {
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  // The soft RLIMIT_NOFILE as getrlimit gives it: an unlimited one (not
  // possible on Linux, where nr_open caps it) would read RLIM_INFINITY, not 0.
  uint64_t max_fds = 0;
  uint64_t threads = 0;
};

inline ProcessStats ReadProcessStats() {
  ProcessStats p;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (FILE* f = std::fopen("/proc/self/statm", "re")) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2 && page > 0) {
      p.virtual_bytes = size * static_cast<uint64_t>(page);
      p.resident_bytes = resident * static_cast<uint64_t>(page);
    }
    std::fclose(f);
  }
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::strncmp(line, "Threads:", 8) == 0) {
        p.threads = std::strtoull(line + 8, nullptr, 10);
        break;
      }
    }
    std::fclose(f);
  }
  if (DIR* d = ::opendir("/proc/self/fd")) {
    uint64_t n = 0;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    p.open_fds = n > 0 ? n - 1 : 0;  // less the directory's own descriptor
  }
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) p.max_fds = static_cast<uint64_t>(r.rlim_cur);
  return p;
}

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_PROCESS_STATS_H_
