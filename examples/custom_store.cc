// custom_store: a store of a different shape, chosen at compile time.
//
// The reference store is master::Master<> (a TLSF allocator per segment, LRU
// eviction). This one is
//
//   master::Master<alloc::KvAllocator<>,
//                  index::S3FifoPolicy<master::ObjectKey, master::ObjectKeyHash>>
//
// - KvAllocator: objects of exactly the KV block size are packed into slab
//   pages, other sizes come from the TLSF backing (a factory tells the master
//   how to build one per mounted segment).
// - S3-FIFO eviction: an object read again is kept in a main queue, one-hit
//   objects leave from a small FIFO, so a scan cannot flush the hot set.
// - A codec on the client side: "offload" blocks are compressed with
//   compress::BytePlaneCodec (bf16 byte planes, exponent plane entropy-coded)
//   before Put and decompressed after Get; the frame is self-describing and
//   checksummed. "Interactive" blocks are stored raw (no codec latency).
// - A qos::DrrScheduler orders the puts of the two classes: while both are
//   queued, interactive gets 3x the bytes of offload.
// - Transports: the client reads and writes through SHM only (a same-host
//   process's view; TCP for another host).
//
// Part 2 runs one scan workload against the reference store and this one,
// same code, two types: hot blocks read once, then a scan twice the capacity.
//
//   bazel run //examples:custom_store
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "examples/in_process_store.h"
#include "mooncake/alloc/kv_allocator.h"
#include "mooncake/alloc/tlsf_allocator.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/compress/byte_plane_codec.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/qos/drr_scheduler.h"
#include "mooncake/store/master/evictor.h"
#include "mooncake/store/master/master.h"

namespace {

namespace alloc = mooncake::alloc;
namespace compress = mooncake::compress;
namespace master = mooncake::master;
namespace qos = mooncake::qos;
using mooncake::examples::InProcessStore;

using KvS3FifoMaster =
    master::Master<alloc::KvAllocator<>,
                   mooncake::index::S3FifoPolicy<master::ObjectKey, master::ObjectKeyHash>>;

// One KV block: 16 tokens x (K, V) x 4 KV heads x 64 dims x bf16 = 16 KiB.
constexpr size_t kBlockBytes = 16 * 2 * 4 * 64 * 2;
constexpr uint64_t kSegmentBytes = uint64_t{4} << 20;

template <typename MasterT>
typename InProcessStore<MasterT>::Options StoreOptions() {
  typename InProcessStore<MasterT>::Options o;
  o.worker.segment_bytes = kSegmentBytes;
  o.client.use_local = false;  // SHM only, as a process beside the worker would
  o.client.use_tcp = false;
  o.client.cache_enabled = false;  // no cached leases: eviction sees every block
  if constexpr (std::is_same_v<MasterT, KvS3FifoMaster>) {
    o.allocator_factory = [](uint64_t capacity) {
      return alloc::KvAllocator<>::Create(
          alloc::TlsfAllocator(alloc::TlsfOptions{.capacity_bytes = capacity}),
          alloc::SizeClassOptions{.class_bytes = {kBlockBytes}});
    };
  }
  return o;
}

// bf16 KV-like values: per-channel scale, smooth along tokens.
std::string KvBlock(int seed) {
  std::string out(kBlockBytes, '\0');
  for (size_t i = 0; i < kBlockBytes / 2; ++i) {
    const size_t channel = i % 64, token = i / 256;
    const float v =
        static_cast<float>((0.5 + channel % 7) * std::sin(0.3 * token + channel + seed));
    uint32_t bits = std::bit_cast<uint32_t>(v);
    bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even
    out[2 * i] = static_cast<char>(bits >> 16);
    out[2 * i + 1] = static_cast<char>(bits >> 24);
  }
  return out;
}

struct PutJob {
  std::string key;
  std::string value;
  std::string raw;  // what a get must give back (after decompression)
};

enum Class : qos::ClassId { kInteractive = 0, kOffload = 1 };

absl::Status ComposedStoreEndToEnd() {
  ASSIGN_OR_RETURN(auto store,
                   InProcessStore<KvS3FifoMaster>::Start(StoreOptions<KvS3FifoMaster>()));
  auto& client = store->client();
  compress::BytePlaneCodec codec;
  ASSIGN_OR_RETURN(auto scheduler, qos::DrrScheduler<PutJob>::Create(
                                       {.limits = {.class_count = 2, .capacity_items = 256},
                                        .weights = {3, 1},
                                        .quantum_bytes = kBlockBytes}));
  constexpr int kBlocksPerClass = 24;
  uint64_t raw_bytes = 0, stored_bytes = 0;
  for (int i = 0; i < kBlocksPerClass; ++i) {
    for (Class cls : {kInteractive, kOffload}) {
      PutJob job{absl::StrCat(cls == kInteractive ? "interactive/" : "offload/", i), "",
                 KvBlock(i + 100 * cls)};
      job.value = job.raw;
      if (cls == kOffload) {
        job.value.resize(codec.MaxCompressedSize(job.raw.size()));
        ASSIGN_OR_RETURN(
            const size_t n,
            codec.Compress(std::as_bytes(std::span(job.raw)), compress::DType::kBFloat16,
                           std::as_writable_bytes(std::span(job.value))));
        job.value.resize(n);
      }
      raw_bytes += job.raw.size();
      stored_bytes += job.value.size();
      const uint64_t cost = job.value.size();
      if (scheduler.Push(std::move(job), cls, cost) != qos::PushResult::kAccepted) {
        return absl::ResourceExhaustedError("put queue full");
      }
    }
  }
  // Drain the queue in the scheduler's order; note each class's bytes while
  // both still had puts waiting.
  std::vector<PutJob> done;
  uint64_t both_queued_bytes[2] = {0, 0};
  std::string order;
  while (std::optional<PutJob> job = scheduler.Pop()) {
    const bool interactive = job->key.starts_with("interactive/");
    const bool both = scheduler.Stats(kInteractive).queued_items > 0 &&
                      scheduler.Stats(kOffload).queued_items > 0;
    if (both) both_queued_bytes[interactive ? 0 : 1] += job->value.size();
    if (order.size() < 16) order += interactive ? 'I' : 'O';
    RETURN_IF_ERROR(client.Put(job->key, job->value));
    done.push_back(std::move(*job));
  }
  // Read everything back; offload values are frames to decompress.
  std::string raw(kBlockBytes, '\0');
  for (const PutJob& job : done) {
    ASSIGN_OR_RETURN(std::string value, client.Get(job.key));
    if (job.key.starts_with("offload/")) {
      ASSIGN_OR_RETURN(const size_t n, codec.Decompress(std::as_bytes(std::span(value)),
                                                        std::as_writable_bytes(std::span(raw))));
      value = raw.substr(0, n);
    }
    if (value != job.raw) return absl::DataLossError(absl::StrCat(job.key, " came back changed"));
  }
  const master::MasterStats st = store->master().Stats();
  std::printf("put order (first 16): %s\n", order.c_str());
  std::printf("interactive share of put bytes while both queued: %.2f (weights 3:1)\n",
              static_cast<double>(both_queued_bytes[0]) /
                  static_cast<double>(both_queued_bytes[0] + both_queued_bytes[1]));
  std::printf(
      "verified %zu blocks; %llu KiB of KV stored in %llu KiB (codec ratio %.2f on offload)\n",
      done.size(), static_cast<unsigned long long>(raw_bytes / 1024),
      static_cast<unsigned long long>(stored_bytes / 1024),
      static_cast<double>(kBlocksPerClass * kBlockBytes) /
          static_cast<double>(stored_bytes - kBlocksPerClass * kBlockBytes));
  std::printf("master: %lld objects, %llu KiB used of %llu KiB\n",
              static_cast<long long>(st.objects),
              static_cast<unsigned long long>(st.used_bytes / 1024),
              static_cast<unsigned long long>(st.capacity_bytes / 1024));
  return absl::OkStatus();
}

// Hot blocks, each read once, then a scan of one-hit blocks twice the
// capacity. Returns how many hot blocks are still cached.
template <typename MasterT>
absl::StatusOr<int> HotBlocksKeptAfterScan(int hot) {
  ASSIGN_OR_RETURN(auto store, InProcessStore<MasterT>::Start(StoreOptions<MasterT>()));
  auto& client = store->client();
  const std::string value = KvBlock(7);
  for (int i = 0; i < hot; ++i) RETURN_IF_ERROR(client.Put(absl::StrCat("hot/", i), value));
  for (int i = 0; i < hot; ++i) RETURN_IF_ERROR(client.Get(absl::StrCat("hot/", i)).status());
  const int scan = static_cast<int>(2 * kSegmentBytes / kBlockBytes);
  for (int i = 0; i < scan; ++i) RETURN_IF_ERROR(client.Put(absl::StrCat("scan/", i), value));
  int kept = 0;
  for (int i = 0; i < hot; ++i) {
    ASSIGN_OR_RETURN(const bool present, client.Exists(absl::StrCat("hot/", i)));
    kept += present;
  }
  return kept;
}

absl::Status Run() {
  RETURN_IF_ERROR(ComposedStoreEndToEnd());
  constexpr int kHot = 32;
  ASSIGN_OR_RETURN(const int lru, HotBlocksKeptAfterScan<master::Master<>>(kHot));
  ASSIGN_OR_RETURN(const int s3fifo, HotBlocksKeptAfterScan<KvS3FifoMaster>(kHot));
  std::printf(
      "hot blocks kept after a scan of 2x capacity: TLSF+LRU %d/%d, KvAllocator+S3-FIFO %d/%d\n",
      lru, kHot, s3fifo, kHot);
  return absl::OkStatus();
}

}  // namespace

int main() {
  const absl::Status s = Run();
  if (!s.ok()) {
    std::fprintf(stderr, "custom_store: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
