// LockedAllocator<A>: any Allocator made safe to share between threads by
// one mutex around every call.
//
//   LockedAllocator<TlsfAllocator> shared(TlsfAllocator(TlsfOptions{...}));
//   // any thread:
//   std::optional<Allocation> a = shared.allocate(size, 64);
//   shared.free(*a);
//
// Thread-safety: every method may be called concurrently. Each call holds the
// mutex for the inner call only, so complexity is the inner model's plus the
// lock. It is neither copyable nor movable (the mutex is not); construct it
// in place. An allocation freed through the wrapper must have come from it.
#ifndef MOONCAKE_ALLOC_LOCKED_ALLOCATOR_H_
#define MOONCAKE_ALLOC_LOCKED_ALLOCATOR_H_

#include <concepts>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "mooncake/alloc/allocator.h"
#include "mooncake/alloc/internal/archetype.h"
#include "mooncake/base/mutex.h"

namespace mooncake::alloc {

// An Allocator that can also reserve a given range, for rebuilding a known
// layout (TlsfAllocator::Claim): Claim(offset, size) reserves exactly
// [offset, offset + size rounded up to the model's granule) when all of it is
// free, returning an Allocation free() accepts; std::nullopt, with nothing
// changed, otherwise.
template <typename A>
concept ClaimableAllocator = Allocator<A> && requires(A& a, uint64_t offset, uint64_t size) {
  { a.Claim(offset, size) } -> std::same_as<std::optional<Allocation>>;
};

template <Allocator A>
class LockedAllocator {
 public:
  explicit LockedAllocator(A inner) : inner_(std::move(inner)) {}

  LockedAllocator(const LockedAllocator&) = delete;
  LockedAllocator& operator=(const LockedAllocator&) = delete;

  [[nodiscard]] std::optional<Allocation> allocate(uint64_t size, uint64_t alignment) {
    MutexLock lock(&mu_);
    return inner_.allocate(size, alignment);
  }

  // A's Claim under the lock; only when A has one.
  [[nodiscard]] std::optional<Allocation> Claim(uint64_t offset,
                                                uint64_t size) requires ClaimableAllocator<A> {
    MutexLock lock(&mu_);
    return inner_.Claim(offset, size);
  }

  void free(const Allocation& allocation) {
    MutexLock lock(&mu_);
    inner_.free(allocation);
  }

  AllocatorStats stats() const {
    MutexLock lock(&mu_);
    return inner_.stats();
  }

  // Runs fn(A&) under the lock, for calls specific to the model
  // (CheckInvariants, Owns, ...). fn must not call back into this wrapper.
  template <typename Fn>
  std::invoke_result_t<Fn, A&> WithLock(Fn&& fn) {
    MutexLock lock(&mu_);
    return std::forward<Fn>(fn)(inner_);
  }

 private:
  mutable Mutex mu_;
  A inner_ ABSL_GUARDED_BY(mu_);
};

static_assert(Allocator<LockedAllocator<alloc_internal::AllocatorArchetype>>);
// Claim is forwarded only when the inner model has one.
static_assert(!ClaimableAllocator<LockedAllocator<alloc_internal::AllocatorArchetype>>);

}  // namespace mooncake::alloc

#endif  // MOONCAKE_ALLOC_LOCKED_ALLOCATOR_H_
