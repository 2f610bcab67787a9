// pd_connector_benchmark: the PD connector's throughput for one long request
// against the raw transport moving the same byte ranges, in the same run.
//
//   bazel run -c opt //mooncake/connector:pd_connector_benchmark [-- --tokens=16384 --reps=5]
//
// A fork()ed decode process holds the decode cache (a DecodeConnector on its
// own TcpTransport); this process is the prefill side. Per rep:
//   connector  the decode side pulls request r (StartRequest + WaitAll); the
//              prefill side adds it and saves every layer at t0; t1 is when the
//              request is handed back (every layer written and the decode side
//              notified): bytes / (t1 - t0).
//   raw        the same planned ranges (PlanTransfer, computed beforehand),
//              submitted by this process straight to the decode segments on
//              the same transport, all batches in flight, then waited.
// Two block patterns: consecutive block ids on both sides (a fresh request:
// ranges merge to one per layer and part), and shuffled decode blocks (a
// fragmented cache: one range per block, layer and part).
// Every figure is the median of --reps runs. The decode process checks the
// bytes of the last connector rep.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/connector/decode_connector.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/connector/prefill_connector.h"
#include "mooncake/transport/tcp_transport.h"

ABSL_FLAG(uint64_t, tokens, 16384, "tokens in the request");
ABSL_FLAG(uint32_t, layers, 8, "layers (each 4 KiB per token: 8 KV heads x 128 x bf16 x K,V)");
ABSL_FLAG(int, reps, 5, "runs per figure (median)");

namespace mooncake::connector {
namespace {

using transport::TcpTransport;

KvLayout BenchLayout(uint64_t num_blocks) {
  return KvLayout{.order = KvOrder::kLayerFirst,
                  .dtype = KvDtype::kBFloat16,
                  .num_layers = absl::GetFlag(FLAGS_layers),
                  .num_parts = 2,
                  .block_size = 16,
                  .num_kv_heads = 8,
                  .head_dim = 128,
                  .num_blocks = num_blocks,
                  .first_head = 0,
                  .total_kv_heads = 8};
}

std::vector<uint64_t> Blocks(uint64_t count, uint64_t num_blocks, bool shuffle) {
  std::vector<uint64_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (shuffle) std::shuffle(ids.begin(), ids.end(), std::mt19937_64(42));
  ids.resize(count);
  return ids;
}

std::string ReadLine(int fd) {
  std::string s;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') s += c;
  return s;
}
void WriteLine(int fd, const std::string& s) {
  const std::string line = s + "\n";
  MC_ASSERT(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()), "pipe");
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The decode process: serves pulls as the parent asks, checks the bytes of
// the last one (the prefill cache holds byte (i * 131) % 251 at offset i).
[[noreturn]] void DecodeMain(int in, int out, const KvLayout& layout) {
  auto t = TcpTransport::Create({});
  MC_ASSERT(t.ok(), "transport");
  std::vector<std::vector<std::byte>> regions(layout.NumRegions(),
                                              std::vector<std::byte>(layout.RegionBytes()));
  std::vector<std::byte*> bases;
  for (auto& r : regions) bases.push_back(r.data());
  auto dc = DecodeConnector<TcpTransport>::Create(t->get(), layout, bases);
  MC_ASSERT(dc.ok(), "decode connector");
  std::string segs;
  for (const auto& s : (*dc)->segments()) segs += " " + std::to_string(s.id);
  WriteLine(out, (*t)->LocalEndpoint() + segs);
  for (;;) {
    // "<id> <prefill rpc address> <tokens> <shuffle>"
    char id[64], addr[128];
    unsigned long long tokens = 0;
    int shuffle = 0;
    const std::string cmd = ReadLine(in);
    if (cmd.empty() ||
        std::sscanf(cmd.c_str(), "%63s %127s %llu %d", id, addr, &tokens, &shuffle) != 4) {
      _exit(0);
    }
    const uint64_t n = (tokens + layout.block_size - 1) / layout.block_size;
    const auto blocks = Blocks(n, layout.num_blocks, shuffle != 0);
    absl::Status s = (*dc)->StartRequest(id, {addr}, blocks, tokens);
    if (s.ok()) s = (*dc)->WaitAll(id, absl::Seconds(120));
    (*dc)->End(id);
    // Every token row of every layer and part, against the prefill's pattern
    // (its blocks are 0, 1, 2, ...; a row holds every head: kLayerFirst).
    const uint64_t row_bytes = uint64_t{layout.num_kv_heads} * layout.HeadBytes();
    for (uint64_t t = 0; s.ok() && t < tokens; ++t) {
      for (uint32_t l = 0; l < layout.num_layers; ++l) {
        for (uint32_t p = 0; p < 2; ++p) {
          const ByteRange src = layout.ElementLocation(l, p, t / 16, t % 16, 0, 0);
          const ByteRange dst = layout.ElementLocation(l, p, blocks[t / 16], t % 16, 0, 0);
          for (uint64_t i = 0; i < row_bytes; i += 64) {
            if (regions[dst.region][dst.offset + i] !=
                static_cast<std::byte>(((src.offset + i) * 131) % 251)) {
              s = absl::DataLossError("decode cache bytes differ from the prefill's");
            }
          }
        }
      }
    }
    std::fill(regions.begin(), regions.end(), std::vector<std::byte>(layout.RegionBytes()));
    WriteLine(out, s.ok() ? "ok" : std::string(s.message()));
  }
}

struct Figures {
  double connector_gbps = 0, raw_gbps = 0;
  uint64_t ranges = 0, blocks = 0, bytes = 0;
};

Figures Measure(PrefillConnector<TcpTransport>& pc, TcpTransport& tcp, const KvLayout& layout,
                const std::vector<const std::byte*>& src_bases, const std::string& endpoint,
                const std::vector<uint64_t>& segment_ids, int to_child, int from_child,
                uint64_t tokens, bool shuffle, int& next_id) {
  const uint64_t n = (tokens + layout.block_size - 1) / layout.block_size;
  const auto src_blocks = Blocks(n, layout.num_blocks, false);
  const auto dst_blocks = Blocks(n, layout.num_blocks, shuffle);
  Figures f;
  f.blocks = n * layout.num_layers;
  // Raw: the plan, then the transport alone.
  auto plan =
      PlanTransfer(layout, src_blocks, layout, dst_blocks, tokens, AllLayers(layout.num_layers));
  MC_ASSERT(plan.ok(), "plan");
  f.ranges = plan->size();
  for (const CopyRange& c : *plan) f.bytes += c.length;
  std::vector<transport::SegmentHandle> handles;
  for (uint64_t id : segment_ids) {
    auto seg = tcp.OpenSegment(endpoint, id);
    MC_ASSERT(seg.ok(), "open decode segment");
    handles.push_back(seg->handle);
  }
  std::vector<double> raw, conn;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    std::vector<transport::TransferRequest> reqs;
    for (const CopyRange& c : *plan) {
      reqs.push_back({.op = transport::OpCode::kWrite,
                      .local_addr = const_cast<std::byte*>(src_bases[c.src_region] + c.src_offset),
                      .segment = handles[c.dst_region],
                      .remote_offset = c.dst_offset,
                      .length = c.length});
    }
    const absl::Time t0 = absl::Now();
    std::vector<transport::BatchId> batches;
    for (size_t i = 0; i < reqs.size(); i += transport::kMaxBatchRequests) {
      const size_t k = std::min(transport::kMaxBatchRequests, reqs.size() - i);
      auto b = tcp.Submit(std::span<const transport::TransferRequest>(reqs.data() + i, k));
      MC_ASSERT(b.ok(), "submit");
      batches.push_back(*b);
    }
    for (transport::BatchId b : batches) {
      auto r = tcp.Wait(b, absl::Now() + absl::Seconds(120));
      MC_ASSERT(r.ok() && r->ok(), "raw transfer");
    }
    raw.push_back(static_cast<double>(f.bytes) / absl::ToDoubleSeconds(absl::Now() - t0) / 1e9);

    const std::string id = "r" + std::to_string(next_id++);
    WriteLine(to_child, id + " " + pc.rpc_address() + " " + std::to_string(tokens) + " " +
                            (shuffle ? "1" : "0"));
    while (pc.stats().pulls_waiting == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    const absl::Time t1 = absl::Now();
    MC_ASSERT(pc.AddRequest(id, src_blocks, tokens).ok(), "add");
    for (uint32_t l = 0; l < layout.num_layers; ++l) MC_ASSERT(pc.SaveLayer(id, l).ok(), "save");
    bool released = false;
    while (!released) {
      for (const auto& r : pc.TakeReleased()) released = released || r.request_id == id;
      if (!released) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    conn.push_back(static_cast<double>(f.bytes) / absl::ToDoubleSeconds(absl::Now() - t1) / 1e9);
    const std::string answer = ReadLine(from_child);
    MC_ASSERT(answer == "ok", "decode side failed");
  }
  for (auto h : handles) (void)tcp.CloseSegment(h);
  f.raw_gbps = Median(raw);
  f.connector_gbps = Median(conn);
  return f;
}

}  // namespace
}  // namespace mooncake::connector

int main(int argc, char** argv) {
  using namespace mooncake::connector;  // NOLINT: a benchmark's main
  absl::ParseCommandLine(argc, argv);
  const uint64_t tokens = absl::GetFlag(FLAGS_tokens);
  // Room for the request twice over, so shuffled ids spread over the cache.
  const KvLayout layout = BenchLayout(2 * ((tokens + 15) / 16));
  int down[2], up[2];
  MC_ASSERT(::pipe(down) == 0 && ::pipe(up) == 0, "pipe");
  const pid_t pid = ::fork();
  MC_ASSERT(pid >= 0, "fork");
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    DecodeMain(down[0], up[1], layout);
  }
  ::close(down[0]);
  ::close(up[1]);
  std::vector<std::vector<std::byte>> regions(layout.NumRegions(),
                                              std::vector<std::byte>(layout.RegionBytes()));
  std::vector<const std::byte*> bases;
  for (auto& r : regions) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<std::byte>((i * 131) % 251);
    bases.push_back(r.data());
  }
  auto tcp = TcpTransport::Create({});
  MC_ASSERT(tcp.ok(), "transport");
  auto pc = PrefillConnector<TcpTransport>::Create(tcp->get(), layout, bases);
  MC_ASSERT(pc.ok(), "prefill connector");
  // "<endpoint> <segment id>..."
  const std::string hello = ReadLine(up[0]);
  std::vector<std::string> words;
  for (size_t at = 0; at < hello.size();) {
    const size_t sp = std::min(hello.find(' ', at), hello.size());
    words.push_back(hello.substr(at, sp - at));
    at = sp + 1;
  }
  std::vector<uint64_t> segment_ids;
  for (size_t i = 1; i < words.size(); ++i) segment_ids.push_back(std::stoull(words[i]));
  std::printf(
      "pd_connector_benchmark: %llu tokens, %u layers x %s, TCP on 127.0.0.1, "
      "decode in another process, median of %d\n",
      static_cast<unsigned long long>(tokens), layout.num_layers, layout.DebugString().c_str(),
      absl::GetFlag(FLAGS_reps));
  std::printf("%-22s %10s %8s %8s %12s %12s %7s\n", "blocks", "MiB", "blocks", "ranges",
              "connector", "raw tcp", "ratio");
  int next_id = 0;
  for (bool shuffle : {false, true}) {
    const Figures f = Measure(**pc, **tcp, layout, bases, words[0], segment_ids, down[1], up[0],
                              tokens, shuffle, next_id);
    std::printf("%-22s %10.1f %8llu %8llu %9.2f GB/s %7.2f GB/s %6.2fx\n",
                shuffle ? "shuffled (fragmented)" : "consecutive (fresh)",
                static_cast<double>(f.bytes) / (1 << 20), static_cast<unsigned long long>(f.blocks),
                static_cast<unsigned long long>(f.ranges), f.connector_gbps, f.raw_gbps,
                f.connector_gbps / f.raw_gbps);
  }
  ::close(down[1]);
  ::waitpid(pid, nullptr, 0);
  return 0;
}
