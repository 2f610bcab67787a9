// InternedString: an immutable string stored once per process; a copy is a
// 4-byte id. For identifiers that millions of records repeat from a small set
// (a worker's id, a host's id, a tenant's name): each record then holds 4
// bytes instead of its own heap copy (or an 8-byte pointer).
//
//   InternedString w("worker-7");   // interns (a hash lookup, a lock)
//   InternedString v = w;           // an id copy
//   w == v;                         // an id comparison
//   w == "worker-7";                // a string comparison
//   const std::string& s = w;       // also std::string_view; .str(), .view()
//
// Each distinct value stays until the process exits: intern only values from
// a bounded set (names the operator configured, ids of the cluster's
// processes), never arbitrary client keys. A process holds at most
// kMaxValues distinct values (interning one more aborts). `interned_bytes()`
// reports what the pool holds.
//
// Reading a value (str(), view(), ...) takes no lock: ids index a table of
// fixed chunks that never move, and a chunk and its slot are written before
// the id that names them is handed out.
//
// Thread-safety: InternedString is a value (const after construction); the
// pool is safe to use from any thread. Looking up a value already interned
// takes the pool's lock shared.
#ifndef MOONCAKE_BASE_INTERNED_STRING_H_
#define MOONCAKE_BASE_INTERNED_STRING_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/node_hash_map.h"
#include "absl/hash/hash.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake {

class InternedString {
 public:
  // Distinct non-empty values a process may intern.
  static constexpr uint32_t kChunkLog2 = 10;
  static constexpr uint32_t kChunk = 1u << kChunkLog2;
  static constexpr uint32_t kMaxChunks = 4096;
  static constexpr uint32_t kMaxValues = kChunk * kMaxChunks - 1;  // id 0 is ""

  InternedString() = default;
  // Implicit, so that a std::string field can become an InternedString and
  // keep its assignments from strings.
  InternedString(std::string_view s) : id_(s.empty() ? 0 : Pool().Intern(s)) {}
  InternedString(const std::string& s) : InternedString(std::string_view(s)) {}
  InternedString(const char* s) : InternedString(std::string_view(s)) {}

  const std::string& str() const {
    return id_ == 0 ? Empty() : *chunks_[id_ >> kChunkLog2][id_ & (kChunk - 1)];
  }
  std::string_view view() const { return str(); }
  operator const std::string&() const { return str(); }
  operator std::string_view() const { return str(); }

  bool empty() const { return id_ == 0; }
  void clear() { id_ = 0; }
  size_t size() const { return str().size(); }
  const char* data() const { return str().data(); }
  const char* c_str() const { return str().c_str(); }

  // Equal values share one id, so equality is an id comparison.
  friend bool operator==(const InternedString& a, const InternedString& b) {
    return a.id_ == b.id_;
  }
  friend bool operator==(const InternedString& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(const InternedString& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const InternedString& a, const char* b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const InternedString& a, const InternedString& b) {
    return a.view() <=> b.view();
  }
  // Hashes as the string does, so maps keyed by std::string can look one up.
  template <typename H>
  friend H AbslHashValue(H h, const InternedString& s) {
    return H::combine(std::move(h), AbslView(s.view()));
  }
  friend std::ostream& operator<<(std::ostream& os, const InternedString& s) {
    return os << s.view();
  }

  // Bytes of distinct values the process has interned (their characters).
  static uint64_t interned_bytes() { return Pool().bytes(); }
  static size_t interned_count() { return Pool().count(); }

 private:
  class InternPool {
   public:
    uint32_t Intern(std::string_view s) {
      {
        ReaderMutexLock lock(&mu_);
        auto it = ids_.find(AbslView(s));
        if (it != ids_.end()) return it->second;
      }
      WriterMutexLock lock(&mu_);
      auto [it, inserted] = ids_.try_emplace(std::string(s), 0);
      if (!inserted) return it->second;
      MC_ASSERT(ids_.size() <= kMaxValues, "InternedString: too many distinct values");
      const auto id = static_cast<uint32_t>(ids_.size());  // 1, 2, ...
      const std::string**& chunk = chunks_[id >> kChunkLog2];
      if (chunk == nullptr) chunk = new const std::string*[kChunk]();  // never freed
      // node_hash_map: the key never moves. Written before `id` is returned,
      // so whoever is handed the id (through the caller's own
      // synchronization) reads the slot's final value.
      chunk[id & (kChunk - 1)] = &it->first;
      it->second = id;
      bytes_ += s.size();
      return id;
    }
    uint64_t bytes() const {
      ReaderMutexLock lock(&mu_);
      return bytes_;
    }
    size_t count() const {
      ReaderMutexLock lock(&mu_);
      return ids_.size();
    }

   private:
    mutable SharedMutex mu_;
    absl::node_hash_map<std::string, uint32_t> ids_ ABSL_GUARDED_BY(mu_);
    uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  };

  static InternPool& Pool() {
    static InternPool* pool = new InternPool;  // never destroyed: values outlive statics
    return *pool;
  }
  static const std::string& Empty() {
    static const std::string* empty = new std::string;
    return *empty;
  }

  // id -> value: chunk id >> kChunkLog2, slot id & (kChunk - 1). Constant-
  // initialized (no guard on the read path); written under the pool's lock.
  static inline constinit const std::string** chunks_[kMaxChunks] = {};

  uint32_t id_ = 0;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_INTERNED_STRING_H_
