// The Transport concept: one-sided, batched reads and writes of registered memory.
//
// Vocabulary
//   Segment   A registered memory region: an id, a length and a location
//             (host DRAM, shared memory, GPU n). The process that registered
//             it is its *owner*; peers target it by (endpoint, segment id).
//   Endpoint  A string naming a transport instance that peers can reach
//             (LocalEndpoint()): "local://3", "shm:///tmp/mc.sock",
//             "tcp://127.0.0.1:40123". Its form is the model's business.
//   Handle    What OpenSegment returns: a requester-local name for an opened
//             peer segment (RemoteSegment), valid until CloseSegment.
//   Request   {READ or WRITE, local address, remote segment handle, remote
//             offset, length}. READ copies remote -> local, WRITE local ->
//             remote. The local buffer need not be registered (models that
//             need registered local memory, e.g. RDMA, register it on the fly
//             or document otherwise).
//   Batch     Requests submitted together. A batch completes as a whole: it is
//             done once every request has succeeded or failed, and its result
//             carries one Status per request, so a caller (the Router) can
//             retry exactly the failed requests elsewhere.
//
// Semantics every model keeps (the conformance kit, transport_testing.h,
// checks each one):
//   - Owner-side bounds. Every access is checked against the segment length by
//     the side that owns the memory (or, for mapped transports, by a mapping
//     that covers exactly the segment): no request touches a byte outside
//     [0, length) of a registered segment. A request that would is failed with
//     OutOfRange; the other requests of its batch are unaffected.
//   - Per-request status codes: OK; InvalidArgument (null address, zero length,
//     offset + length overflows); OutOfRange (outside the segment); NotFound
//     (unknown or closed handle, segment unregistered by its owner);
//     Unavailable (the peer closed or died); DeadlineExceeded (the peer stalled
//     past the model's I/O deadline); DataLoss (the peer sent bytes that break
//     the protocol); Cancelled (Cancel() ran first). A request whose status is
//     not OK may have written part of its local (READ) or remote (WRITE) range.
//   - Never a hang: every wait inside a model is bounded by a deadline, so a
//     stalled or dead peer turns into a Status, and Wait() returns by its
//     deadline.
//   - Bounded: at most `kMaxBatchRequests` requests per batch and a
//     model-specific number of batches in flight; Submit returns
//     ResourceExhausted beyond that instead of queueing without bound.
//   - Batch ids are released by the call that returns the batch's final
//     result (Wait or Cancel); using a released id gives NotFound.
//   - After Wait returned a result, or Cancel returned, the model no longer
//     touches the batch's local buffers: the caller may free them.
//   - Chunk digests (optional, READ only). A request may carry
//     DigestChunkCount(length) slots (base/value_checksum.h), each set to
//     kNoDigest by the caller. A model that lands the bytes with the CPU
//     (local, SHM, TCP) writes ChunkDigest of each 64 KiB chunk of the local
//     range into its slot as soon as that chunk's bytes are final there, while
//     they are still in cache; a model may leave any slot untouched (RDMA and
//     CUDA leave all). Only a request that ends OK has meaningful slots.
//     Slots are part of the local buffer: not touched after Wait or Cancel.
//
// Thread-safety: every method of every model may be called concurrently from
// any thread (models are thread-safe).
//
// Lifetime: UnregisterMemory stops new opens and new requests; models whose
// peers map the memory (SHM, CUDA IPC) cannot revoke existing mappings, so the
// owner must keep such memory alive until peers closed it (each model says).
//
// Fit for the other backends: RDMA registers memory with ibv_reg_mr and sends
// (address, rkey, length) to a peer in OpenSegment over its control channel,
// keeping keys inside the model; CUDA segments use MemoryLocation::Gpu(n); the
// Router is itself a model that owns several transports, opens a segment on
// the best one per peer and resubmits failed requests (by index from
// BatchResult) on the next.
#ifndef MOONCAKE_TRANSPORT_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_TRANSPORT_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mooncake/base/value_checksum.h"

namespace mooncake::transport {

// Names a segment within its owner. 0 is never a valid id.
using SegmentId = uint64_t;
// Names an opened remote segment within the requester. 0 is never valid.
using SegmentHandle = uint64_t;
// Names a batch in flight within the transport that accepted it. 0 is never valid.
using BatchId = uint64_t;

inline constexpr size_t kMaxBatchRequests = 4096;

enum class MemoryKind : uint8_t {
  kHostDram = 0,      // ordinary process memory
  kSharedMemory = 1,  // memfd / shm memory other processes can map
  kGpu = 2,           // device memory of GPU `device`
};

struct MemoryLocation {
  MemoryKind kind = MemoryKind::kHostDram;
  int32_t device = -1;  // GPU ordinal for kGpu; -1 otherwise

  static constexpr MemoryLocation HostDram() { return {MemoryKind::kHostDram, -1}; }
  static constexpr MemoryLocation SharedMemory() { return {MemoryKind::kSharedMemory, -1}; }
  static constexpr MemoryLocation Gpu(int32_t device) { return {MemoryKind::kGpu, device}; }
  friend bool operator==(const MemoryLocation&, const MemoryLocation&) = default;
};

// A registered local segment, as its owner sees it.
struct SegmentDesc {
  SegmentId id = 0;
  uint64_t length = 0;
  MemoryLocation location;
};

// A peer's segment, as the requester that opened it sees it.
struct RemoteSegment {
  SegmentHandle handle = 0;
  SegmentId id = 0;     // the owner's id
  uint64_t length = 0;  // as advertised by the owner
  MemoryLocation location;
};

enum class OpCode : uint8_t {
  kRead = 0,   // remote -> local
  kWrite = 1,  // local -> remote
};

struct TransferRequest {
  OpCode op = OpCode::kRead;
  void* local_addr = nullptr;  // READ destination / WRITE source, `length` bytes
  SegmentHandle segment = 0;   // from OpenSegment
  uint64_t remote_offset = 0;  // within the segment
  uint64_t length = 0;         // > 0
  // READ only, optional: DigestChunkCount(length) slots (see "Chunk digests").
  uint64_t* chunk_digests = nullptr;
  // Optional: kCapabilityBytes bytes of a range capability (base/capability.h)
  // for an owner that checks tenants' access per request (TcpTransport with
  // Options::access_check: sent with every frame of the request). Caller-owned
  // like the local buffer. Models whose bytes move without the owner's CPU
  // (local, SHM, CUDA, RDMA) ignore it.
  const char* capability = nullptr;
};

inline constexpr size_t kCapabilityBytes = 64;

// The digest slots of bytes [off, off + len) of `r`, for a model that moves
// a request in pieces: the piece's chunks are the request's when it starts on
// a chunk and ends on one (or at the request's end); otherwise null (the
// caller digests those chunks itself).
inline uint64_t* SubrangeDigests(const TransferRequest& r, uint64_t off, uint64_t len) {
  if (r.op != OpCode::kRead || r.chunk_digests == nullptr || off % kDigestChunkBytes != 0 ||
      (len % kDigestChunkBytes != 0 && off + len != r.length)) {
    return nullptr;
  }
  return r.chunk_digests + off / kDigestChunkBytes;
}

// Non-consuming progress of a batch in flight (Poll).
struct BatchProgress {
  size_t total_requests = 0;
  size_t succeeded_requests = 0;
  size_t failed_requests = 0;
  bool done() const { return succeeded_requests + failed_requests == total_requests; }
};

// The final result of a batch: one Status per request, in submission order.
struct BatchResult {
  std::vector<absl::Status> statuses;

  bool ok() const {
    for (const auto& s : statuses) {
      if (!s.ok()) return false;
    }
    return true;
  }
  size_t failed_count() const {
    size_t n = 0;
    for (const auto& s : statuses) n += s.ok() ? 0 : 1;
    return n;
  }
  // The first failure, or OK: a one-line summary for callers that do not retry.
  absl::Status FirstError() const {
    for (const auto& s : statuses) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
};

// --- The concept, one requirement per line. --------------------------------

template <typename T>
concept Transport = requires(T& t, const T& ct, void* addr, uint64_t length,
                             MemoryLocation location, SegmentId id, std::string_view endpoint,
                             SegmentHandle handle, std::span<const TransferRequest> requests,
                             BatchId batch, absl::Time deadline) {
  // O(1). A short model name for metrics labels and logs ("local", "shm", "tcp").
  { ct.Name() } -> std::convertible_to<std::string_view>;
  // O(1). What peers pass to OpenSegment to reach this instance.
  { ct.LocalEndpoint() } -> std::same_as<std::string>;
  // Makes [addr, addr + length) a segment peers can target. Models may demand
  // memory they produced (SHM: memfd memory) and say FailedPrecondition else.
  { t.RegisterMemory(addr, length, location) } -> std::same_as<absl::StatusOr<SegmentDesc>>;
  // Stops new opens and new requests on the segment. NotFound if unknown.
  { t.UnregisterMemory(id) } -> std::same_as<absl::Status>;
  // May block up to the model's connect deadline. NotFound if the peer has no
  // such segment; Unavailable if the peer cannot be reached.
  { t.OpenSegment(endpoint, id) } -> std::same_as<absl::StatusOr<RemoteSegment>>;
  // Requests already submitted on the handle still complete (or fail).
  { t.CloseSegment(handle) } -> std::same_as<absl::Status>;
  // Starts every request; returns without waiting for data (models may finish
  // small or local work inline). Batch-level errors only: InvalidArgument for
  // an empty batch or one over kMaxBatchRequests, ResourceExhausted when too
  // many batches are in flight. Request-level errors land in the result.
  // REQUIRES: every local buffer stays valid until the batch's result is taken.
  { t.Submit(requests) } -> std::same_as<absl::StatusOr<BatchId>>;
  // Non-blocking, O(1); does not release the batch. NotFound if unknown.
  { t.Poll(batch) } -> std::same_as<absl::StatusOr<BatchProgress>>;
  // Blocks until the batch is done or `deadline` passes. On completion returns
  // the result and releases the id; DeadlineExceeded leaves it in flight.
  // absl::InfinitePast() makes it a non-blocking collect.
  { t.Wait(batch, deadline) } -> std::same_as<absl::StatusOr<BatchResult>>;
  // Fails every unfinished request with Cancelled, waits (bounded by the
  // model's I/O deadline) until no transfer touches the batch's buffers,
  // returns the result and releases the id.
  { t.Cancel(batch) } -> std::same_as<absl::StatusOr<BatchResult>>;
};

// Submit for a caller that Waits for the batch next: the model's
// SubmitForWait where it has one (TcpTransport receives on the waiting
// thread), else Submit.
template <Transport T>
absl::StatusOr<BatchId> SubmitForWaitOrSubmit(T& t, std::span<const TransferRequest> requests) {
  if constexpr (requires { t.SubmitForWait(requests); }) {
    return t.SubmitForWait(requests);
  } else {
    return t.Submit(requests);
  }
}

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_TRANSPORT_H_
