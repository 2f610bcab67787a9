// BufferRegistry: the caller memory regions a client was told about
// (Client::RegisterBuffer). Non-overlapping [start, end) ranges by address.
//
// Thread-safety: every method may be called concurrently (one mutex).
#ifndef MOONCAKE_STORE_CLIENT_INTERNAL_BUFFER_REGISTRY_H_
#define MOONCAKE_STORE_CLIENT_INTERNAL_BUFFER_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::client_internal {

class BufferRegistry {
 public:
  absl::Status Register(const void* addr, size_t length) {
    const auto start = reinterpret_cast<uintptr_t>(addr);
    if (addr == nullptr || length == 0 || start + length < start) {
      return absl::InvalidArgumentError("RegisterBuffer needs a non-null address and length > 0");
    }
    MutexLock lock(&mu_);
    auto next = ranges_.lower_bound(start);
    if (next != ranges_.end() && next->first < start + length) return Overlap(start);
    if (next != ranges_.begin() && std::prev(next)->second > start) return Overlap(start);
    ranges_.emplace(start, start + length);
    return absl::OkStatus();
  }

  absl::Status Unregister(const void* addr) {
    MutexLock lock(&mu_);
    if (ranges_.erase(reinterpret_cast<uintptr_t>(addr)) == 0) {
      return absl::NotFoundError("no registered buffer starts at this address");
    }
    return absl::OkStatus();
  }

  // Whether [addr, addr + length) lies inside one registered buffer.
  bool Contains(const void* addr, size_t length) const {
    const std::optional<uint64_t> room = RoomFrom(addr);
    return room.has_value() && length <= *room;
  }

  // Bytes from `addr` to the end of the registered buffer holding it;
  // nullopt when no registered buffer holds it.
  std::optional<uint64_t> RoomFrom(const void* addr) const {
    const auto start = reinterpret_cast<uintptr_t>(addr);
    MutexLock lock(&mu_);
    auto it = ranges_.upper_bound(start);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    MC_DASSERT(it->first <= start, "upper_bound went wrong");
    if (start >= it->second) return std::nullopt;
    return it->second - start;
  }

  size_t size() const {
    MutexLock lock(&mu_);
    return ranges_.size();
  }

 private:
  static absl::Status Overlap(uintptr_t start) {
    return absl::AlreadyExistsError(
        absl::StrCat("buffer at 0x", absl::Hex(start), " overlaps a registered buffer"));
  }

  mutable Mutex mu_;
  std::map<uintptr_t, uintptr_t> ranges_ ABSL_GUARDED_BY(mu_);  // start -> end
};

}  // namespace mooncake::client_internal

#endif  // MOONCAKE_STORE_CLIENT_INTERNAL_BUFFER_REGISTRY_H_
