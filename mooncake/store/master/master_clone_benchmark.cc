// Clone cost at the master (docs/agents.md):
//
//   bazel run -c opt //mooncake/store/master:master_clone_benchmark -- --reps=9
//
// A 32K-token KV state held as 64 page objects per layer x 32 layers (2,048
// objects) is cloned into a new namespace, by the explicit key list and by
// the prefix form, for a 4 MiB state (2 KiB pages) and a 4 GiB state (2 MiB
// pages). One process, a real Master<> on a FakeClock; the master never
// touches segment bytes, so a 4 GiB state is only numbers here, as it is for
// the master of a real pool. Printed per size: the median clone time of
// --reps clones, the segment bytes the clones allocated (the pool's own
// accounting: must be 0) and the bytes they share; and, as the baseline of
// the same run, what a fork by copy costs: PutStart+PutEnd of the same 2,048
// objects (metadata only), plus the byte copy at this machine's measured
// memcpy rate.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/master/master.h"

namespace {

using mooncake::FakeClock;
namespace proto = mooncake::store::proto;
using Master = mooncake::master::Master<>;

constexpr int kLayers = 32;
constexpr int kPagesPerLayer = 64;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string PageKey(const std::string& ns, int layer, int page) {
  return absl::StrCat(ns, "/L", layer, "/P", page);
}

// memcpy rate over 64 MiB, GB/s (median of 5).
double MemcpyGbps() {
  const size_t n = size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 0);
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    const double t0 = NowMs();
    std::memcpy(b.data(), a.data(), n);
    const double ms = NowMs() - t0;
    rates.push_back(static_cast<double>(n) / (ms * 1e6));
  }
  if (b[n / 2] != 1) std::abort();
  return Median(rates);
}

struct SizeResult {
  uint64_t state_bytes;
  double clone_keys_ms;
  double clone_prefix_ms;
  double put_baseline_ms;
  uint64_t allocated_by_clones;
  uint64_t shared_bytes;
};

SizeResult RunSize(uint64_t state_bytes, int reps) {
  const uint64_t page = state_bytes / (kLayers * kPagesPerLayer);
  FakeClock clock(1'000'000'000);
  mooncake::master::MasterOptions o;
  auto m = Master::Create(o, &clock);
  if (!m.ok()) std::abort();
  Master& master = **m;
  for (int w = 0; w < 4; ++w) {
    proto::MountSegmentRequest r;
    r.mutable_segment()->set_worker_id(absl::StrCat("w", w));
    r.mutable_segment()->set_name("seg");
    r.mutable_segment()->set_size_bytes(state_bytes);  // 4x the state in all
    r.mutable_segment()->mutable_endpoint()->set_host_id("h");
    if (!master.MountSegment(r).ok()) std::abort();
  }
  auto put_all = [&](const std::string& ns) {
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < kPagesPerLayer; ++p) {
        proto::PutStartRequest s;
        s.set_key(PageKey(ns, l, p));
        s.set_size_bytes(page);
        auto st = master.PutStart(s);
        if (!st.ok()) {
          std::fprintf(stderr, "put: %s\n", std::string(st.status().message()).c_str());
          std::abort();
        }
        proto::PutEndRequest e;
        e.set_key(s.key());
        e.set_put_id(st->put_id());
        if (!master.PutEnd(e).ok()) std::abort();
      }
    }
  };
  auto remove_all = [&](const std::string& ns) {
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < kPagesPerLayer; ++p) {
        proto::RemoveRequest r;
        r.set_key(PageKey(ns, l, p));
        if (!master.Remove(r).ok()) std::abort();
      }
    }
  };
  put_all("ctx");
  SizeResult out{};
  out.state_bytes = state_bytes;
  std::vector<double> keys_ms, prefix_ms, put_ms;
  proto::CloneRequest by_keys;
  for (int l = 0; l < kLayers; ++l) {
    for (int p = 0; p < kPagesPerLayer; ++p) by_keys.add_source_keys(PageKey("ctx", l, p));
  }
  for (int rep = 0; rep < reps; ++rep) {
    const uint64_t used_before = master.Stats().used_bytes;
    // The explicit form (the request is built outside the timed region, as
    // a client builds it before sending).
    proto::CloneRequest r = by_keys;
    const std::string ns = absl::StrCat("k", rep);
    for (int l = 0; l < kLayers; ++l) {
      for (int p = 0; p < kPagesPerLayer; ++p) r.add_destination_keys(PageKey(ns, l, p));
    }
    double t0 = NowMs();
    auto c = master.Clone(r);
    keys_ms.push_back(NowMs() - t0);
    if (!c.ok() || c->cloned() != kLayers * kPagesPerLayer) std::abort();
    // The prefix form.
    proto::CloneRequest pr;
    pr.set_source_prefix("ctx/");
    pr.set_destination_prefix(absl::StrCat("p", rep, "/"));
    t0 = NowMs();
    c = master.Clone(pr);
    prefix_ms.push_back(NowMs() - t0);
    if (!c.ok() || c->cloned() != kLayers * kPagesPerLayer) std::abort();
    out.allocated_by_clones =
        std::max(out.allocated_by_clones, master.Stats().used_bytes - used_before);
    out.shared_bytes = master.SharedBytes();
    // Baseline: the same objects put as new ones (a fork by copy), metadata
    // only.
    t0 = NowMs();
    put_all(absl::StrCat("copy", rep));
    put_ms.push_back(NowMs() - t0);
    remove_all(ns);
    remove_all(absl::StrCat("p", rep));
    remove_all(absl::StrCat("copy", rep));
  }
  out.clone_keys_ms = Median(keys_ms);
  out.clone_prefix_ms = Median(prefix_ms);
  out.put_baseline_ms = Median(put_ms);
  remove_all("ctx");
  if (master.Stats().used_bytes != 0 || master.SharedBytes() != 0) {
    std::fprintf(stderr, "leak: used %" PRIu64 " shared %" PRIu64 "\n", master.Stats().used_bytes,
                 master.SharedBytes());
    std::abort();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::max(1, std::atoi(argv[i] + 7));
  }
  const double gbps = MemcpyGbps();
  std::printf("clone of a 32K-token state: %d layers x %d page objects = %d objects, %d reps\n",
              kLayers, kPagesPerLayer, kLayers * kPagesPerLayer, reps);
  std::printf("memcpy (64 MiB, this machine): %.2f GB/s\n\n", gbps);
  std::printf("%-10s %12s %12s %14s %16s %14s %12s\n", "state", "clone keys", "clone prefix",
              "put 2048 (base)", "+ copy @memcpy", "allocated", "shared");
  std::vector<SizeResult> rs;
  for (const uint64_t bytes : {uint64_t{4} << 20, uint64_t{4} << 30}) {
    const SizeResult r = RunSize(bytes, reps);
    rs.push_back(r);
    const double copy_ms = static_cast<double>(bytes) / (gbps * 1e6);
    std::printf("%-10s %9.3f ms %9.3f ms %11.3f ms %13.1f ms %12" PRIu64 " B %9.1f MiB\n",
                bytes < (uint64_t{1} << 30) ? "4 MiB" : "4 GiB", r.clone_keys_ms, r.clone_prefix_ms,
                r.put_baseline_ms, r.put_baseline_ms + copy_ms, r.allocated_by_clones,
                static_cast<double>(r.shared_bytes) / (1 << 20));
  }
  std::printf("\n4 GiB / 4 MiB clone time: keys %.2fx, prefix %.2fx (metadata only: ~1x)\n",
              rs[1].clone_keys_ms / rs[0].clone_keys_ms,
              rs[1].clone_prefix_ms / rs[0].clone_prefix_ms);
  std::printf("clone (keys) vs fork by copy, 4 GiB: %.0fx faster\n",
              (rs[1].put_baseline_ms + static_cast<double>(rs[1].state_bytes) / (gbps * 1e6)) /
                  rs[1].clone_keys_ms);
  return 0;
}
