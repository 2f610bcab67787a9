// mooncake_store: the reference KV-cache store binary.
//
// The master, worker and client exist as libraries (mooncake/store), but this
// binary does not assemble them yet (issue #9). Until it does, it checks the
// base components on this machine and prints what it measured, so README's
// command 1 shows a working build.
#include <cstdio>
#include <string>
#include <vector>

#include "mooncake/base/clock.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/histogram.h"
#include "mooncake/base/metrics.h"

namespace {

int SelfCheck() {
  using mooncake::MonotonicClock;
  int failures = 0;
  // XXH3 published vector (empty input): the stable hash is the same here as
  // on every other machine.
  if (mooncake::StableHash64("") != 0x2D06800538D394C2ULL) {
    std::printf("FAIL stable hash: XXH3 test vector mismatch\n");
    ++failures;
  } else {
    std::printf("ok   stable hash (XXH3-64/128, libxxhash %u)\n", XXH_versionNumber());
  }

  // Hash 64 MiB and time it with the histogram the store will use for its
  // per-RPC latencies.
  std::vector<char> buf(1 << 20, 'k');
  mooncake::LatencyHistogram hist;
  MonotonicClock& clock = MonotonicClock::Get();
  uint64_t sink = 0;
  for (int i = 0; i < 64; ++i) {
    const int64_t t0 = clock.NowNs();
    sink ^= mooncake::StableHash64(buf.data(), buf.size(), i);
    hist.Record(static_cast<uint64_t>(clock.NowNs() - t0));
  }
  const double p50_us = static_cast<double>(hist.P50()) / 1e3;
  std::printf("ok   hash 1 MiB: P50 %.1f us (%.2f GB/s), P99 %.1f us [%llx]\n", p50_us,
              (1 << 20) / (p50_us * 1e3), static_cast<double>(hist.P99()) / 1e3,
              static_cast<unsigned long long>(sink & 0xF));

  mooncake::MetricsRegistry registry;
  auto counter = registry.GetCounter("mooncake_selfcheck_total", "Self-check runs.");
  if (!counter.ok()) {
    std::printf("FAIL metrics: %s\n", std::string(counter.status().message()).c_str());
    ++failures;
  } else {
    (*counter)->Increment();
    std::printf("ok   metrics registry (Prometheus text, %zu bytes)\n",
                registry.RenderPrometheus().size());
  }
  return failures;
}

}  // namespace

int main() {
  std::printf("mooncake_store: embedded default (master + worker on 127.0.0.1)\n");
  const int failures = SelfCheck();
  std::printf(
      "\nThe reference store does not assemble the master, worker and client yet (issue #9):\n"
      "nothing is serving. Libraries present: base, alloc, index, compress, qos, transport,\n"
      "tier, store (rpc, master, worker, client). Run every test with: bash tools/run_tests.sh\n");
  return failures == 0 ? 0 : 1;
}
