// Membership: MountSegment, UnmountSegment, Heartbeat, and dropping the
// segments of workers that left or went silent.
//
// Dropping a segment is O(objects): every shard is walked once per call
// (several segments are dropped in one walk). It is rare (a worker leaving)
// and the shards are locked one at a time, so reads of other shards go on.
#ifndef MOONCAKE_STORE_MASTER_INTERNAL_MEMBERSHIP_PATH_H_
#define MOONCAKE_STORE_MASTER_INTERNAL_MEMBERSHIP_PATH_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/master/internal/master_state.h"
#include "mooncake/store/master/internal/replication_path.h"
#include "mooncake/store/master/internal/tier_path.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master_internal {

namespace proto = ::mooncake::store::proto;

// Removes every replica on `segments` (unmounting them first, so no new put
// lands there) and every committed object left without a replica. Returns
// the replicas dropped.
template <typename A, typename P>
uint64_t DropSegments(MasterState<A, P>& s, const std::vector<uint64_t>& segments) {
  if (segments.empty()) return 0;
  for (const uint64_t id : segments) {
    if (s.pool.Unmount(id).ok() && s.log != nullptr) s.log->SegmentUnmounted(id);
  }  // gone already: fine
  const int64_t now = s.Now();
  const absl::flat_hash_set<uint64_t> dead(segments.begin(), segments.end());
  auto on_dead = [&](const Replica& r) { return dead.contains(r.segment_id); };
  uint64_t dropped = 0;
  std::vector<std::tuple<std::string, PinLevel, uint64_t>> charges;  // (tenant, pin, bytes)
  std::vector<std::string> lost;  // committed objects with no replica left
  s.table.ForEach([&](ObjectTable::Shard& sh) {
    for (auto it = sh.objects.begin(); it != sh.objects.end();) {
      ObjectMeta& m = it->second;
      const size_t n =
          static_cast<size_t>(std::count_if(m.replicas.begin(), m.replicas.end(), on_dead));
      if (n == 0) {
        ++it;
        continue;
      }
      master::EraseReplicasIf(m.replicas, on_dead);
      dropped += n;
      charges.emplace_back(m.tenant, m.pin, m.size_bytes * n);
      // An object whose copy is on (or going to) a live worker's SSD stays.
      if (m.committed() && m.replicas.empty() && m.ssd == master::SsdState::kNone) {
        lost.push_back(it->first.str());
        Retired r = s.RetireLocked(sh, it++, 0, 0);  // nothing left to free or defer
        MC_DASSERT(r.to_free.empty() && r.charge == 0, "no replica left");
        continue;
      }
      s.LogSet(it->first, m, now);
      NoteUnderReplicated(s, it->first, m, now);  // copied back by the repair planner
      ++it;
    }
    for (auto& [id, d] : sh.deferred) master::EraseReplicasIf(d.replicas, on_dead);
  });
  for (const auto& [tenant, pin, bytes] : charges) s.ReleaseCharge(tenant, pin, bytes);
  for (const std::string& key : lost) s.evictor.Erase(key);
  return dropped;
}

template <typename A, typename P>
absl::StatusOr<proto::MountSegmentResponse> MountSegment(MasterState<A, P>& s,
                                                         const proto::MountSegmentRequest& req) {
  ASSIGN_OR_RETURN(const uint64_t id, s.pool.Mount(req.segment()));
  if (s.log != nullptr) {
    if (auto desc = s.pool.Descriptor(id); desc.has_value()) s.log->SegmentMounted(id, *desc);
  }
  s.workers.AddSegment(req.segment().worker_id(), id, s.Now());
  proto::MountSegmentResponse resp;
  resp.set_segment_id(id);
  resp.set_heartbeat_interval_ms(static_cast<uint64_t>(s.options.membership.heartbeat_interval_ms));
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::UnmountSegmentResponse> UnmountSegment(
    MasterState<A, P>& s, const proto::UnmountSegmentRequest& req) {
  RETURN_IF_ERROR(s.workers.RemoveSegment(req.worker_id(), req.segment_id()));
  // A worker leaves with its last segment, and its SSD tier and the copies
  // it was to run with it.
  if (!s.workers.Contains(req.worker_id())) {
    DropTierWorker(s, req.worker_id());
    DropCopyWorker(s, req.worker_id());
  }
  proto::UnmountSegmentResponse resp;
  resp.set_dropped_replicas(DropSegments(s, {req.segment_id()}));
  return resp;
}

template <typename A, typename P>
absl::StatusOr<proto::HeartbeatResponse> Heartbeat(MasterState<A, P>& s,
                                                   const proto::HeartbeatRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("heartbeat without worker_id");
  proto::HeartbeatResponse resp;
  resp.set_remount_required(!s.workers.Heartbeat(req.worker_id(), req.sequence(), s.Now()));
  resp.set_heartbeat_interval_ms(static_cast<uint64_t>(s.options.membership.heartbeat_interval_ms));
  return resp;
}

// Segment ids -> descriptors as mounted; unmounted and never-assigned ids
// are told apart (SegmentState), never an error for the whole call.
template <typename A, typename P>
absl::StatusOr<proto::DescribeSegmentsResponse> DescribeSegments(
    MasterState<A, P>& s, const proto::DescribeSegmentsRequest& req) {
  if (req.segment_ids().empty()) {
    return absl::InvalidArgumentError("DescribeSegments without segment ids");
  }
  if (static_cast<size_t>(req.segment_ids_size()) > rpc::kMaxDescribeSegments) {
    return absl::InvalidArgumentError(absl::StrCat("DescribeSegments of ", req.segment_ids_size(),
                                                   " ids exceeds the limit of ",
                                                   rpc::kMaxDescribeSegments, "; split the call"));
  }
  proto::DescribeSegmentsResponse resp;
  resp.mutable_segments()->Reserve(req.segment_ids_size());
  for (const uint64_t id : req.segment_ids()) {
    proto::SegmentInfo* info = resp.add_segments();
    info->set_segment_id(id);
    auto [state, desc] = s.pool.Describe(id);
    using IdState = typename decltype(s.pool)::IdState;
    switch (state) {
      case IdState::kMounted:
        info->set_state(proto::SEGMENT_MOUNTED);
        *info->mutable_segment() = std::move(*desc);
        break;
      case IdState::kUnmounted:
        info->set_state(proto::SEGMENT_UNMOUNTED);
        break;
      case IdState::kUnknown:
        info->set_state(proto::SEGMENT_UNKNOWN);
        break;
    }
  }
  MC_DASSERT(resp.segments_size() == req.segment_ids_size(), "one answer per id");
  return resp;
}

// Tick: drops the workers that stopped heartbeating. Returns (workers, replicas).
template <typename A, typename P>
std::pair<uint64_t, uint64_t> ExpireWorkers(MasterState<A, P>& s, int64_t now) {
  std::vector<master::ExpiredWorker> gone = s.workers.Expire(now);
  std::vector<uint64_t> segments;
  for (const master::ExpiredWorker& w : gone) {
    DropTierWorker(s, w.worker_id);
    DropCopyWorker(s, w.worker_id);
    segments.insert(segments.end(), w.segment_ids.begin(), w.segment_ids.end());
  }
  return {gone.size(), DropSegments(s, segments)};
}

}  // namespace mooncake::master_internal

#endif  // MOONCAKE_STORE_MASTER_INTERNAL_MEMBERSHIP_PATH_H_
