// BlockObjectProbe: the master's ObjectTable seen as an index::PrefixProbe, so
// PrefixQuery runs the one longest-prefix walk (index/match_prefix.h) over the
// block objects of a chain instead of a loop of its own.
//
// Block i of a chain is present when the object under its block object key
// (rpc::WriteBlockObjectKey, the layout of rpc/object_key.h) is in the table,
// is Visible(now) (committed, within its TTL, and in no group or in a visible
// one: a group member that is not visible ends the match), belongs to the
// probe's tenant, and on_hit(i, key, meta) accepts it. on_hit runs under the
// block's shard lock with the object's metadata: it records what the caller
// takes from a hit (replicas, a lease reference, a read) and may still refuse
// the block by returning false (an object neither in DRAM nor on SSD), which
// ends the match. Nothing is recorded for a miss: the walk stops there.
//
// Thread-safety: one probe per request (it owns the key it rewrites per
// block). Each call takes and releases one shard lock; on_hit must not call
// back into the table (object_table.h: no shard lock nests another).
// Complexity: one table lookup per call; no allocation after construction.
#ifndef MOONCAKE_STORE_MASTER_BLOCK_OBJECT_PROBE_H_
#define MOONCAKE_STORE_MASTER_BLOCK_OBJECT_PROBE_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/index/match_prefix.h"
#include "mooncake/store/master/object_meta.h"
#include "mooncake/store/master/object_table.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::master {

// on_hit(i, key, meta) -> bool, called under the shard lock of `key`.
template <typename F>
concept BlockHitVisitor =
    std::invocable<F&, size_t, const std::string&, ObjectMeta&> &&
    std::same_as < std::invoke_result_t<F&, size_t, const std::string&, ObjectMeta&>,
bool > ;

// Accepts every visible block of the tenant (an existence probe).
struct AcceptBlock {
  bool operator()(size_t, const std::string&, ObjectMeta&) const { return true; }
};

template <BlockHitVisitor OnHit = AcceptBlock>
class BlockObjectProbe {
 public:
  // `tenant` must outlive the probe.
  BlockObjectProbe(ObjectTable& table, std::string_view tenant, int64_t now_ns,
                   OnHit on_hit = OnHit())
      : table_(table),
        tenant_(tenant),
        now_ns_(now_ns),
        on_hit_(std::move(on_hit)),
        key_(rpc::BlockObjectKey(Hash128{})) {}

  bool operator()(size_t i, const Hash128& block) {
    rpc::WriteBlockObjectKey(block, &key_);
    MC_DASSERT(rpc::IsBlockObjectKey(key_), "block object key layout");
    return table_.With(key_, [&](ObjectTable::Shard& sh) {
      ObjectMeta* m = sh.Find(key_);
      if (m == nullptr || !m->Visible(now_ns_) || m->tenant != tenant_) return false;
      return on_hit_(i, std::as_const(key_), *m);
    });
  }

  // A chain as the PrefixQuery request carries it.
  bool operator()(size_t i, const store::proto::BlockKey& block) {
    return (*this)(i, rpc::FromProto(block));
  }

  // The block object key of the block probed last.
  const std::string& key() const { return key_; }

 private:
  ObjectTable& table_;
  std::string_view tenant_;
  int64_t now_ns_;
  OnHit on_hit_;
  std::string key_;  // rewritten in place per block
};

static_assert(index::PrefixProbe<BlockObjectProbe<>, Hash128>);
static_assert(index::PrefixProbe<BlockObjectProbe<>, store::proto::BlockKey>);

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_BLOCK_OBJECT_PROBE_H_
