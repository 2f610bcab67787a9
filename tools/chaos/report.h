// The chaos campaign's summary, from a CheckReport (history.h): faults by
// kind, operations by outcome, lost / wrong / hangs, the longest stall, peak
// RSS against each process's bound. Printed by the campaign (chaos.cc) and by
// the standalone checker (check_history.cc).
//
// Thread-safety: a pure function.
#ifndef MOONCAKE_TOOLS_CHAOS_REPORT_H_
#define MOONCAKE_TOOLS_CHAOS_REPORT_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/chaos/history.h"

namespace mooncake::chaos {

inline std::string FormatReport(const CheckReport& r) {
  std::string out = "faults by kind:";
  uint64_t faults = 0;
  for (const auto& [k, n] : r.faults_by_kind) {
    absl::StrAppend(&out, " ", k, "=", n);
    faults += n;
  }
  absl::StrAppend(&out, " (", faults, " in all)\noperations by outcome:");
  uint64_t ops = 0;
  for (const auto& [k, n] : r.ops_by_outcome) {
    absl::StrAppend(&out, "\n  ", k, " ", n);
    ops += n;
  }
  absl::StrAppend(&out, "\n  (", ops, " in all)\n");
  absl::StrAppend(&out, "lost=", r.lost, " wrong=", r.wrong, " hangs=", r.hangs,
                  " gone_with_cause=", r.gone_with_cause, " prefix_short=", r.prefix_short,
                  " evictions=", r.evictions, "\n");
  absl::StrAppend(
      &out, absl::StrFormat("longest stall %.3f s (from %.1f s), longest op %.3f s\n",
                            r.longest_stall_ns / 1e9, r.stall_at_ns / 1e9, r.longest_op_ns / 1e9));
  absl::StrAppend(&out, "peak RSS (MiB, bound):");
  for (const auto& [proc, pb] : r.rss_kb) {
    absl::StrAppend(&out,
                    absl::StrFormat(" %s %.0f/%.0f", proc, pb.first / 1024.0, pb.second / 1024.0));
  }
  absl::StrAppend(&out, "\n");
  for (const std::string& a : r.anomalies) absl::StrAppend(&out, "  ", a, "\n");
  return out;
}

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_REPORT_H_
