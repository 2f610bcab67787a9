// The C++ baseline of python/bench/store_benchmark.py: the same
// batch_get_into batches through compat::DistributedStore (what the Python
// binding calls), in the same run, against the same master and worker.
//
//   cpp_batch_get_benchmark --master=HOST:PORT --prefix=P --count=N --bytes=B
//       --seconds=S
// Reads keys P0..P(N-1) (each B bytes) as one batch, repeatedly, for S
// seconds, from --threads threads; prints "batches=... seconds=... gbps=..."
// on one line.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "mooncake/store/compat/distributed_store.h"

ABSL_FLAG(std::string, master, "127.0.0.1:50051", "master address");
ABSL_FLAG(std::string, prefix, "bench", "key prefix");
ABSL_FLAG(int32_t, count, 64, "keys per batch");
ABSL_FLAG(int64_t, bytes, 256 << 10, "bytes per value");
ABSL_FLAG(double, seconds, 2.0, "how long to read");
ABSL_FLAG(int32_t, threads, 1, "threads, each reading the batch into its own buffer");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace compat = mooncake::compat;
  compat::StoreConfig config;
  config.local_hostname = "127.0.0.1";
  config.global_segment_size = 0;  // reads only: no segment of its own
  config.local_buffer_size = 0;
  config.master_server_addr = absl::GetFlag(FLAGS_master);
  compat::DistributedStore store;
  if (int rc = store.Setup(config); rc != 0) {
    std::fprintf(stderr, "setup failed: %d %s\n", rc, store.last_error().c_str());
    return 1;
  }
  const int n = absl::GetFlag(FLAGS_count);
  const int threads = absl::GetFlag(FLAGS_threads);
  const uint64_t bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_bytes));
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(absl::GetFlag(FLAGS_prefix) + std::to_string(i));
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  const std::vector<uint64_t> sizes(n, bytes);
  using Clock = std::chrono::steady_clock;
  const double limit = absl::GetFlag(FLAGS_seconds);
  std::atomic<int64_t> batches{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<char> buffer(n * bytes);
      const uintptr_t base = reinterpret_cast<uintptr_t>(buffer.data());
      if (store.RegisterBuffer(base, buffer.size()) != 0) {
        failed = true;
        return;
      }
      std::vector<uintptr_t> ptrs;
      for (int i = 0; i < n; ++i) ptrs.push_back(base + i * bytes);
      while (std::chrono::duration<double>(Clock::now() - start).count() < limit) {
        for (int64_t r : store.BatchGetInto(views, ptrs, sizes)) {
          if (r != static_cast<int64_t>(bytes)) {
            std::fprintf(stderr, "read returned %lld\n", static_cast<long long>(r));
            failed = true;
            return;
          }
        }
        batches.fetch_add(1, std::memory_order_relaxed);
      }
      store.UnregisterBuffer(base);
    });
  }
  for (std::thread& t : pool) t.join();
  if (failed) return 1;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("batches=%lld seconds=%.3f gbps=%.4f\n", static_cast<long long>(batches.load()),
              elapsed, static_cast<double>(batches.load()) * n * bytes / elapsed / 1e9);
  store.Close();
  return 0;
}
