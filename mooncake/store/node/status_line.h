// StatusReporter: the node's one-line periodic status, e.g.
//
//   status: objects=1204 used=812.0MiB/1.0GiB (79.3%) puts/s=310.5 gets/s=2210.0
//           evictions/s=0.0 workers=2
//
// (one line). Rates are since the previous line. gets/s counts GetReplicas
// calls the master answered: gets a client served from its metadata cache
// never reach the master. A worker-only node reports its own segments and
// heartbeats instead.
//
// Thread-safety: thread-compatible (the binary's main loop owns one).
#ifndef MOONCAKE_STORE_NODE_STATUS_LINE_H_
#define MOONCAKE_STORE_NODE_STATUS_LINE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"

namespace mooncake::node {

// What a node looks like at one instant (StoreNode::Snapshot fills it).
struct NodeSnapshot {
  int64_t time_ns = 0;  // monotonic
  bool has_master = false;
  int64_t objects = 0;
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t puts_committed = 0;  // monotonic counters
  uint64_t gets = 0;
  uint64_t evictions = 0;
  size_t workers = 0;
  // The master's mounted segments per worker id (what EventReporter compares).
  std::map<std::string, size_t> worker_segments;
  bool has_worker = false;
  std::string master_address;  // the master this worker joined
  size_t segments_mounted = 0;
  size_t segments_total = 0;
  uint64_t segment_bytes_total = 0;
  uint64_t heartbeats_ok = 0;
  uint64_t heartbeats_failed = 0;
  uint64_t remounts = 0;
  bool has_tier = false;  // the worker's SSD tier
  uint64_t tier_objects = 0;
  uint64_t tier_used_bytes = 0;
  uint64_t tier_capacity_bytes = 0;
  uint64_t tier_syncs = 0;  // the tier's totals since the worker started
  uint64_t tier_io_errors = 0;
  uint64_t tier_failed_syncs = 0;
  uint64_t tier_corrupt_records = 0;
  uint64_t copies_done = 0;  // the copy agent's totals (copy_agent.h)
  uint64_t copies_failed = 0;
  uint64_t copied_bytes = 0;
};

// The time at the start of the binary's running lines (serving, status,
// events, shutdown): RFC 3339 in UTC with milliseconds,
// "2026-12-04T14:30:05.123Z", so lines from hosts in several time zones
// sort together.
inline std::string LogTimestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// "812.0MiB" (binary units, one decimal).
inline std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, "B");
  return absl::StrFormat("%.1f%s", v, kUnits[unit]);
}

class StatusReporter {
 public:
  // The line for `now`; rates against the previous call's snapshot (the
  // first line has none and says so).
  std::string Line(const NodeSnapshot& now) {
    std::string line = "status:";
    if (now.has_master) {
      const double pct = now.capacity_bytes == 0 ? 0.0
                                                 : 100.0 * static_cast<double>(now.used_bytes) /
                                                       static_cast<double>(now.capacity_bytes);
      absl::StrAppend(&line, " objects=", now.objects, " used=", HumanBytes(now.used_bytes), "/",
                      HumanBytes(now.capacity_bytes), absl::StrFormat(" (%.1f%%)", pct));
      if (prev_.has_value() && prev_->has_master && now.time_ns > prev_->time_ns) {
        const double secs = static_cast<double>(now.time_ns - prev_->time_ns) / 1e9;
        absl::StrAppend(&line,
                        absl::StrFormat(" puts/s=%.1f gets/s=%.1f evictions/s=%.1f",
                                        Rate(now.puts_committed, prev_->puts_committed, secs),
                                        Rate(now.gets, prev_->gets, secs),
                                        Rate(now.evictions, prev_->evictions, secs)));
      } else {
        absl::StrAppend(&line, " puts/s=- gets/s=- evictions/s=-");
      }
      absl::StrAppend(&line, " workers=", now.workers);
    }
    if (now.has_worker) {
      absl::StrAppend(&line, " segments=", now.segments_mounted, "/", now.segments_total,
                      " mounted (", HumanBytes(now.segment_bytes_total), ")");
      if (!now.has_master) {
        absl::StrAppend(&line, " heartbeats ok=", now.heartbeats_ok,
                        " failed=", now.heartbeats_failed);
      }
      if (now.has_tier) {
        absl::StrAppend(&line, " ssd=", now.tier_objects, " objects ",
                        HumanBytes(now.tier_used_bytes), "/", HumanBytes(now.tier_capacity_bytes));
        // Trouble only: these stay 0 on a healthy disk.
        const uint64_t errors = now.tier_io_errors + now.tier_corrupt_records;
        if (errors != 0) {
          absl::StrAppend(&line, " ssd_io_errors=", now.tier_io_errors,
                          " ssd_corrupt=", now.tier_corrupt_records);
        }
      }
    }
    MC_ASSERT(!prev_.has_value() || now.time_ns >= prev_->time_ns, "snapshots out of order");
    prev_ = now;
    return line;
  }

 private:
  static double Rate(uint64_t now, uint64_t before, double secs) {
    // A counter never goes back; if it does (a restart), report 0, not junk.
    return now >= before ? static_cast<double>(now - before) / secs : 0.0;
  }

  std::optional<NodeSnapshot> prev_;
};

// EventReporter: lines for what changed between two snapshots, printed as it
// happens (the binary polls every second), so an operator sees membership and
// trouble without reading counters:
//
//   event: worker joined: tcp://10.0.0.2:41000|shm://... (4 segments)
//   event: worker left: tcp://10.0.0.2:41000|shm://... (unmounted, or expired
//     after missed heartbeats)
//   event: master 10.0.0.1:50051 is not answering heartbeats (3 failed); ...
//   event: master 10.0.0.1:50051 answers heartbeats again; segments remounted
//     (4 of 4 mounted)
//   event: SSD tier: 2 new I/O errors, 0 new corrupt records
//
// The first snapshot only sets the baseline (no events).
// Thread-safety: thread-compatible.
class EventReporter {
 public:
  std::vector<std::string> Events(const NodeSnapshot& now) {
    std::vector<std::string> out;
    if (prev_.has_value()) {
      const NodeSnapshot& was = *prev_;
      if (now.has_master) {
        for (const auto& [id, segments] : now.worker_segments) {
          if (!was.worker_segments.contains(id)) {
            out.push_back(absl::StrCat("event: worker joined: ", id, " (", segments,
                                       segments == 1 ? " segment)" : " segments)"));
          }
        }
        for (const auto& [id, segments] : was.worker_segments) {
          if (!now.worker_segments.contains(id)) {
            out.push_back(absl::StrCat("event: worker left: ", id,
                                       " (unmounted, or expired after missed heartbeats)"));
          }
        }
      }
      if (now.has_worker && !now.has_master) {
        const bool failed_more = now.heartbeats_failed > was.heartbeats_failed;
        const bool ok_more = now.heartbeats_ok > was.heartbeats_ok;
        if (!failing_ && failed_more && !ok_more) {
          failing_ = true;
          out.push_back(absl::StrCat(
              "event: master ", now.master_address, " is not answering heartbeats (",
              now.heartbeats_failed - was.heartbeats_failed,
              " failed); this worker's objects cannot be found through it until it returns"));
        } else if (failing_ && ok_more) {
          failing_ = false;
          out.push_back(
              absl::StrCat("event: master ", now.master_address, " answers heartbeats again",
                           now.remounts > was.remounts ? "; segments remounted (" : " (",
                           now.segments_mounted, " of ", now.segments_total, " mounted)"));
        } else if (now.segments_mounted != was.segments_mounted && !failing_) {
          out.push_back(absl::StrCat("event: ", now.segments_mounted, " of ", now.segments_total,
                                     " segments mounted with the master ", now.master_address));
        }
      }
      if (now.has_tier) {
        const uint64_t io = now.tier_io_errors - std::min(now.tier_io_errors, was.tier_io_errors);
        const uint64_t corrupt =
            now.tier_corrupt_records - std::min(now.tier_corrupt_records, was.tier_corrupt_records);
        if (io != 0 || corrupt != 0) {
          out.push_back(absl::StrCat("event: SSD tier: ", io, " new I/O errors, ", corrupt,
                                     " new corrupt records (dropped, never served)"));
        }
      }
    }
    prev_ = now;
    return out;
  }

 private:
  std::optional<NodeSnapshot> prev_;
  bool failing_ = false;
};

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_STATUS_LINE_H_
