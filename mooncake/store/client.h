// Client: put, get, remove and exists on the distributed KV-cache store.
//
//   ASSIGN_OR_RETURN(auto channel, rpc::TcpChannel::Connect(master_address));
//   ASSIGN_OR_RETURN(auto client, client::Client<rpc::TcpChannel>::Create({}, channel.get()));
//   RETURN_IF_ERROR(client->Put("k", value, {.replica_count = 2}));
//   ASSIGN_OR_RETURN(std::string v, client->Get("k"));
//
// Data never passes through the master: a put asks the master for space
// (PutStart), writes every replica straight from the caller's bytes over the
// transports and commits (PutEnd); a get asks for the replicas and a read
// lease (GetReplicas) and reads the nearest complete replica straight into
// the destination, falling back to the next replica when one fails. A
// committed version is immutable: re-putting a key is ALREADY_EXISTS unless
// PutOptions::replace asks to replace it (a new version in new space; the old
// one stays readable until the new one commits).
//
// Metadata cache (client/metadata_cache.h has the safety argument): the
// answer and lease of a get are kept, so repeated gets of a hot key make no
// master RPC until the lease nears its end. A cached get returns exactly the
// bytes of the version cached, verified by checksum; this client's own Remove
// and Put drop the entry first; another client's Remove or replace shows here
// within one lease (GetOptions::bypass_cache reads through the master).
//
// Errors (absl::Status, canonical codes):
//   INVALID_ARGUMENT    empty key or value, key over 4096 bytes, a key whose
//                       first byte is 0x00 that is not a block object key,
//                       value over max_object_bytes (here or at the master),
//                       unknown tenant, MatchPrefix of an empty chain
//   NOT_FOUND           no such object (never put, removed, evicted, expired)
//   ALREADY_EXISTS      put of a key that exists (without replace) or is
//                       being put or replaced by another call
//   RESOURCE_EXHAUSTED  no space left after eviction, tenant quota
//   OUT_OF_RANGE        GetInto's buffer is smaller than the object
//   DEADLINE_EXCEEDED   the master or a transfer took longer than its timeout
//   UNAVAILABLE         the master or every worker holding the object is gone
//   DATA_LOSS           every replica's bytes failed the checksum
//   FAILED_PRECONDITION remove of a pinned object without force; a clone of
//                       an object only on SSD; CommitGroup while a member is
//                       still being put
//   ABORTED             remove with refuse_if_leased of an object another
//                       reader holds a lease on; a keep_pin put whose
//                       replaced object changed meanwhile (retry)
//
// Blocks and prefix queries: a KV block is an object stored under
// rpc::BlockObjectKey(block key) (rpc/object_key.h: 0x00 'b' + the 16 bytes
// of the mooncake/index block key), the key the master's PrefixQuery looks up.
// MatchPrefix(chain) answers how many leading blocks of a chain are cached in
// one RPC per rpc::kMaxChainBlocks blocks; GetPrefixInto(chain, buffers) also
// reads that prefix into the caller's buffers, with the replicas from the same
// RPC (no GetReplicas per block); PutBlock/GetBlock/GetBlockInto and
// their batch forms are Put/Get under the block's object key (Put, Get,
// Remove and Exists also accept such keys directly).
//
// Batch forms take many keys, overlap their master RPCs and move all their
// data in one transport batch; each item gets its own Status.
//
// Tensors, groups and clones: a put may carry a TensorMeta (PutOptions::tensor,
// or PutItem::tensor per item; the master checks shape x dtype = size) that
// GetObject returns with the bytes and QueryObjects filters on; a put with a
// group_id joins that object group, invisible until CommitGroup, then evicted,
// expired and removed as one (RemoveGroup); Clone/ClonePrefix make new keys
// that share existing objects' bytes.
//
// Compression on the network path (ClientOptions::network_compression, off by
// default; client/network_codec.h): a put of bf16/fp16/fp8 KV with a matching
// TensorMeta may be stored compressed (TensorMeta.codec set, the checksum over
// the stored bytes); every read decodes such an object into the caller's
// buffer, which must hold the raw tensor (shape x dtype), and returns the raw
// size. GetSize reports that raw size too, as does QueryObjects' value_bytes
// (its info.size_bytes is the stored size).
//
// RegisterBuffer: transfers already go straight between the caller's memory
// and the workers' segments (no staging), so registration is not needed for
// correctness with the local, SHM and TCP transports; it declares a region
// the caller will reuse for puts and GetInto (tracked, overlap-checked and
// counted in stats().registered_bytes_moved) and is where a transport that
// must pin memory (RDMA) registers it once instead of per transfer.
//
// Thread-safety: every method may be called concurrently.
#ifndef MOONCAKE_STORE_CLIENT_H_
#define MOONCAKE_STORE_CLIENT_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client/client_options.h"
#include "mooncake/store/client/internal/client_core.h"
#include "mooncake/store/client/metadata_cache.h"
#include "mooncake/store/client/segment_resolver.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"
#include "mooncake/transport/router.h"

namespace mooncake::client {

struct PrefixOptions {
  std::string tenant;  // "" = ClientOptions::tenant
};

template <rpc::RpcChannel C>
class Client {
 public:
  // `channel` reaches the master and must outlive the client.
  // What Create would refuse in `options` (INVALID_ARGUMENT), checked without
  // a master or a transport: for a program that validates its flags first.
  static absl::Status CheckOptions(const ClientOptions& options) {
    return client_internal::CheckClientOptions(options);
  }

  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options, C* channel) {
    MC_ASSERT(channel != nullptr, "a client needs a channel to the master");
    ASSIGN_OR_RETURN(auto core,
                     client_internal::ClientCore<C>::Create(std::move(options), channel));
    return std::unique_ptr<Client>(new Client(std::move(core)));
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // ---- Single-key calls --------------------------------------------------------

  absl::Status Put(std::string_view key, std::string_view value, const PutOptions& options = {}) {
    const PutItem item{key, value};
    return core_->PutMany(std::span<const PutItem>(&item, 1), options).front();
  }

  absl::StatusOr<std::string> Get(std::string_view key, const GetOptions& options = {}) {
    std::vector<absl::StatusOr<std::string>> r =
        BatchGet(std::span<const std::string_view>(&key, 1), options);
    return std::move(r.front());
  }

  // Reads the object into [buffer, buffer + capacity); returns its size.
  absl::StatusOr<size_t> GetInto(std::string_view key, void* buffer, size_t capacity,
                                 const GetOptions& options = {}) {
    const GetIntoItem item{key, buffer, capacity};
    return std::move(BatchGetInto(std::span<const GetIntoItem>(&item, 1), options).front());
  }

  absl::Status Remove(std::string_view key, const RemoveOptions& options = {}) {
    return BatchRemove(std::span<const std::string_view>(&key, 1), options).front();
  }

  // Removes every object of the tenant whose key matches options.key_regex
  // and returns how many went. Skipped (not counted): objects with a live
  // read lease (this client's own cached leases are released first), puts
  // not yet committed, and pinned objects unless options.force. One RemoveAll
  // RPC per rpc::kRemoveAllObjectsPerCall objects the master looks at (it
  // walks its shards one lock at a time, O(objects) in all). Clears this
  // client's metadata cache (every tenant's entries), before and after.
  // Errors: INVALID_ARGUMENT (bad regex, unknown tenant), those of the RPC
  // (objects removed by earlier calls of the walk stay removed).
  absl::StatusOr<uint64_t> RemoveAll(const RemoveAllOptions& options = {}) {
    return core_->RemoveAll(options);
  }

  // The object's size in bytes, without reading it: from the metadata cache
  // when its lease is valid, else one Exists RPC (no lease, no effect on
  // eviction, no SSD-tier load). NOT_FOUND when absent; INVALID_ARGUMENT for
  // a bad key or an unknown tenant.
  absl::StatusOr<uint64_t> GetSize(std::string_view key, std::string_view tenant = {}) {
    return core_->GetSize(key, tenant);
  }

  absl::StatusOr<bool> Exists(std::string_view key, std::string_view tenant = {}) {
    RETURN_IF_ERROR(rpc::ValidateObjectKey(key));
    store::proto::ExistsRequest req;
    req.set_key(std::string(key));
    req.set_tenant(core_->Tenant(tenant));
    ASSIGN_OR_RETURN(auto resp, core_->template CallMaster<rpc::ExistsMethod>(req));
    return resp.exists();
  }

  // ---- Replica tasks (Mooncake's CreateCopyTask / CreateMoveTask / QueryTask) ----
  // The master copies the object's bytes between workers; segments are named
  // as their workers mounted them (WorkerOptions::segment_name). Each call is
  // one RPC and returns at once: QueryTask follows the task. Errors:
  // INVALID_ARGUMENT (bad key, 0 or over rpc::kMaxCopyTargets targets, an
  // empty name), those of the master (NOT_FOUND: no such object, segment or
  // task), those of the RPC.

  // Copies the object to every segment in `targets`; returns the task id.
  absl::StatusOr<uint64_t> CreateCopyTask(std::string_view key,
                                          std::span<const std::string> targets,
                                          std::string_view tenant = {}) {
    RETURN_IF_ERROR(rpc::ValidateObjectKey(key));
    if (targets.empty() || targets.size() > rpc::kMaxCopyTargets) {
      return absl::InvalidArgumentError(absl::StrCat("CreateCopyTask: 1 to ", rpc::kMaxCopyTargets,
                                                     " targets, not ", targets.size()));
    }
    store::proto::CreateCopyTaskRequest req;
    req.set_key(std::string(key));
    req.set_tenant(core_->Tenant(tenant));
    for (const std::string& t : targets) {
      if (t.empty()) return absl::InvalidArgumentError("CreateCopyTask: an empty segment name");
      req.add_targets(t);
    }
    ASSIGN_OR_RETURN(auto resp, core_->template CallMaster<rpc::CreateCopyTaskMethod>(req));
    return resp.task_id();
  }

  // Moves the object's replica on segment `source` to segment `target`.
  absl::StatusOr<uint64_t> CreateMoveTask(std::string_view key, std::string_view source,
                                          std::string_view target, std::string_view tenant = {}) {
    RETURN_IF_ERROR(rpc::ValidateObjectKey(key));
    if (source.empty() || target.empty()) {
      return absl::InvalidArgumentError("CreateMoveTask: source and target must be named");
    }
    store::proto::CreateMoveTaskRequest req;
    req.set_key(std::string(key));
    req.set_tenant(core_->Tenant(tenant));
    req.set_source(std::string(source));
    req.set_target(std::string(target));
    ASSIGN_OR_RETURN(auto resp, core_->template CallMaster<rpc::CreateMoveTaskMethod>(req));
    return resp.task_id();
  }

  // A task's state (NOT_FOUND: no such task; the master forgets finished ones
  // after a while).
  absl::StatusOr<store::proto::QueryTaskResponse> QueryTask(uint64_t task_id) {
    store::proto::QueryTaskRequest req;
    req.set_task_id(task_id);
    return core_->template CallMaster<rpc::QueryTaskMethod>(req);
  }

  // ---- Clones, object groups and tensor queries (docs/client.md) -----------------
  // Metadata only: no bytes move. Errors: INVALID_ARGUMENT (checked here
  // first: a bad key, an empty or over-long group id, mismatched lists), the
  // master's (below), those of the RPC.

  // New keys sharing the sources' bytes: destinations[i] becomes a clone of
  // sources[i] (at most rpc::kMaxBatchKeys pairs). All or nothing: NOT_FOUND
  // (a source missing or not visible), ALREADY_EXISTS (a destination exists),
  // FAILED_PRECONDITION (a source whose bytes are only on SSD). A clone is an
  // ordinary object: removing its source leaves it readable, and the shared
  // bytes are freed when the last key referring to them goes.
  absl::StatusOr<CloneResult> Clone(std::span<const std::string_view> sources,
                                    std::span<const std::string_view> destinations,
                                    const CloneOptions& options = {}) {
    return core_->Clone(sources, destinations, options);
  }
  absl::StatusOr<CloneResult> Clone(std::string_view source, std::string_view destination,
                                    const CloneOptions& options = {}) {
    return core_->Clone(std::span<const std::string_view>(&source, 1),
                        std::span<const std::string_view>(&destination, 1), options);
  }

  // The prefix form: every visible key of the tenant starting with
  // `source_prefix` gets a clone named destination_prefix + the rest of the
  // key. Same errors, all or nothing; NOT_FOUND also when no visible key
  // matches; more than rpc::kMaxBatchKeys matching keys is refused by the
  // master. The prefixes must be non-empty and differ. Clears this client's
  // metadata cache first.
  absl::StatusOr<CloneResult> ClonePrefix(std::string_view source_prefix,
                                          std::string_view destination_prefix,
                                          const CloneOptions& options = {}) {
    return core_->ClonePrefix(source_prefix, destination_prefix, options);
  }

  // Makes every member of the group (puts with PutOptions::group_id) visible
  // at once. NOT_FOUND: no such group (never made, removed, or lost with a
  // member); FAILED_PRECONDITION: a member is still being put.
  absl::StatusOr<GroupCommit> CommitGroup(std::string_view group_id,
                                          const GroupOptions& options = {}) {
    return core_->CommitGroup(group_id, options);
  }

  // Removes every member, committed or not; returns how many. Pinned members
  // need options.force (else FAILED_PRECONDITION); a member with a live read
  // lease keeps its space until the lease ends. Clears this client's metadata
  // cache before and after. NOT_FOUND: no such group.
  absl::StatusOr<uint64_t> RemoveGroup(std::string_view group_id,
                                       const GroupOptions& options = {}) {
    return core_->RemoveGroup(group_id, options);
  }

  // Visible objects of the tenant whose TensorMeta matches every filter of
  // `query`, in key order after query.start_after: one QueryObjects RPC per
  // rpc::kMaxQueryObjects objects, followed until the master has no more or
  // query.objects_max were collected (then `more` is set). The master walks
  // its whole table per page: an administrative query, not a hot path.
  // INVALID_ARGUMENT: objects_max 0, tp_rank below -1, a reversed layer range.
  absl::StatusOr<QueriedObjects> QueryObjects(const ObjectQuery& query = {}) {
    return core_->QueryObjects(query);
  }

  // Get, with the TensorMeta the writer gave (PutOptions::tensor or
  // PutItem::tensor) and the version read. Same errors as Get.
  absl::StatusOr<StoredObject> GetObject(std::string_view key, const GetOptions& options = {}) {
    return std::move(BatchGetObjects(std::span<const std::string_view>(&key, 1), options).front());
  }

  std::vector<absl::StatusOr<StoredObject>> BatchGetObjects(std::span<const std::string_view> keys,
                                                            const GetOptions& options = {}) {
    std::vector<client_internal::GetTarget> targets(keys.size());
    std::vector<StoredObject> objects(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      targets[i].key = keys[i];
      targets[i].owned = &objects[i].value;
    }
    std::vector<absl::Status> st = core_->GetMany(targets, options);
    std::vector<absl::StatusOr<StoredObject>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!st[i].ok()) {
        out.emplace_back(std::move(st[i]));
        continue;
      }
      if (targets[i].tensor != nullptr) objects[i].tensor = *targets[i].tensor;
      objects[i].version = targets[i].version;
      out.emplace_back(std::move(objects[i]));
    }
    return out;
  }

  // ---- Batch calls (one Status per item, same order) ---------------------------

  std::vector<absl::Status> BatchPut(std::span<const PutItem> items,
                                     const PutOptions& options = {}) {
    return core_->PutMany(items, options);
  }

  std::vector<absl::StatusOr<std::string>> BatchGet(std::span<const std::string_view> keys,
                                                    const GetOptions& options = {}) {
    std::vector<client_internal::GetTarget> targets(keys.size());
    std::vector<std::string> values(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      targets[i].key = keys[i];
      targets[i].owned = &values[i];
    }
    std::vector<absl::Status> st = core_->GetMany(targets, options);
    std::vector<absl::StatusOr<std::string>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (st[i].ok()) {
        out.emplace_back(std::move(values[i]));
      } else {
        out.emplace_back(std::move(st[i]));
      }
    }
    return out;
  }

  std::vector<absl::StatusOr<size_t>> BatchGetInto(std::span<const GetIntoItem> items,
                                                   const GetOptions& options = {}) {
    absl::InlinedVector<client_internal::GetTarget, 1> targets(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      targets[i].key = items[i].key;
      targets[i].buffer = items[i].buffer;
      targets[i].capacity = items[i].capacity;
    }
    std::vector<absl::Status> st = core_->GetMany(std::span(targets), options);
    std::vector<absl::StatusOr<size_t>> out;
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      if (st[i].ok()) {
        out.emplace_back(static_cast<size_t>(targets[i].size));
      } else {
        out.emplace_back(std::move(st[i]));
      }
    }
    return out;
  }

  std::vector<absl::Status> BatchRemove(std::span<const std::string_view> keys,
                                        const RemoveOptions& options = {}) {
    return core_->RemoveMany(keys, options);
  }

  // One BatchExists RPC per kMaxBatchKeys keys.
  absl::StatusOr<std::vector<bool>> BatchExists(std::span<const std::string_view> keys,
                                                std::string_view tenant = {}) {
    std::vector<bool> out;
    out.reserve(keys.size());
    for (size_t begin = 0; begin < keys.size(); begin += rpc::kMaxBatchKeys) {
      store::proto::BatchExistsRequest req;
      req.set_tenant(core_->Tenant(tenant));
      const size_t end = std::min(keys.size(), begin + rpc::kMaxBatchKeys);
      for (size_t i = begin; i < end; ++i) {
        RETURN_IF_ERROR(rpc::ValidateObjectKey(keys[i]));
        req.add_keys(std::string(keys[i]));
      }
      ASSIGN_OR_RETURN(auto resp, core_->template CallMaster<rpc::BatchExistsMethod>(req));
      if (static_cast<size_t>(resp.exists_size()) != end - begin) {
        return absl::InternalError("BatchExists answered a different number of keys");
      }
      for (bool e : resp.exists()) out.push_back(e);
    }
    return out;
  }

  // ---- Blocks and prefix queries ---------------------------------------------------

  // How many leading blocks of `chain` (block i's key chains block i-1's, as
  // index::BlockKeyer computes them) are cached and visible to the tenant:
  // chain[0, n) are all present, chain[n] is not. One PrefixQuery RPC per
  // rpc::kMaxChainBlocks blocks, stopping at the chunk that misses. A probe:
  // no lease is taken and eviction order is left alone (GetBlock reads).
  // Errors: INVALID_ARGUMENT (empty chain, unknown tenant), those of the RPC.
  absl::StatusOr<size_t> MatchPrefix(std::span<const Hash128> chain,
                                     const PrefixOptions& options = {}) {
    if (chain.empty()) return absl::InvalidArgumentError("MatchPrefix: empty chain of block keys");
    const std::string tenant = core_->Tenant(options.tenant);
    size_t matched = 0;
    while (matched < chain.size()) {
      const std::span<const Hash128> chunk =
          chain.subspan(matched, std::min(rpc::kMaxChainBlocks, chain.size() - matched));
      store::proto::PrefixQueryRequest req;
      req.set_tenant(tenant);
      req.mutable_chain()->Reserve(static_cast<int>(chunk.size()));
      for (const Hash128& block : chunk) rpc::ToProto(block, req.add_chain());
      auto resp = core_->template CallMaster<rpc::PrefixQueryMethod>(req);
      if (!resp.ok()) {
        return absl::Status(resp.status().code(),
                            absl::StrCat("MatchPrefix: ", resp.status().message()));
      }
      if (resp->matched() > chunk.size()) {
        return absl::InternalError(absl::StrCat("MatchPrefix: the master matched ", resp->matched(),
                                                " of ", chunk.size(), " blocks"));
      }
      matched += resp->matched();
      if (resp->matched() < chunk.size()) break;
    }
    MC_ASSERT(matched <= chain.size(), "matched more blocks than asked");
    return matched;
  }

  // Reads the longest cached prefix of `chain` into buffers[i] (block i) and
  // returns its length n: buffers[0, n) hold chain[0, n)'s bytes, checksum
  // verified. One PrefixQuery RPC per rpc::kMaxChainBlocks blocks (which
  // returns the replicas under one read lease, released after the read) and
  // one transport batch; no GetReplicas per block, no metadata cache. A block
  // that is cached but cannot be read (every replica failed or corrupt) ends
  // the prefix there, as a miss would (stats() counts the fallbacks).
  // Errors: INVALID_ARGUMENT (empty chain, buffers.size() != chain.size(),
  // unknown tenant, null buffer), OUT_OF_RANGE (a block larger than its
  // buffer), those of the RPC.
  absl::StatusOr<size_t> GetPrefixInto(std::span<const Hash128> chain,
                                       std::span<const BlockBuffer> buffers,
                                       const PrefixOptions& options = {}) {
    if (chain.empty()) return absl::InvalidArgumentError("GetPrefixInto: empty chain");
    if (buffers.size() != chain.size()) {
      return absl::InvalidArgumentError(absl::StrCat("GetPrefixInto: ", chain.size(),
                                                     " blocks but ", buffers.size(), " buffers"));
    }
    const std::string tenant = core_->Tenant(options.tenant);
    size_t read = 0;
    while (read < chain.size()) {
      const size_t n = std::min(rpc::kMaxChainBlocks, chain.size() - read);
      auto got = core_->ReadPrefixChunk(chain.subspan(read, n), buffers.subspan(read, n), tenant);
      if (!got.ok()) {
        return absl::Status(got.status().code(),
                            absl::StrCat("GetPrefixInto: ", got.status().message()));
      }
      read += *got;
      if (*got < n) break;
    }
    return read;
  }

  absl::Status PutBlock(const Hash128& block, std::string_view value,
                        const PutOptions& options = {}) {
    return Put(rpc::BlockObjectKey(block), value, options);
  }

  absl::StatusOr<std::string> GetBlock(const Hash128& block, const GetOptions& options = {}) {
    return Get(rpc::BlockObjectKey(block), options);
  }

  absl::StatusOr<size_t> GetBlockInto(const Hash128& block, void* buffer, size_t capacity,
                                      const GetOptions& options = {}) {
    return GetInto(rpc::BlockObjectKey(block), buffer, capacity, options);
  }

  // values[i] is blocks[i]'s; INVALID_ARGUMENT for every item if the sizes differ.
  std::vector<absl::Status> BatchPutBlocks(std::span<const Hash128> blocks,
                                           std::span<const std::string_view> values,
                                           const PutOptions& options = {}) {
    if (blocks.size() != values.size()) {
      return std::vector<absl::Status>(
          blocks.size(),
          absl::InvalidArgumentError(absl::StrCat("BatchPutBlocks: ", blocks.size(), " blocks but ",
                                                  values.size(), " values")));
    }
    const std::vector<std::string> keys = BlockObjectKeys(blocks);
    std::vector<PutItem> items(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) items[i] = {keys[i], values[i]};
    return core_->PutMany(items, options);
  }

  std::vector<absl::StatusOr<std::string>> BatchGetBlocks(std::span<const Hash128> blocks,
                                                          const GetOptions& options = {}) {
    const std::vector<std::string> keys = BlockObjectKeys(blocks);
    const std::vector<std::string_view> views(keys.begin(), keys.end());
    return BatchGet(views, options);
  }

  // ---- Registered memory ---------------------------------------------------------

  // Declares [addr, addr + length) as a buffer the caller reuses for puts and
  // GetInto. INVALID_ARGUMENT (null, empty), ALREADY_EXISTS (overlaps one).
  absl::Status RegisterBuffer(void* addr, size_t length) {
    return core_->buffers().Register(addr, length);
  }
  // NOT_FOUND unless `addr` starts a registered buffer.
  absl::Status UnregisterBuffer(void* addr) { return core_->buffers().Unregister(addr); }
  // Bytes from `addr` to the end of the registered buffer holding it (nullopt:
  // none does), so a caller can refuse a range outside registered memory.
  std::optional<uint64_t> RegisteredBytesFrom(const void* addr) const {
    return core_->buffers().RoomFrom(addr);
  }

  // ---- Introspection ---------------------------------------------------------------

  ClientStats stats() const { return core_->stats(); }
  const std::string& client_id() const { return core_->client_id(); }
  size_t cached_objects() const { return core_->cache().size(); }
  transport::Router& router() { return core_->router(); }

 private:
  explicit Client(std::unique_ptr<client_internal::ClientCore<C>> core) : core_(std::move(core)) {}

  static std::vector<std::string> BlockObjectKeys(std::span<const Hash128> blocks) {
    std::vector<std::string> keys;
    keys.reserve(blocks.size());
    for (const Hash128& b : blocks) keys.push_back(rpc::BlockObjectKey(b));
    return keys;
  }

  std::unique_ptr<client_internal::ClientCore<C>> core_;
};

}  // namespace mooncake::client

#endif  // MOONCAKE_STORE_CLIENT_H_
