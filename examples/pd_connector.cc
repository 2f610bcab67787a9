// PD transfer for an engine written in C++: a prefill connector and a decode
// connector (each with its own transport, as in two processes) move one
// request's KV cache layer by layer, from a vLLM-shaped prefill cache (one
// region per layer, page 16) into an SGLang-shaped decode cache (one
// page-first region, page 32), over TCP and then over SHM.
//
//   bazel run //examples:pd_connector
//
// The "model" here writes a known pattern per layer; an engine writes its
// KV there instead and calls SaveLayer after each layer (docs/connector.md).
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mooncake/connector/decode_connector.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/connector/prefill_connector.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace mc = mooncake::connector;
namespace mt = mooncake::transport;

namespace {

constexpr uint32_t kLayers = 4, kHeads = 8, kHeadDim = 64;
constexpr uint64_t kTokens = 1000;

mc::KvLayout Layout(mc::KvOrder order, uint32_t block_size, uint64_t blocks) {
  return mc::KvLayout{.order = order,
                      .dtype = mc::KvDtype::kBFloat16,
                      .num_layers = kLayers,
                      .num_parts = 2,
                      .block_size = block_size,
                      .num_kv_heads = kHeads,
                      .head_dim = kHeadDim,
                      .num_blocks = blocks,
                      .first_head = 0,
                      .total_kv_heads = kHeads};
}

// The byte an element of (layer, part, token, head) holds, for checking.
std::byte Pattern(uint32_t layer, uint32_t part, uint64_t token, uint32_t head) {
  return static_cast<std::byte>((layer * 7 + part * 3 + token * 5 + head) & 0xff);
}

// Memory for one side's cache: plain heap for TCP, memfd for SHM (a decode
// cache that an SHM peer maps).
struct Memory {
  std::vector<std::vector<std::byte>> heap;
  std::vector<mt::SharedMemory> shm;
  std::vector<std::byte*> bases;

  Memory(const mc::KvLayout& l, bool shared) {
    for (uint32_t r = 0; r < l.NumRegions(); ++r) {
      if (shared) {
        auto m = mt::SharedMemory::Create(l.RegionBytes());
        if (!m.ok()) std::abort();
        bases.push_back(static_cast<std::byte*>(m->data()));
        shm.push_back(std::move(*m));
      } else {
        heap.emplace_back(l.RegionBytes());
        bases.push_back(heap.back().data());
      }
    }
  }
};

template <typename T>
int Run(const char* name, T& prefill_transport, T& decode_transport, bool shared) {
  const mc::KvLayout src = Layout(mc::KvOrder::kLayerFirst, 16, 128);
  const mc::KvLayout dst = Layout(mc::KvOrder::kPageFirst, 32, 64);
  Memory src_mem(src, false), dst_mem(dst, shared);
  std::vector<const std::byte*> src_bases(src_mem.bases.begin(), src_mem.bases.end());
  auto prefill = mc::PrefillConnector<T>::Create(&prefill_transport, src, src_bases);
  mc::DecodeConnectorOptions o;
  if (shared) o.location = mt::MemoryLocation::SharedMemory();
  auto decode = mc::DecodeConnector<T>::Create(&decode_transport, dst, dst_mem.bases, o);
  if (!prefill.ok() || !decode.ok()) {
    std::fprintf(stderr, "create: %s %s\n", prefill.status().ToString().c_str(),
                 decode.status().ToString().c_str());
    return 1;
  }
  // Blocks each side's allocator gave the request (any ids will do).
  std::vector<uint64_t> src_blocks, dst_blocks;
  for (uint64_t b = 0; b < (kTokens + 15) / 16; ++b) src_blocks.push_back(100 - b);
  for (uint64_t b = 0; b < (kTokens + 31) / 32; ++b) dst_blocks.push_back(2 * b + 1);

  // Decode: pull the request from the prefill instance.
  if (absl::Status s =
          (*decode)->StartRequest("req-1", {(*prefill)->rpc_address()}, dst_blocks, kTokens);
      !s.ok()) {
    std::fprintf(stderr, "start: %s\n", s.ToString().c_str());
    return 1;
  }
  // Prefill: "compute" each layer, then hand it to the connector.
  std::thread engine([&] {
    (void)(*prefill)->AddRequest("req-1", src_blocks, kTokens);
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      for (uint64_t t = 0; t < kTokens; ++t) {
        for (uint32_t part = 0; part < 2; ++part) {
          for (uint32_t h = 0; h < kHeads; ++h) {
            const auto at = src.ElementLocation(layer, part, src_blocks[t / 16], t % 16, h, 0);
            std::memset(src_mem.bases[at.region] + at.offset,
                        static_cast<int>(Pattern(layer, part, t, h)), src.HeadBytes());
          }
        }
      }
      (void)(*prefill)->SaveLayer("req-1", layer);
    }
  });
  // Decode: use each layer as soon as it is in place.
  int bad = 0;
  for (uint32_t layer = 0; layer < kLayers; ++layer) {
    if (absl::Status s = (*decode)->WaitLayer("req-1", layer, absl::Seconds(30)); !s.ok()) {
      std::fprintf(stderr, "layer %u: %s (an engine recomputes here)\n", layer,
                   s.ToString().c_str());
      ++bad;
      break;
    }
    for (uint64_t t = 0; t < kTokens; ++t) {
      for (uint32_t part = 0; part < 2; ++part) {
        for (uint32_t h = 0; h < kHeads; ++h) {
          const auto at = dst.ElementLocation(layer, part, dst_blocks[t / 32], t % 32, h, 0);
          bad += dst_mem.bases[at.region][at.offset] != Pattern(layer, part, t, h);
        }
      }
    }
  }
  engine.join();
  const mc::EndResult end = (*decode)->End("req-1");
  // The prefill side hands the request's blocks back once the decode side has them.
  std::vector<mc::ReleasedRequest> released;
  for (int i = 0; i < 1000 && released.empty(); ++i) {
    released = (*prefill)->TakeReleased();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const mc::PrefillConnectorStats st = (*prefill)->stats();
  std::printf(
      "%s: %llu tokens, %u layers, %llu ranges, %llu bytes, wrong elements %d, "
      "decode blocks reusable %s, prefill blocks released %zu\n",
      name, static_cast<unsigned long long>(kTokens), kLayers,
      static_cast<unsigned long long>(st.ranges_sent),
      static_cast<unsigned long long>(st.bytes_sent), bad, end.reusable_now ? "now" : "later",
      released.empty() ? 0 : released[0].blocks.size());
  return bad == 0 && end.status.ok() && !released.empty() && released[0].status.ok() ? 0 : 1;
}

}  // namespace

int main() {
  auto tp = mt::TcpTransport::Create({});
  auto td = mt::TcpTransport::Create({});
  auto sp = mt::ShmTransport::Create({});
  auto sd = mt::ShmTransport::Create({});
  if (!tp.ok() || !td.ok() || !sp.ok() || !sd.ok()) return 1;
  const int rc = Run("tcp", **tp, **td, false) | Run("shm", **sp, **sd, true);
  std::printf(rc == 0 ? "OK\n" : "FAILED\n");
  return rc;
}
