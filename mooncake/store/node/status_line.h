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

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  bool has_worker = false;
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
};

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

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_STATUS_LINE_H_
