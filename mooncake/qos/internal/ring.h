// A FIFO ring buffer that grows by doubling up to a fixed bound and never
// shrinks, so a warmed-up queue pushes and pops without allocating.
//
// Thread-compatible. Invariants: storage size is 0 or a power of two;
// size_ <= storage size <= max_size_ rounded up to a power of two.
#ifndef MOONCAKE_QOS_INTERNAL_RING_H_
#define MOONCAKE_QOS_INTERNAL_RING_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <memory>
#include <utility>

#include "mooncake/base/assert.h"

namespace mooncake::qos_internal {

template <typename T>
class Ring {
 public:
  explicit Ring(size_t max_size) : max_size_(max_size) {
    MC_ASSERT(max_size >= 1, "a ring holds at least one element");
  }
  Ring(Ring&& other) noexcept { Steal(other); }
  Ring& operator=(Ring&& other) noexcept {
    if (this != &other) {
      Release();
      Steal(other);
    }
    return *this;
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring() { Release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == max_size_; }

  // REQUIRES: !full().
  template <typename... Args>
  void EmplaceBack(Args&&... args) {
    MC_DASSERT(!full(), "push into a full ring");
    if (size_ == capacity_) Grow();
    std::construct_at(data_ + ((head_ + size_) & (capacity_ - 1)), std::forward<Args>(args)...);
    ++size_;
  }

  // REQUIRES: !empty().
  T& Front() {
    MC_DASSERT(!empty(), "front of an empty ring");
    return data_[head_];
  }
  const T& Front() const {
    MC_DASSERT(!empty(), "front of an empty ring");
    return data_[head_];
  }

  // Moves the front element out. REQUIRES: !empty().
  T PopFront() {
    MC_DASSERT(!empty(), "pop from an empty ring");
    T* slot = data_ + head_;
    T out = std::move(*slot);
    std::destroy_at(slot);
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
    return out;
  }

 private:
  void Grow() {
    const size_t new_capacity =
        capacity_ == 0 ? std::min<size_t>(16, std::bit_ceil(max_size_)) : capacity_ * 2;
    MC_ASSERT(new_capacity > size_, "ring growth overflow");
    T* fresh = alloc_.allocate(new_capacity);
    for (size_t i = 0; i < size_; ++i) {
      T* from = data_ + ((head_ + i) & (capacity_ - 1));
      std::construct_at(fresh + i, std::move(*from));
      std::destroy_at(from);
    }
    if (data_ != nullptr) alloc_.deallocate(data_, capacity_);
    data_ = fresh;
    capacity_ = new_capacity;
    head_ = 0;
  }

  void Release() {
    while (!empty()) {
      std::destroy_at(data_ + head_);
      head_ = (head_ + 1) & (capacity_ - 1);
      --size_;
    }
    if (data_ != nullptr) alloc_.deallocate(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
  }

  void Steal(Ring& other) {
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    head_ = std::exchange(other.head_, 0);
    size_ = std::exchange(other.size_, 0);
    max_size_ = other.max_size_;
  }

  [[no_unique_address]] std::allocator<T> alloc_;
  T* data_ = nullptr;
  size_t capacity_ = 0;
  size_t head_ = 0;
  size_t size_ = 0;
  size_t max_size_ = 1;
};

}  // namespace mooncake::qos_internal

#endif  // MOONCAKE_QOS_INTERNAL_RING_H_
