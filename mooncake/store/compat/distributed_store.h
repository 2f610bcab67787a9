// DistributedStore: Mooncake Store's client API (`MooncakeDistributedStore`
// in its Python module `mooncake.store`) over this project's store, with
// Mooncake's names, argument order and integer return codes
// (return_codes.h). The Python binding (python/store_binding.cc) is a thin
// layer over this class; engines written in C++ use it directly.
//
//   compat::DistributedStore store;
//   compat::StoreConfig config;                  // or ResolveStoreConfig(...)
//   config.master_server_addr = "127.0.0.1:50051";
//   config.global_segment_size = 64 << 20;       // this client's share of the pool
//   if (store.Setup(config) != 0) ...
//   store.Put("key", value, {});                 // 0 on success
//   std::string v = store.Get("key");            // "" on a miss
//   store.Close();
//
// Setup builds a ClientState (client_state.h: the master connection, this
// client's segment, the Client, the staging buffer) and Close tears it down.
// put/upsert/put_parts/put_batch copy values into the staging buffer of
// local_buffer_size bytes (with 0 bytes, or a value larger than what is free,
// a put returns kBufferOverflow and stores nothing); the *_from / *_into calls
// move bytes straight between the caller's registered buffers and the workers.
// SetupDummy attaches to a mooncake_client daemon on this host instead: no
// segment of its own; puts prefer the daemon's segment, reached through SHM.
//
// Semantics that differ from this store's Client, as Mooncake has them:
//   - put of an existing key returns 0 and keeps the stored value (upsert
//     replaces it);
//   - remove(key, force=false) of an object with a live read lease (a get in
//     the last --default_kv_lease_ttl ms by any client that still caches it)
//     or a pin returns kObjectHasLease; force removes it anyway;
//   - get of a missing key returns "" (get_into and friends: kObjectNotFound).
//
// Beyond Mooncake: ReplicateConfig.group_ids makes puts join object groups
// (replicate_config.h), CommitGroup/RemoveGroup act on a group, Clone and
// ClonePrefix make keys that share stored bytes, QueryObjects lists objects by
// their TensorMeta, and BatchPutTensor/GetObjects carry TensorMeta for the
// tensor calls (tensor_meta.h).
//
// Errors are return codes, never exceptions: calls before Setup or after
// Close return kInternalError; a bad key kInvalidKey; a master that does not
// answer kRpcFail within ClientOptions::rpc_timeout_ms (kRpcTimeoutMs).
//
// Thread-safety: every method may be called concurrently. Setup, SetupDummy
// and Close take the state lock exclusively and wait for calls in flight.
#ifndef MOONCAKE_STORE_COMPAT_DISTRIBUTED_STORE_H_
#define MOONCAKE_STORE_COMPAT_DISTRIBUTED_STORE_H_

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/alloc/locked_allocator.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/compat/client_state.h"
#include "mooncake/store/compat/replica_task.h"
#include "mooncake/store/compat/replicate_config.h"
#include "mooncake/store/compat/return_codes.h"
#include "mooncake/store/compat/store_config.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake::compat {

// An object read by get_buffer: owns its bytes.
class BufferHandle {
 public:
  explicit BufferHandle(std::string bytes) : bytes_(std::move(bytes)) {}
  const char* data() const { return bytes_.data(); }
  uintptr_t ptr() const { return reinterpret_cast<uintptr_t>(bytes_.data()); }
  size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

// One key's ranges in get_into_ranges: dst_offsets[i], src_offsets[i] and
// sizes[i] describe range i; `shape_ok` false when the caller's lists did not
// line up (every range of the key then fails with kInvalidParams).
struct KeyRanges {
  std::string key;
  std::vector<uint64_t> dst_offsets;
  std::vector<uint64_t> src_offsets;
  std::vector<uint64_t> sizes;
  bool shape_ok = true;
};
struct BufferRanges {
  uintptr_t buffer = 0;
  std::vector<KeyRanges> keys;
  bool shape_ok = true;  // false: every range of this buffer fails
};

class DistributedStore {
 public:
  using ClientT = client::Client<rpc::TcpChannel>;
  using WorkerT = worker::Worker<rpc::TcpChannel>;

  DistributedStore() = default;
  DistributedStore(const DistributedStore&) = delete;
  DistributedStore& operator=(const DistributedStore&) = delete;
  ~DistributedStore() { Close(); }

  // ---- Life cycle -------------------------------------------------------------

  // 0, or a negative code (a second Setup without Close: kInvalidParams).
  // The reason for a failure is in last_error().
  int Setup(const StoreConfig& config) {
    WriterMutexLock lock(&mu_);
    if (state_ != nullptr) return Fail(kInvalidParams, "setup: already set up; close() first");
    auto s = OpenClient(config);
    if (!s.ok()) return Fail(ToMooncakeCode(s.status()), std::string(s.status().message()));
    state_ = std::move(*s);
    return kOk;
  }

  // Attaches to the mooncake_client daemon at `server_address` ("host:port").
  int SetupDummy(uint64_t mem_pool_size, uint64_t local_buffer_size,
                 const std::string& server_address) {
    WriterMutexLock lock(&mu_);
    if (state_ != nullptr) return Fail(kInvalidParams, "setup_dummy: already set up");
    auto s = OpenDummyClient(mem_pool_size, local_buffer_size, server_address);
    if (!s.ok()) return Fail(ToMooncakeCode(s.status()), std::string(s.status().message()));
    state_ = std::move(*s);
    return kOk;
  }

  // Unmounts this client's segment (objects stored only there are gone) and
  // drops the connection. 0; again (or before Setup) also 0.
  int Close() {
    std::unique_ptr<ClientState> s;
    {
      WriterMutexLock lock(&mu_);
      s = std::move(state_);
    }
    if (s == nullptr) return kOk;
    s->client.reset();
    if (s->worker != nullptr) s->worker->Shutdown().IgnoreError();
    s->worker.reset();
    s->daemon_channel.reset();
    s->channel.reset();
    return kOk;
  }

  // 0 when the master answers and this client's segment (if any) heartbeats.
  int HealthCheck() {
    return WithClient([&](ClientState& s) -> int {
      auto r = s.client->Exists(std::string_view("\x01health", 7));
      if (!r.ok()) return ToMooncakeCode(r.status());
      if (s.worker != nullptr && !s.worker->stats().last_heartbeat_ok &&
          s.worker->stats().heartbeats_failed > 0) {
        return kRpcFail;
      }
      return kOk;
    });
  }

  // "host:port" of this client's endpoint (its segment's name); "" before Setup.
  std::string GetHostname() {
    ReaderMutexLock lock(&mu_);
    return state_ == nullptr ? std::string() : state_->hostname;
  }

  // The reason for the most recent failed Setup/SetupDummy ("" if none).
  std::string last_error() const {
    MutexLock lock(&error_mu_);
    return last_error_;
  }

  // ---- Writes -------------------------------------------------------------------

  int Put(std::string_view key, std::string_view value, const ReplicateConfig& config) {
    const std::string_view parts[] = {value};
    return PutParts(key, parts, config, /*upsert=*/false);
  }
  int Upsert(std::string_view key, std::string_view value, const ReplicateConfig& config) {
    const std::string_view parts[] = {value};
    return PutParts(key, parts, config, /*upsert=*/true);
  }

  // Stores the concatenation of `parts` (copied into the staging buffer).
  int PutParts(std::string_view key, std::span<const std::string_view> parts,
               const ReplicateConfig& config, bool upsert = false) {
    const std::vector<std::string_view> keys{key};
    const std::vector<std::vector<std::string_view>> values{
        std::vector<std::string_view>(parts.begin(), parts.end())};
    return StagedPut(keys, values, config, upsert).front();
  }

  // One code for the whole batch: 0 when every value is stored (or was
  // already), else the first failure's code.
  int PutBatch(std::span<const std::string_view> keys, std::span<const std::string_view> values,
               const ReplicateConfig& config, bool upsert = false) {
    if (keys.size() != values.size()) return kInvalidParams;
    if (keys.empty()) return kOk;
    std::vector<std::vector<std::string_view>> parts(values.size());
    for (size_t i = 0; i < values.size(); ++i) parts[i] = {values[i]};
    for (int c : StagedPut(std::vector<std::string_view>(keys.begin(), keys.end()), parts, config,
                           upsert)) {
      if (c != kOk) return c;
    }
    return kOk;
  }

  // Values straight from registered buffers: [ptrs[i], ptrs[i] + sizes[i]).
  std::vector<int> BatchPutFrom(std::span<const std::string_view> keys,
                                std::span<const uintptr_t> ptrs, std::span<const uint64_t> sizes,
                                const ReplicateConfig& config, bool upsert = false) {
    if (ptrs.size() != keys.size() || sizes.size() != keys.size()) {
      return std::vector<int>(keys.size(), kInvalidParams);
    }
    std::vector<int> codes(keys.size(), kOk);
    if (keys.empty()) return codes;
    auto opts = ToPutOptions(config, upsert);
    auto groups = GroupIdsFor(config, keys.size(), upsert);
    if (!opts.ok() || !groups.ok()) return std::vector<int>(keys.size(), kInvalidParams);
    return WithClientV(keys.size(), [&](ClientState& s) {
      std::vector<client::PutItem> items;
      std::vector<size_t> index;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (int c = CheckKey(keys[i]); c != kOk) {
          codes[i] = c;
        } else if (sizes[i] == 0 || !Registered(s, ptrs[i], sizes[i])) {
          codes[i] = kInvalidParams;
        } else {
          items.push_back({keys[i],
                           std::string_view(reinterpret_cast<const char*>(ptrs[i]), sizes[i]),
                           nullptr, (*groups)[i]});
          index.push_back(i);
        }
      }
      std::vector<absl::Status> st = s.client->BatchPut(items, *opts);
      for (size_t j = 0; j < items.size(); ++j) codes[index[j]] = PutCode(st[j]);
      return codes;
    });
  }

  int PutFrom(std::string_view key, uintptr_t ptr, uint64_t size, const ReplicateConfig& config,
              bool upsert = false) {
    const std::string_view keys[] = {key};
    const uintptr_t ptrs[] = {ptr};
    const uint64_t sizes[] = {size};
    return BatchPutFrom(keys, ptrs, sizes, config, upsert).front();
  }

  // ---- Reads --------------------------------------------------------------------

  // The value, or nullopt with the code in *code (kObjectNotFound on a miss).
  std::optional<std::string> Get(std::string_view key, int* code = nullptr) {
    std::vector<std::string_view> keys{key};
    std::vector<int> codes;
    std::vector<std::optional<std::string>> r = GetBatch(keys, &codes);
    if (code != nullptr) *code = codes.front();
    return std::move(r.front());
  }

  std::vector<std::optional<std::string>> GetBatch(std::span<const std::string_view> keys,
                                                   std::vector<int>* codes = nullptr) {
    return FetchBatch<std::string>(
        keys, codes, [](auto& client, const auto& valid) { return client.BatchGet(valid); });
  }

  // One value or a code per key: `fetch(client, valid keys)` answers the
  // keys that pass validation, the others get its code.
  template <typename T, typename Fetch>
  std::vector<std::optional<T>> FetchBatch(std::span<const std::string_view> keys,
                                           std::vector<int>* codes, Fetch&& fetch) {
    std::vector<std::optional<T>> out(keys.size());
    std::vector<int> c(keys.size(), kOk);
    if (!keys.empty()) {
      c = WithClientV(keys.size(), [&](ClientState& s) {
        std::vector<int> cc(keys.size(), kOk);
        const auto [valid, index] = ValidKeys(keys, &cc);
        auto got = fetch(*s.client, valid);
        for (size_t j = 0; j < valid.size(); ++j) {
          if (got[j].ok()) {
            out[index[j]] = std::move(*got[j]);
          } else {
            cc[index[j]] = ToMooncakeCode(got[j].status());
          }
        }
        return cc;
      });
    }
    if (codes != nullptr) *codes = std::move(c);
    return out;
  }

  // Bytes read into [ptrs[i], ptrs[i] + sizes[i]) (a registered buffer), or
  // a negative code: kObjectNotFound, kBufferOverflow (buffer too small).
  std::vector<int64_t> BatchGetInto(std::span<const std::string_view> keys,
                                    std::span<const uintptr_t> ptrs,
                                    std::span<const uint64_t> sizes) {
    if (ptrs.size() != keys.size() || sizes.size() != keys.size()) {
      return std::vector<int64_t>(keys.size(), kInvalidParams);
    }
    if (keys.empty()) return {};
    return WithClientOr(std::vector<int64_t>(keys.size(), kInternalError), [&](ClientState& s) {
      std::vector<int64_t> out(keys.size(), kOk);
      std::vector<client::GetIntoItem> items;
      std::vector<size_t> index;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (int k = CheckKey(keys[i]); k != kOk) {
          out[i] = k;
        } else if (sizes[i] == 0 || !Registered(s, ptrs[i], sizes[i])) {
          out[i] = kInvalidParams;
        } else {
          items.push_back({keys[i], reinterpret_cast<void*>(ptrs[i]), sizes[i]});
          index.push_back(i);
        }
      }
      auto got = s.client->BatchGetInto(items);
      for (size_t j = 0; j < items.size(); ++j) {
        out[index[j]] =
            got[j].ok() ? static_cast<int64_t>(*got[j]) : ToMooncakeCode(got[j].status());
      }
      return out;
    });
  }

  int64_t GetInto(std::string_view key, uintptr_t ptr, uint64_t size) {
    const std::string_view keys[] = {key};
    const uintptr_t ptrs[] = {ptr};
    const uint64_t sizes[] = {size};
    return BatchGetInto(keys, ptrs, sizes).front();
  }

  // Range reads: for each buffer, for each key, for each range, copies
  // object[src, src + size) to buffer + dst. Each object is read once.
  // Returns the same nesting: bytes copied, or a negative code for that range
  // (kInvalidParams: a range past the object's end or past the registered
  // buffer, or lists that do not line up; the object's own code when it
  // cannot be read).
  std::vector<std::vector<std::vector<int64_t>>> GetIntoRanges(
      std::span<const BufferRanges> buffers) {
    std::vector<std::vector<std::vector<int64_t>>> out(buffers.size());
    std::map<std::string, int> wanted;
    for (size_t b = 0; b < buffers.size(); ++b) {
      out[b].resize(buffers[b].keys.size());
      for (size_t k = 0; k < buffers[b].keys.size(); ++k) {
        const KeyRanges& kr = buffers[b].keys[k];
        out[b][k].assign(kr.sizes.size(), kInvalidParams);
        if (buffers[b].shape_ok && kr.shape_ok) wanted.emplace(kr.key, 0);
      }
    }
    std::vector<std::string_view> keys;
    for (const auto& [key, unused] : wanted) keys.push_back(key);
    std::vector<int> codes;
    std::vector<std::optional<std::string>> values = GetBatch(keys, &codes);
    std::map<std::string_view, size_t> slot;
    for (size_t i = 0; i < keys.size(); ++i) slot[keys[i]] = i;
    ReaderMutexLock lock(&mu_);
    if (state_ == nullptr) return out;
    for (size_t b = 0; b < buffers.size(); ++b) {
      if (!buffers[b].shape_ok) continue;
      const std::optional<uint64_t> room =
          state_->client->RegisteredBytesFrom(reinterpret_cast<const void*>(buffers[b].buffer));
      for (size_t k = 0; k < buffers[b].keys.size(); ++k) {
        const KeyRanges& kr = buffers[b].keys[k];
        if (!kr.shape_ok) continue;
        const size_t i = slot.at(kr.key);
        for (size_t r = 0; r < kr.sizes.size(); ++r) {
          int64_t& res = out[b][k][r];
          if (!values[i].has_value()) {
            res = codes[i];
            continue;
          }
          const std::string& v = *values[i];
          const uint64_t dst = kr.dst_offsets[r], src = kr.src_offsets[r], n = kr.sizes[r];
          if (!room.has_value() || src > v.size() || n > v.size() - src || dst > *room ||
              n > *room - dst) {
            res = kInvalidParams;
            continue;
          }
          std::memcpy(reinterpret_cast<char*>(buffers[b].buffer) + dst, v.data() + src, n);
          res = static_cast<int64_t>(n);
        }
      }
    }
    return out;
  }

  // ---- Registered memory ----------------------------------------------------------

  int RegisterBuffer(uintptr_t ptr, uint64_t size) {
    if (ptr == 0 || size == 0) return kInvalidParams;
    return WithClient([&](ClientState& s) -> int {
      return s.client->RegisterBuffer(reinterpret_cast<void*>(ptr), size).ok() ? kOk
                                                                               : kInvalidParams;
    });
  }

  int UnregisterBuffer(uintptr_t ptr) {
    return WithClient([&](ClientState& s) -> int {
      return s.client->UnregisterBuffer(reinterpret_cast<void*>(ptr)).ok() ? kOk : kInvalidParams;
    });
  }

  // ---- Queries and removal ---------------------------------------------------------

  // 1 present, 0 absent, negative on error.
  int IsExist(std::string_view key) {
    const std::string_view keys[] = {key};
    return BatchIsExist(keys).front();
  }

  // One master RPC per rpc::kMaxBatchKeys keys.
  std::vector<int> BatchIsExist(std::span<const std::string_view> keys) {
    if (keys.empty()) return {};
    return WithClientV(keys.size(), [&](ClientState& s) {
      std::vector<int> out(keys.size(), 0);
      const auto [valid, index] = ValidKeys(keys, &out);
      if (valid.empty()) return out;
      auto r = s.client->BatchExists(valid);
      for (size_t j = 0; j < valid.size(); ++j) {
        out[index[j]] = r.ok() ? ((*r)[j] ? 1 : 0) : ToMooncakeCode(r.status());
      }
      return out;
    });
  }

  int64_t GetSize(std::string_view key) {
    if (int k = CheckKey(key); k != kOk) return k;
    return WithClient64([&](ClientState& s) -> int64_t {
      auto r = s.client->GetSize(key);
      return r.ok() ? static_cast<int64_t>(*r) : ToMooncakeCode(r.status());
    });
  }

  int Remove(std::string_view key, bool force = false) {
    const std::string_view keys[] = {key};
    return BatchRemove(keys, force).front();
  }

  std::vector<int> BatchRemove(std::span<const std::string_view> keys, bool force = false) {
    if (keys.empty()) return {};
    return WithClientV(keys.size(), [&](ClientState& s) {
      std::vector<int> out(keys.size(), kOk);
      const auto [valid, index] = ValidKeys(keys, &out);
      client::RemoveOptions o;
      o.force = force;
      o.refuse_if_leased = !force;
      std::vector<absl::Status> st = s.client->BatchRemove(valid, o);
      for (size_t j = 0; j < valid.size(); ++j) out[index[j]] = ToMooncakeCode(st[j]);
      return out;
    });
  }

  // Objects removed (>= 0), or a negative code (kInvalidParams: a bad regex).
  // Objects with a live read lease are skipped.
  int64_t RemoveByRegex(const std::string& pattern) {
    if (pattern.empty()) return kInvalidParams;
    return RemoveMatching(pattern);
  }
  int64_t RemoveAll() { return RemoveMatching(""); }

  // ---- Replica tasks (replica_task.h: ids, enums and fields as Mooncake's) -----------
  // The master copies the object's bytes between workers; segments are named
  // as their workers mounted them. Each returns at once with (id, 0), or
  // ((0, 0), code): kInvalidKey, kInvalidParams (no targets, more than
  // rpc::kMaxCopyTargets, an empty name), kObjectNotFound (no such object or
  // segment), kRpcFail; kInternalError before Setup.

  std::pair<TaskUuid, int> CreateCopyTask(std::string_view key,
                                          const std::vector<std::string>& targets) {
    if (int k = CheckKey(key); k != kOk) return {TaskUuid{0, 0}, k};
    return TaskCall([&](ClientState& s) { return s.client->CreateCopyTask(key, targets); });
  }

  std::pair<TaskUuid, int> CreateMoveTask(std::string_view key, std::string_view source,
                                          std::string_view target) {
    if (int k = CheckKey(key); k != kOk) return {TaskUuid{0, 0}, k};
    return TaskCall([&](ClientState& s) { return s.client->CreateMoveTask(key, source, target); });
  }

  // (the task, 0), or (nullopt, code): kInvalidParams (an id not made here),
  // kObjectNotFound (no such task, or one the master has forgotten).
  std::pair<std::optional<TaskInfo>, int> QueryTask(const TaskUuid& id) {
    const std::optional<uint64_t> task_id = FromTaskUuid(id);
    if (!task_id.has_value()) return {std::nullopt, kInvalidParams};
    return WithClientOr(std::pair<std::optional<TaskInfo>, int>(std::nullopt, kInternalError),
                        [&](ClientState& s) -> std::pair<std::optional<TaskInfo>, int> {
                          auto r = s.client->QueryTask(*task_id);
                          if (!r.ok()) return {std::nullopt, ToMooncakeCode(r.status())};
                          return {ToTaskInfo(*r), kOk};
                        });
  }

  // ---- Tensor objects (tensor_meta.h) -----------------------------------------------
  // The bytes of each tensor, stored with its TensorMeta (which the master
  // checks against the size); staged and coded like put_batch, one code per
  // key (ALREADY_EXISTS: 0, the stored tensor is kept, as Mooncake's put).
  std::vector<int> BatchPutTensor(std::span<const std::string_view> keys,
                                  std::span<const std::string_view> values,
                                  std::span<const store::proto::TensorMeta> metas,
                                  const ReplicateConfig& config) {
    if (values.size() != keys.size() || metas.size() != keys.size()) {
      return std::vector<int>(keys.size(), kInvalidParams);
    }
    if (keys.empty()) return {};
    std::vector<std::vector<std::string_view>> parts(values.size());
    for (size_t i = 0; i < values.size(); ++i) parts[i] = {values[i]};
    return StagedPut(std::vector<std::string_view>(keys.begin(), keys.end()), parts, config,
                     /*upsert=*/false, metas);
  }

  // Each object with its TensorMeta, or nullopt with the code in (*codes)[i].
  std::vector<std::optional<client::StoredObject>> GetObjects(
      std::span<const std::string_view> keys, std::vector<int>* codes = nullptr) {
    return FetchBatch<client::StoredObject>(
        keys, codes, [](auto& client, const auto& valid) { return client.BatchGetObjects(valid); });
  }

  // ---- Clones and object groups (client.h has the semantics) --------------------------
  // Codes: kInvalidKey (a bad key), kInvalidParams (mismatched lists, empty or
  // equal prefixes, an empty group id), kObjectNotFound (a missing source;
  // an unknown group), kObjectAlreadyExists (a destination exists),
  // kObjectHasLease (FAILED_PRECONDITION: a source only on SSD, a member still
  // being put, a pinned member without force), kRpcFail, kInternalError
  // (before Setup, or a master without these calls).

  // destination_keys[i] becomes a clone of source_keys[i]; all or nothing. 0 or a code.
  int Clone(std::span<const std::string_view> source_keys,
            std::span<const std::string_view> destination_keys) {
    if (source_keys.empty() || source_keys.size() != destination_keys.size() ||
        source_keys.size() > rpc::kMaxBatchKeys) {
      return kInvalidParams;
    }
    for (size_t i = 0; i < source_keys.size(); ++i) {
      if (int k = CheckKey(source_keys[i]); k != kOk) return k;
      if (int k = CheckKey(destination_keys[i]); k != kOk) return k;
    }
    return WithClient([&](ClientState& s) -> int {
      return ToMooncakeCode(s.client->Clone(source_keys, destination_keys).status());
    });
  }

  // Every key starting with source_prefix gets a clone named destination_prefix
  // + the rest of the key; all or nothing. The number cloned (>= 0) or a code.
  int64_t ClonePrefix(std::string_view source_prefix, std::string_view destination_prefix) {
    if (source_prefix.empty() || destination_prefix.empty() ||
        source_prefix == destination_prefix) {
      return kInvalidParams;
    }
    return WithClient64([&](ClientState& s) -> int64_t {
      auto r = s.client->ClonePrefix(source_prefix, destination_prefix);
      return r.ok() ? static_cast<int64_t>(r->cloned) : ToMooncakeCode(r.status());
    });
  }

  // Makes every member visible at once. 0 or a code.
  int CommitGroup(std::string_view group_id) {
    if (group_id.empty() || group_id.size() > rpc::kMaxGroupIdBytes) return kInvalidParams;
    return WithClient([&](ClientState& s) -> int {
      return ToMooncakeCode(s.client->CommitGroup(group_id).status());
    });
  }

  // Removes every member; the number removed (>= 0) or a code.
  int64_t RemoveGroup(std::string_view group_id, bool force = false) {
    if (group_id.empty() || group_id.size() > rpc::kMaxGroupIdBytes) return kInvalidParams;
    return WithClient64([&](ClientState& s) -> int64_t {
      client::GroupOptions o;
      o.force = force;
      auto r = s.client->RemoveGroup(group_id, o);
      return r.ok() ? static_cast<int64_t>(*r) : ToMooncakeCode(r.status());
    });
  }

  // Visible objects whose TensorMeta matches (client::ObjectQuery), in key
  // order: (objects, 0) or ({}, code).
  std::pair<std::vector<client::QueriedObject>, int> QueryObjects(const client::ObjectQuery& q) {
    using Answer = std::pair<std::vector<client::QueriedObject>, int>;
    return WithClientOr(Answer({}, kInternalError), [&](ClientState& s) -> Answer {
      auto r = s.client->QueryObjects(q);
      if (!r.ok()) return {{}, ToMooncakeCode(r.status())};
      return {std::move(r->objects), kOk};
    });
  }

 private:
  template <typename F>
  std::pair<TaskUuid, int> TaskCall(F&& f) {
    return WithClientOr(std::pair<TaskUuid, int>(TaskUuid{0, 0}, kInternalError),
                        [&](ClientState& s) -> std::pair<TaskUuid, int> {
                          absl::StatusOr<uint64_t> r = f(s);
                          if (!r.ok()) return {TaskUuid{0, 0}, ToMooncakeCode(r.status())};
                          return {ToTaskUuid(*r), kOk};
                        });
  }

  int Fail(int code, std::string_view why) {
    MutexLock lock(&error_mu_);
    last_error_ = std::string(why);
    return code;
  }

  static int CheckKey(std::string_view key) {
    if (key.empty() || key.size() > rpc::kMaxKeyBytes || key.front() == '\0') return kInvalidKey;
    return kOk;
  }

  // The keys that pass CheckKey and their positions in `keys`; (*codes)[i]
  // is set to kInvalidKey for the others.
  template <typename Code>
  static std::pair<std::vector<std::string_view>, std::vector<size_t>> ValidKeys(
      std::span<const std::string_view> keys, std::vector<Code>* codes) {
    MC_ASSERT(codes->size() == keys.size(), "one code per key");
    std::pair<std::vector<std::string_view>, std::vector<size_t>> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (int k = CheckKey(keys[i]); k != kOk) {
        (*codes)[i] = k;
      } else {
        out.first.push_back(keys[i]);
        out.second.push_back(i);
      }
    }
    return out;
  }

  // [ptr, ptr + size) lies in one buffer registered with this client.
  static bool Registered(const ClientState& s, uintptr_t ptr, uint64_t size) {
    const std::optional<uint64_t> room =
        s.client->RegisteredBytesFrom(reinterpret_cast<const void*>(ptr));
    return room.has_value() && size <= *room;
  }

  // A put of a key that is already stored keeps it and reports success.
  static int PutCode(const absl::Status& s) {
    return absl::IsAlreadyExists(s) ? kOk : ToMooncakeCode(s);
  }

  // Runs f(state) under the shared state lock; `closed` when there is none.
  template <typename R, typename F>
  R WithClientOr(R closed, F&& f) {
    ReaderMutexLock lock(&mu_);
    if (state_ == nullptr) return closed;
    return f(*state_);
  }
  template <typename F>
  int WithClient(F&& f) {
    return WithClientOr<int>(kInternalError, std::forward<F>(f));
  }
  template <typename F>
  int64_t WithClient64(F&& f) {
    return WithClientOr<int64_t>(kInternalError, std::forward<F>(f));
  }
  template <typename F>
  std::vector<int> WithClientV(size_t n, F&& f) {
    return WithClientOr(std::vector<int>(n, kInternalError), std::forward<F>(f));
  }

  int64_t RemoveMatching(const std::string& regex) {
    return WithClient64([&](ClientState& s) -> int64_t {
      client::RemoveAllOptions o;
      o.key_regex = regex;
      auto r = s.client->RemoveAll(o);
      return r.ok() ? static_cast<int64_t>(*r) : ToMooncakeCode(r.status());
    });
  }

  // Puts of values given as parts, each copied into the staging buffer.
  // metas: empty, or one TensorMeta per key.
  std::vector<int> StagedPut(const std::vector<std::string_view>& keys,
                             const std::vector<std::vector<std::string_view>>& parts,
                             const ReplicateConfig& config, bool upsert,
                             std::span<const store::proto::TensorMeta> metas = {}) {
    MC_ASSERT(metas.empty() || metas.size() == keys.size(), "one TensorMeta per key, or none");
    auto opts = ToPutOptions(config, upsert);
    auto groups = GroupIdsFor(config, keys.size(), upsert);
    if (!opts.ok() || !groups.ok()) return std::vector<int>(keys.size(), kInvalidParams);
    return WithClientV(keys.size(), [&](ClientState& s) {
      std::vector<int> codes(keys.size(), kOk);
      if (opts->preferred_segment_names.empty()) {
        opts->preferred_segment_names = s.default_segments;
      }
      std::vector<client::PutItem> items;
      std::vector<size_t> index;
      std::vector<alloc::Allocation> held;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (int c = CheckKey(keys[i]); c != kOk) {
          codes[i] = c;
          continue;
        }
        uint64_t total = 0;
        for (std::string_view p : parts[i]) total += p.size();
        if (total == 0) {
          codes[i] = kInvalidParams;
          continue;
        }
        std::optional<alloc::Allocation> a;
        if (s.staging_alloc != nullptr)
          a = s.staging_alloc->allocate(total, kStagingGranularityBytes);
        if (!a.has_value()) {
          codes[i] = kBufferOverflow;
          continue;
        }
        char* dst = static_cast<char*>(s.staging) + a->offset;
        for (std::string_view p : parts[i]) {
          std::memcpy(dst, p.data(), p.size());
          dst += p.size();
        }
        held.push_back(*a);
        items.push_back({keys[i],
                         std::string_view(static_cast<char*>(s.staging) + a->offset,
                                          static_cast<size_t>(total)),
                         metas.empty() ? nullptr : &metas[i], (*groups)[i]});
        index.push_back(i);
      }
      if (!items.empty()) {
        std::vector<absl::Status> st = s.client->BatchPut(items, *opts);
        for (size_t j = 0; j < items.size(); ++j) codes[index[j]] = PutCode(st[j]);
      }
      for (const alloc::Allocation& a : held) s.staging_alloc->free(a);
      return codes;
    });
  }

  SharedMutex mu_;
  std::unique_ptr<ClientState> state_ ABSL_GUARDED_BY(mu_);
  mutable Mutex error_mu_;
  std::string last_error_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_DISTRIBUTED_STORE_H_
