// LocalTransport: same-process transfers with memcpy; the reference model.
//
// Every LocalTransport in a process joins a process-wide hub under the
// endpoint "local://<n>", so one instance can open another's segments (as a
// store's client opens its embedded worker's). Submit performs the copies
// inline, so a batch is done when Submit returns.
//
// Owner-side bounds: a copy runs under the owner's segment-table reader lock
// after checking the range against the registered length, so it can never
// touch a byte outside the segment, and UnregisterMemory (writer lock) waits
// for copies in progress: once it returns, no request touches the memory.
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_TRANSPORT_LOCAL_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_LOCAL_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/metrics.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/transport/internal/batch_table.h"
#include "mooncake/transport/transport.h"
#include "mooncake/transport/transport_metrics.h"

namespace mooncake::transport {
namespace local_internal {

struct Segment {
  void* addr = nullptr;
  uint64_t length = 0;
  MemoryLocation location;
};

// One owner's segments; shared with the hub and with requesters' handles.
struct SegmentTable {
  SharedMutex mu;
  SegmentId next_id ABSL_GUARDED_BY(mu) = 1;
  absl::flat_hash_map<SegmentId, Segment> segments ABSL_GUARDED_BY(mu);
};

// Process-wide directory of LocalTransports, by instance number.
class Hub {
 public:
  static Hub& Get() {
    static Hub* hub = new Hub();  // never destroyed: transports may outlive statics
    return *hub;
  }
  uint64_t Join(std::shared_ptr<SegmentTable> table) {
    MutexLock lock(&mu_);
    const uint64_t n = next_++;
    tables_.emplace(n, table);
    return n;
  }
  void Leave(uint64_t n) {
    MutexLock lock(&mu_);
    tables_.erase(n);
  }
  std::shared_ptr<SegmentTable> Find(uint64_t n) {
    MutexLock lock(&mu_);
    auto it = tables_.find(n);
    return it == tables_.end() ? nullptr : it->second.lock();
  }

 private:
  Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::weak_ptr<SegmentTable>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace local_internal

class LocalTransport {
 public:
  struct Options {
    size_t max_batches = 1024;           // batches in flight (not yet collected)
    MetricsRegistry* metrics = nullptr;  // null: a private registry
  };

  LocalTransport() : LocalTransport(Options{}) {}
  explicit LocalTransport(Options options)
      : metrics_(options.metrics, "local"),
        batches_(options.max_batches, &metrics_),
        table_(std::make_shared<local_internal::SegmentTable>()),
        instance_(local_internal::Hub::Get().Join(table_)) {}
  ~LocalTransport() { local_internal::Hub::Get().Leave(instance_); }
  LocalTransport(const LocalTransport&) = delete;
  LocalTransport& operator=(const LocalTransport&) = delete;

  std::string_view Name() const { return "local"; }
  std::string LocalEndpoint() const { return absl::StrCat("local://", instance_); }
  TransportMetrics& metrics() { return metrics_; }

  absl::StatusOr<SegmentDesc> RegisterMemory(void* addr, uint64_t length, MemoryLocation location) {
    if (addr == nullptr || length == 0) {
      return absl::InvalidArgumentError("RegisterMemory needs a non-null address and length > 0");
    }
    if (location.kind == MemoryKind::kGpu) {
      return absl::FailedPreconditionError(
          "LocalTransport copies with memcpy and cannot reach GPU memory; use CudaTransport");
    }
    WriterMutexLock lock(&table_->mu);
    const SegmentId id = table_->next_id++;
    table_->segments.emplace(id, local_internal::Segment{addr, length, location});
    return SegmentDesc{id, length, location};
  }

  absl::Status UnregisterMemory(SegmentId id) {
    WriterMutexLock lock(&table_->mu);  // waits for copies holding the reader lock
    if (table_->segments.erase(id) == 0) {
      return absl::NotFoundError(absl::StrCat("segment ", id, " is not registered here"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<RemoteSegment> OpenSegment(std::string_view endpoint, SegmentId id) {
    uint64_t instance = 0;
    if (!endpoint.starts_with("local://") ||
        !absl::SimpleAtoi(AbslView(endpoint.substr(8)), &instance)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad local endpoint \"", AbslView(endpoint), "\"; expected local://<n>"));
    }
    std::shared_ptr<local_internal::SegmentTable> owner = local_internal::Hub::Get().Find(instance);
    if (owner == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("no LocalTransport at ", AbslView(endpoint), " in this process"));
    }
    RemoteSegment remote;
    {
      ReaderMutexLock lock(&owner->mu);
      auto it = owner->segments.find(id);
      if (it == owner->segments.end()) {
        return absl::NotFoundError(
            absl::StrCat("segment ", id, " is not registered at ", AbslView(endpoint)));
      }
      remote.id = id;
      remote.length = it->second.length;
      remote.location = it->second.location;
    }
    WriterMutexLock lock(&handles_mu_);
    remote.handle = next_handle_++;
    handles_.emplace(remote.handle, Handle{std::move(owner), id});
    return remote;
  }

  absl::Status CloseSegment(SegmentHandle handle) {
    WriterMutexLock lock(&handles_mu_);
    if (handles_.erase(handle) == 0) {
      return absl::NotFoundError(absl::StrCat("segment handle ", handle, " is not open"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<BatchId> Submit(std::span<const TransferRequest> requests) {
    ASSIGN_OR_RETURN(auto batch, batches_.Create(requests));
    for (size_t i = 0; i < requests.size(); ++i) {
      batches_.Settle(*batch, i, Copy(requests[i]));
    }
    return batch->id();
  }

  absl::StatusOr<BatchProgress> Poll(BatchId batch) const { return batches_.Poll(batch); }
  absl::StatusOr<BatchResult> Wait(BatchId batch, absl::Time deadline) {
    return batches_.Wait(batch, deadline);
  }
  absl::StatusOr<BatchResult> Cancel(BatchId batch) {
    // Copies finish inside Submit, so nothing is left to drain.
    return batches_.Cancel(batch, absl::Now() + absl::Seconds(1));
  }

 private:
  struct Handle {
    std::shared_ptr<local_internal::SegmentTable> owner;
    SegmentId id = 0;
  };

  absl::Status Copy(const TransferRequest& r) {
    std::shared_ptr<local_internal::SegmentTable> owner;
    SegmentId id = 0;
    {
      ReaderMutexLock lock(&handles_mu_);
      auto it = handles_.find(r.segment);
      if (it == handles_.end()) {
        return absl::NotFoundError(absl::StrCat("segment handle ", r.segment, " is not open"));
      }
      owner = it->second.owner;
      id = it->second.id;
    }
    ReaderMutexLock lock(&owner->mu);
    auto it = owner->segments.find(id);
    if (it == owner->segments.end()) {
      return absl::NotFoundError(absl::StrCat("segment ", id, " was unregistered by its owner"));
    }
    const local_internal::Segment& seg = it->second;
    RETURN_IF_ERROR(
        transport_internal::CheckRange(r.local_addr, r.remote_offset, r.length, seg.length));
    char* remote = static_cast<char*>(seg.addr) + r.remote_offset;
    if (r.op == OpCode::kRead) {
      const auto local = reinterpret_cast<uintptr_t>(r.local_addr);
      const auto from = reinterpret_cast<uintptr_t>(remote);
      if (local + r.length <= from || from + r.length <= local) {
        CopyAndDigest(r.local_addr, remote, r.length, r.chunk_digests);
      } else {  // overlapping: one memmove, then the digests
        std::memmove(r.local_addr, remote, r.length);
        if (r.chunk_digests != nullptr) DigestChunks(r.local_addr, r.length, r.chunk_digests);
      }
    } else {
      std::memmove(remote, r.local_addr, r.length);
    }
    return absl::OkStatus();
  }

  TransportMetrics metrics_;
  transport_internal::BatchTable batches_;
  std::shared_ptr<local_internal::SegmentTable> table_;
  const uint64_t instance_;
  SharedMutex handles_mu_;
  SegmentHandle next_handle_ ABSL_GUARDED_BY(handles_mu_) = 1;
  absl::flat_hash_map<SegmentHandle, Handle> handles_ ABSL_GUARDED_BY(handles_mu_);
};

static_assert(Transport<LocalTransport>);

}  // namespace mooncake::transport

#endif  // MOONCAKE_TRANSPORT_LOCAL_TRANSPORT_H_
