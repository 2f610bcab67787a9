// InternedString: an immutable string stored once per process; a copy is one
// pointer. For identifiers that millions of records repeat from a small set
// (a worker's id, a host's id, a tenant's name): each record then holds 8
// bytes instead of its own heap copy.
//
//   InternedString w("worker-7");   // interns (a hash lookup, a lock)
//   InternedString v = w;           // a pointer copy
//   w == v;                         // a pointer comparison
//   w == "worker-7";                // a string comparison
//   const std::string& s = w;       // also std::string_view; .str(), .view()
//
// Each distinct value stays until the process exits: intern only values from
// a bounded set (names the operator configured, ids of the cluster's
// processes), never arbitrary client keys. `interned_bytes()` reports what the
// pool holds.
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

#include "absl/container/node_hash_set.h"
#include "absl/hash/hash.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/mutex.h"

namespace mooncake {

class InternedString {
 public:
  InternedString() : p_(&Empty()) {}
  // Implicit, so that a std::string field can become an InternedString and
  // keep its assignments from strings.
  InternedString(std::string_view s) : p_(s.empty() ? &Empty() : Pool().Intern(s)) {}
  InternedString(const std::string& s) : InternedString(std::string_view(s)) {}
  InternedString(const char* s) : InternedString(std::string_view(s)) {}

  const std::string& str() const { return *p_; }
  std::string_view view() const { return *p_; }
  operator const std::string&() const { return *p_; }
  operator std::string_view() const { return *p_; }

  bool empty() const { return p_->empty(); }
  void clear() { p_ = &Empty(); }
  size_t size() const { return p_->size(); }
  const char* data() const { return p_->data(); }
  const char* c_str() const { return p_->c_str(); }

  // Equal values share one pointer, so equality is a pointer comparison.
  friend bool operator==(const InternedString& a, const InternedString& b) { return a.p_ == b.p_; }
  friend bool operator==(const InternedString& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(const InternedString& a, const std::string& b) { return *a.p_ == b; }
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
    const std::string* Intern(std::string_view s) {
      {
        ReaderMutexLock lock(&mu_);
        auto it = set_.find(AbslView(s));
        if (it != set_.end()) return &*it;
      }
      WriterMutexLock lock(&mu_);
      auto [it, inserted] = set_.emplace(s);
      if (inserted) bytes_ += s.size();
      return &*it;  // node_hash_set: the element never moves
    }
    uint64_t bytes() const {
      ReaderMutexLock lock(&mu_);
      return bytes_;
    }
    size_t count() const {
      ReaderMutexLock lock(&mu_);
      return set_.size();
    }

   private:
    mutable SharedMutex mu_;
    absl::node_hash_set<std::string> set_ ABSL_GUARDED_BY(mu_);
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

  const std::string* p_;
};

}  // namespace mooncake

#endif  // MOONCAKE_BASE_INTERNED_STRING_H_
