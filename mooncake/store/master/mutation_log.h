// MutationLog: where a master reports every change of its durable state, for
// a log that standby masters replay (mooncake/store/ha). A master without one
// (the default) reports nothing.
//
// What is reported is state, not operations: "the table entry `key` is now
// this object" and "`key` left the table", "segment `id` is mounted with this
// descriptor" and "it left", "tenant `name` has these capacities". Replaying
// the reports in order rebuilds the table, the segments and the tenants as
// they were; leases, heartbeats and put deadlines are soft state a new leader
// derives again.
//
// Ordering: object reports are made under the shard lock of the key, after
// the change, so the reports of one key are in the order of its changes. One
// operation's change of one key is one report (a replace's commit included:
// ObjectReplaced), so a replayer that stops anywhere sees it whole or not.
// Reports of different keys, segments and tenants may interleave in any
// order; a replayer must not assume more (an object may be reported before
// the mount of its segment; a replica on a segment that is gone at the end
// is dropped).
//
// Thread-safety: implementations are called concurrently from any thread,
// often under a shard lock: they must not block for long nor call the master.
#ifndef MOONCAKE_STORE_MASTER_MUTATION_LOG_H_
#define MOONCAKE_STORE_MASTER_MUTATION_LOG_H_

#include <cstdint>
#include <string_view>

#include "mooncake/store/master/object_meta.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::master {

class MutationLog {
 public:
  virtual ~MutationLog() = default;

  // The table entry `key` (a client key, or a ReplacementKey of a replace in
  // flight) is now `m`, pending or committed. `now_ns` is the master's clock
  // (to turn its deadlines into durations).
  virtual void ObjectSet(std::string_view key, const ObjectMeta& m, int64_t now_ns) = 0;
  // `key` left the table (removed, evicted, expired, revoked, timed out, lost
  // its last replica, or moved by a replace's commit).
  virtual void ObjectErased(std::string_view key) = 0;
  // A replace committed: the pending entry `replacement_key` left the table
  // and `m` is now the entry `key`, in place of the version it replaced. One
  // report, so a log never holds half of it (the replaced version gone and
  // the new one not there).
  virtual void ObjectReplaced(std::string_view key, std::string_view replacement_key,
                              const ObjectMeta& m, int64_t now_ns) = 0;
  virtual void SegmentMounted(uint64_t id, const store::proto::SegmentDescriptor& desc) = 0;
  virtual void SegmentUnmounted(uint64_t id) = 0;
  virtual void TenantSet(std::string_view name, uint64_t capacity_bytes,
                         uint64_t pinned_capacity_bytes) = 0;
};

}  // namespace mooncake::master

#endif  // MOONCAKE_STORE_MASTER_MUTATION_LOG_H_
