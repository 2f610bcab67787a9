// MetadataStore: the in-memory key/value store behind the HTTP metadata
// server (metadata_server.h), where transfer engines publish their segment
// descriptors and find each other's. Keys and values are arbitrary bytes;
// a put replaces. Nothing is persisted: a restarted server starts empty and
// the engines publish again.
//
// Bounds (MetadataStoreOptions): one value at most max_value_bytes
// (OUT_OF_RANGE over it); all keys and values together at most
// max_total_bytes (RESOURCE_EXHAUSTED for a put that would pass it; a
// replacement counts the difference); a key at most max_key_bytes and not
// empty (INVALID_ARGUMENT).
//
// Thread-safety: every method from any thread (one mutex). Complexity: O(1)
// expected per call plus copying the value.
#ifndef MOONCAKE_STORE_NODE_METADATA_STORE_H_
#define MOONCAKE_STORE_NODE_METADATA_STORE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::node {

struct MetadataStoreOptions {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{16} << 20;
  uint64_t max_total_bytes = uint64_t{256} << 20;  // keys + values
};

struct MetadataStoreStats {
  uint64_t keys = 0;
  uint64_t bytes = 0;  // keys + values
};

class MetadataStore {
 public:
  // REQUIRES: every limit > 0 and max_key_bytes + max_value_bytes <= max_total_bytes
  // (a single largest entry fits).
  explicit MetadataStore(MetadataStoreOptions options = {}) : options_(options) {
    MC_ASSERT(options_.max_key_bytes > 0 && options_.max_value_bytes > 0,
              "MetadataStoreOptions: limits must be > 0");
    MC_ASSERT(options_.max_key_bytes + options_.max_value_bytes <= options_.max_total_bytes,
              "MetadataStoreOptions: the largest entry must fit max_total_bytes");
  }
  MetadataStore(const MetadataStore&) = delete;
  MetadataStore& operator=(const MetadataStore&) = delete;

  // The value stored under `key`. Errors: NOT_FOUND, INVALID_ARGUMENT (key).
  absl::StatusOr<std::string> Get(std::string_view key) const {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
    MutexLock lock(&mu_);
    auto it = map_.find(AbslView(key));
    if (it == map_.end()) return NotFound(key);
    return it->second;
  }

  // Stores `value` under `key`, replacing what was there. Errors:
  // INVALID_ARGUMENT (key), OUT_OF_RANGE (value over max_value_bytes),
  // RESOURCE_EXHAUSTED (the store would pass max_total_bytes); the store is
  // unchanged on error.
  absl::Status Put(std::string key, std::string value) {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
    if (value.size() > options_.max_value_bytes) {
      return absl::OutOfRangeError(absl::StrCat("the value is ", value.size(),
                                                " bytes; the limit is ", options_.max_value_bytes));
    }
    MutexLock lock(&mu_);
    auto it = map_.find(key);
    const uint64_t old_bytes = it == map_.end() ? 0 : key.size() + it->second.size();
    const uint64_t new_bytes = key.size() + value.size();
    MC_DASSERT(old_bytes <= bytes_, "accounting below an entry's size");
    if (bytes_ - old_bytes + new_bytes > options_.max_total_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("the metadata store holds ", bytes_,
                                                       " bytes; this put would pass its ",
                                                       options_.max_total_bytes, "-byte limit"));
    }
    bytes_ = bytes_ - old_bytes + new_bytes;
    if (it == map_.end()) {
      map_.emplace(std::move(key), std::move(value));
    } else {
      it->second = std::move(value);
    }
    MC_DASSERT(bytes_ <= options_.max_total_bytes, "over the total after a put");
    return absl::OkStatus();
  }

  // Removes `key`. Errors: NOT_FOUND, INVALID_ARGUMENT (key).
  absl::Status Delete(std::string_view key) {
    if (absl::Status s = CheckKey(key); !s.ok()) return s;
    MutexLock lock(&mu_);
    auto it = map_.find(AbslView(key));
    if (it == map_.end()) return NotFound(key);
    const uint64_t entry = it->first.size() + it->second.size();
    MC_DASSERT(entry <= bytes_, "accounting below an entry's size");
    bytes_ -= entry;
    map_.erase(it);
    return absl::OkStatus();
  }

  MetadataStoreStats stats() const {
    MutexLock lock(&mu_);
    return {map_.size(), bytes_};
  }

  const MetadataStoreOptions& options() const { return options_; }

 private:
  absl::Status CheckKey(std::string_view key) const {
    if (key.empty()) return absl::InvalidArgumentError("the key is empty");
    if (key.size() > options_.max_key_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the key is ", key.size(), " bytes; the limit is ", options_.max_key_bytes));
    }
    return absl::OkStatus();
  }

  static absl::Status NotFound(std::string_view key) {
    return absl::NotFoundError(absl::StrCat("no metadata under \"", AbslView(key), "\""));
  }

  const MetadataStoreOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of keys' and values' sizes in map_
};

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_METADATA_STORE_H_
