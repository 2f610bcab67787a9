// AnyTransport: a type-erased Transport, so the Router can hold transports of
// different types in one ordered list. One virtual call per operation; the
// Router calls it per sub-batch, not per byte.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_ANY_TRANSPORT_H_
#define MOONCAKE_TRANSPORT_INTERNAL_ANY_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/transport.h"

namespace mooncake::transport_internal {

class AnyTransport {
 public:
  virtual ~AnyTransport() = default;
  virtual std::string_view Name() const = 0;
  virtual std::string LocalEndpoint() const = 0;
  virtual absl::StatusOr<transport::SegmentDesc> RegisterMemory(
      void* addr, uint64_t length, transport::MemoryLocation location) = 0;
  virtual absl::Status UnregisterMemory(transport::SegmentId id) = 0;
  virtual absl::StatusOr<transport::RemoteSegment> OpenSegment(std::string_view endpoint,
                                                               transport::SegmentId id) = 0;
  virtual absl::Status CloseSegment(transport::SegmentHandle handle) = 0;
  virtual absl::StatusOr<transport::BatchId> Submit(
      std::span<const transport::TransferRequest> requests) = 0;
  // Submit for a caller that Waits for the batch next (a transport may then
  // do the work on the waiting thread); Submit where a model has no such path.
  virtual absl::StatusOr<transport::BatchId> SubmitForWait(
      std::span<const transport::TransferRequest> requests) = 0;
  virtual absl::StatusOr<transport::BatchProgress> Poll(transport::BatchId batch) = 0;
  virtual absl::StatusOr<transport::BatchResult> Wait(transport::BatchId batch,
                                                      absl::Time deadline) = 0;
  virtual absl::StatusOr<transport::BatchResult> Cancel(transport::BatchId batch) = 0;
};

template <transport::Transport T>
class AnyTransportOf final : public AnyTransport {
 public:
  explicit AnyTransportOf(std::unique_ptr<T> t) : t_(std::move(t)) {
    MC_ASSERT(t_ != nullptr, "AnyTransportOf needs a transport");
  }
  std::string_view Name() const override { return t_->Name(); }
  std::string LocalEndpoint() const override { return t_->LocalEndpoint(); }
  absl::StatusOr<transport::SegmentDesc> RegisterMemory(
      void* addr, uint64_t length, transport::MemoryLocation location) override {
    return t_->RegisterMemory(addr, length, location);
  }
  absl::Status UnregisterMemory(transport::SegmentId id) override {
    return t_->UnregisterMemory(id);
  }
  absl::StatusOr<transport::RemoteSegment> OpenSegment(std::string_view endpoint,
                                                       transport::SegmentId id) override {
    return t_->OpenSegment(endpoint, id);
  }
  absl::Status CloseSegment(transport::SegmentHandle handle) override {
    return t_->CloseSegment(handle);
  }
  absl::StatusOr<transport::BatchId> Submit(
      std::span<const transport::TransferRequest> requests) override {
    return t_->Submit(requests);
  }
  absl::StatusOr<transport::BatchId> SubmitForWait(
      std::span<const transport::TransferRequest> requests) override {
    return transport::SubmitForWaitOrSubmit(*t_, requests);
  }
  absl::StatusOr<transport::BatchProgress> Poll(transport::BatchId batch) override {
    return t_->Poll(batch);
  }
  absl::StatusOr<transport::BatchResult> Wait(transport::BatchId batch,
                                              absl::Time deadline) override {
    return t_->Wait(batch, deadline);
  }
  absl::StatusOr<transport::BatchResult> Cancel(transport::BatchId batch) override {
    return t_->Cancel(batch);
  }

 private:
  std::unique_ptr<T> t_;
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_ANY_TRANSPORT_H_
