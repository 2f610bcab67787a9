// RegisteredBuffers: the memory regions a DistributedStore caller registered
// (register_buffer), so that *_from and *_into calls can refuse an address
// outside them with an error instead of reading or writing stray memory.
//
// Thread-safety: every method may be called concurrently (one mutex).
// Complexity: O(log n) in the number of registered regions.
#ifndef MOONCAKE_STORE_COMPAT_REGISTERED_BUFFERS_H_
#define MOONCAKE_STORE_COMPAT_REGISTERED_BUFFERS_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mooncake::compat {

class RegisteredBuffers {
 public:
  // false: empty, wraps around, or overlaps a registered region.
  bool Add(uintptr_t ptr, uint64_t size) {
    if (size == 0 || ptr + size < ptr) return false;
    absl::MutexLock lock(&mu_);
    auto next = regions_.lower_bound(ptr);
    if (next != regions_.end() && next->first < ptr + size) return false;
    if (next != regions_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > ptr) return false;
    }
    regions_.emplace(ptr, size);
    return true;
  }

  // false unless `ptr` starts a registered region.
  bool Remove(uintptr_t ptr) {
    absl::MutexLock lock(&mu_);
    return regions_.erase(ptr) == 1;
  }

  // [ptr, ptr + size) lies inside one registered region.
  bool Contains(uintptr_t ptr, uint64_t size) const {
    std::optional<uint64_t> room = RoomFrom(ptr);
    return room.has_value() && size <= *room;
  }

  // Bytes from `ptr` to the end of the registered region holding it.
  std::optional<uint64_t> RoomFrom(uintptr_t ptr) const {
    absl::MutexLock lock(&mu_);
    auto it = regions_.upper_bound(ptr);
    if (it == regions_.begin()) return std::nullopt;
    --it;
    if (ptr >= it->first + it->second) return std::nullopt;
    return it->first + it->second - ptr;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<uintptr_t, uint64_t> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_REGISTERED_BUFFERS_H_
