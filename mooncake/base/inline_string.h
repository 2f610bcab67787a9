// InlineString: an immutable string in 24 bytes that keeps values of up to 23
// bytes inside itself and longer ones in one heap block. For map keys of which
// millions are short: std::string (32 bytes) keeps at most 15 bytes inline, so
// an 18-byte block key costs it a 32-byte heap chunk more.
//
//   InlineString k(key);                 // copies key (inline if <= 23 bytes)
//   std::string_view v = k;              // also .view(), .data(), .size()
//   absl::node_hash_map<InlineString, V, InlineStringHash, InlineStringEq> m;
//   m.find(std::string_view("a"));       // lookups by any string type, no copy
//
// Borrowed keys: InlineString::Borrow(s) refers to s's bytes without copying
// them, for a lookup through an API that takes `const InlineString&` (a
// policy's Touch or Erase). A copy of a borrowed key owns its bytes (copies
// are always deep), so a container that stores a key it was handed by const
// reference never keeps the borrowed pointer; only a move passes it on. `s`
// must outlive the borrowed key and every key moved from it.
//
// Layout: bytes [0, 23) hold an inline value and byte 23 its length (0..23);
// a heap or borrowed value has its pointer in bytes [0, 8), its length in
// [8, 16) and kHeap or kBorrowed in byte 23. InlineStringHash hashes every
// string type as absl::Hash<absl::string_view> does, so heterogeneous lookups
// agree.
//
// Thread-safety: a value type; const methods may run concurrently.
#ifndef MOONCAKE_BASE_INLINE_STRING_H_
#define MOONCAKE_BASE_INLINE_STRING_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "mooncake/base/absl_compat.h"

namespace mooncake {

class InlineString {
 public:
  static constexpr size_t kInlineMax = 23;

  InlineString() noexcept { buf_[kTag] = 0; }
  explicit InlineString(std::string_view s) { Init(s.data(), s.size()); }
  explicit InlineString(absl::string_view s) { Init(s.data(), s.size()); }
  explicit InlineString(const std::string& s) { Init(s.data(), s.size()); }
  explicit InlineString(const char* s) : InlineString(std::string_view(s)) {}

  InlineString(const InlineString& o) { Init(o.data(), o.size()); }
  InlineString(InlineString&& o) noexcept {
    std::memcpy(buf_, o.buf_, sizeof(buf_));
    o.buf_[kTag] = 0;
  }
  InlineString& operator=(const InlineString& o) {
    if (this != &o) {
      InlineString copy(o);
      Swap(copy);
    }
    return *this;
  }
  InlineString& operator=(InlineString&& o) noexcept {
    if (this != &o) {
      Free();
      std::memcpy(buf_, o.buf_, sizeof(buf_));
      o.buf_[kTag] = 0;
    }
    return *this;
  }
  ~InlineString() { Free(); }

  // A key that refers to `s` (see the file comment); no copy, no allocation.
  static InlineString Borrow(std::string_view s) {
    InlineString k;
    k.SetPointer(s.data(), s.size(), kBorrowed);
    return k;
  }

  bool on_heap() const { return static_cast<uint8_t>(buf_[kTag]) == kHeap; }
  bool borrowed() const { return static_cast<uint8_t>(buf_[kTag]) == kBorrowed; }
  const char* data() const { return Pointed() ? HeapPtr() : buf_; }
  size_t size() const { return Pointed() ? HeapSize() : static_cast<uint8_t>(buf_[kTag]); }
  bool empty() const { return size() == 0; }
  std::string_view view() const { return {data(), size()}; }
  std::string str() const { return std::string(data(), size()); }
  operator std::string_view() const { return view(); }
  bool starts_with(std::string_view prefix) const { return view().starts_with(prefix); }

  void Swap(InlineString& o) noexcept {
    char tmp[sizeof(buf_)];
    std::memcpy(tmp, buf_, sizeof(buf_));
    std::memcpy(buf_, o.buf_, sizeof(buf_));
    std::memcpy(o.buf_, tmp, sizeof(buf_));
  }

  friend bool operator==(const InlineString& a, const InlineString& b) {
    return a.view() == b.view();
  }
  friend bool operator==(const InlineString& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(const InlineString& a, const std::string& b) {
    return a.view() == std::string_view(b);
  }
  friend bool operator==(const InlineString& a, const char* b) {
    return a.view() == std::string_view(b);
  }
  friend auto operator<=>(const InlineString& a, const InlineString& b) {
    return a.view() <=> b.view();
  }
  friend auto operator<=>(const InlineString& a, std::string_view b) { return a.view() <=> b; }
  friend auto operator<=>(const InlineString& a, const std::string& b) {
    return a.view() <=> std::string_view(b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const InlineString& s) {
    return H::combine(std::move(h), absl::string_view(s.data(), s.size()));
  }
  friend std::ostream& operator<<(std::ostream& os, const InlineString& s) {
    return os << s.view();
  }

 private:
  static constexpr size_t kTag = 23;
  static constexpr uint8_t kHeap = 0xFF;
  static constexpr uint8_t kBorrowed = 0xFE;

  bool Pointed() const { return static_cast<uint8_t>(buf_[kTag]) >= kBorrowed; }
  void SetPointer(const char* p, size_t n, uint8_t tag) {
    const uint64_t n64 = n;
    std::memcpy(buf_, &p, sizeof(p));
    std::memcpy(buf_ + 8, &n64, sizeof(n64));
    buf_[kTag] = static_cast<char>(tag);
  }

  void Init(const char* p, size_t n) {
    if (n <= kInlineMax) {
      if (n > 0) std::memcpy(buf_, p, n);
      buf_[kTag] = static_cast<char>(n);
      return;
    }
    char* heap = new char[n];
    std::memcpy(heap, p, n);
    SetPointer(heap, n, kHeap);
  }
  void Free() {
    if (on_heap()) delete[] HeapPtr();
    buf_[kTag] = 0;
  }
  char* HeapPtr() const {  // the heap block, or the borrowed bytes
    char* p;
    std::memcpy(&p, buf_, sizeof(p));
    return p;
  }
  size_t HeapSize() const {
    uint64_t n;
    std::memcpy(&n, buf_ + 8, sizeof(n));
    return static_cast<size_t>(n);
  }

  alignas(8) char buf_[24];
};

static_assert(sizeof(InlineString) == 24, "InlineString is three words");

namespace inline_string_internal {
inline absl::string_view ViewOf(absl::string_view s) { return s; }
inline absl::string_view ViewOf(std::string_view s) { return AbslView(s); }
inline absl::string_view ViewOf(const std::string& s) { return s; }
inline absl::string_view ViewOf(const char* s) { return s; }
inline absl::string_view ViewOf(const InlineString& s) { return {s.data(), s.size()}; }
}  // namespace inline_string_internal

// Transparent hash and equality over InlineString and every string type, for
// absl's hash containers (lookups without building a key).
struct InlineStringHash {
  using is_transparent = void;
  template <typename S>
  size_t operator()(const S& s) const {
    return absl::Hash<absl::string_view>()(inline_string_internal::ViewOf(s));
  }
};
struct InlineStringEq {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return inline_string_internal::ViewOf(a) == inline_string_internal::ViewOf(b);
  }
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_INLINE_STRING_H_
