// Drain: what a store node says and parses around Worker::Drain (worker.h):
// the query of POST /drain and POST /preempt, and the JSON and one-line
// summaries of a proto::DrainStatus (docs/store_binary.md, "Draining").
//
//   POST /drain?deadline_ms=N[&bandwidth=B]   drain, answer the status JSON,
//                                              then unmount (the node keeps
//                                              serving HTTP until SIGTERM)
//   POST /preempt?deadline_ms=N[&bandwidth=B] the same for a cloud's spot
//                                              notice, with a timeline
//
// deadline_ms is required, in [1, kMaxDrainDeadlineMs]; bandwidth is bytes
// per second with an optional K/M/G/T suffix (ParseByteSize), 0 or absent:
// the master's default. Any other parameter is refused, so a typo never
// drains with defaults.
//
// Pure functions; thread-safe.
#ifndef MOONCAKE_STORE_NODE_DRAIN_H_
#define MOONCAKE_STORE_NODE_DRAIN_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/store/node/http_request.h"
#include "mooncake/store/node/store_node_options.h"
#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::node {

struct DrainParams {
  int64_t deadline_ms = 0;               // > 0
  uint64_t bandwidth_bytes_per_sec = 0;  // 0: the master's default
};

// The query of POST /drain and /preempt. INVALID_ARGUMENT with a message a
// person can act on (the HTTP answer is 400 with it).
inline absl::StatusOr<DrainParams> ParseDrainQuery(std::string_view query) {
  for (std::string_view rest = query; !rest.empty();) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const std::string_view name = pair.substr(0, pair.find('='));
    if (!name.empty() && name != "deadline_ms" && name != "bandwidth") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter '", AbslView(name),
                       "': want deadline_ms=N (milliseconds) and optionally bandwidth=B "
                       "(bytes per second, e.g. 1G)"));
    }
  }
  DrainParams p;
  auto deadline = QueryParameter(query, "deadline_ms");
  if (!deadline.ok()) return deadline.status();
  if (!deadline->has_value()) {
    return absl::InvalidArgumentError("deadline_ms is required: POST /drain?deadline_ms=30000");
  }
  if (!absl::SimpleAtoi(AbslView(**deadline), &p.deadline_ms) || p.deadline_ms < 1 ||
      p.deadline_ms > kMaxDrainDeadlineMs) {
    return absl::InvalidArgumentError(absl::StrCat("deadline_ms='", AbslView(**deadline),
                                                   "': want an integer in [1, ",
                                                   kMaxDrainDeadlineMs, "] (milliseconds)"));
  }
  auto bandwidth = QueryParameter(query, "bandwidth");
  if (!bandwidth.ok()) return bandwidth.status();
  if (bandwidth->has_value()) {
    absl::StatusOr<uint64_t> b = ParseByteSize("bandwidth", **bandwidth);
    if (!b.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bandwidth='", AbslView(**bandwidth),
          "': want bytes per second with an optional K, M, G or T suffix (0: the master's "
          "default)"));
    }
    p.bandwidth_bytes_per_sec = *b;
  }
  MC_DASSERT(p.deadline_ms > 0, "a parsed drain has a deadline");
  return p;
}

inline std::string_view DrainStateName(store::proto::DrainState s) {
  switch (s) {
    case store::proto::DRAIN_STATE_NONE:
      return "none";
    case store::proto::DRAIN_RUNNING:
      return "running";
    case store::proto::DRAIN_DONE:
      return "done";
    case store::proto::DRAIN_DEADLINE:
      return "deadline";
    case store::proto::DRAIN_CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

// The status's fields as JSON members, without braces.
inline std::string DrainStatusJsonFields(const store::proto::DrainStatus& s) {
  return absl::StrCat(
      "\"state\":\"", AbslView(DrainStateName(s.state())),
      "\",\"objects_total\":", s.objects_total(), ",\"objects_moved\":", s.objects_moved(),
      ",\"objects_dropped\":", s.objects_dropped(), ",\"objects_left\":", s.objects_left(),
      ",\"objects_gone\":", s.objects_gone(), ",\"bytes_moved\":", s.bytes_moved(),
      ",\"copies_failed\":", s.copies_failed(), ",\"elapsed_ms\":", s.elapsed_ms(),
      ",\"deadline_ms\":", s.deadline_ms());
}

// `unmounted`: whether the node's worker left the pool after the drain.
inline std::string DrainStatusJson(const store::proto::DrainStatus& s, bool unmounted) {
  return absl::StrCat("{", DrainStatusJsonFields(s),
                      ",\"unmounted\":", unmounted ? "true" : "false", "}\n");
}

// What a spot notice took, in ms since the notice arrived.
struct PreemptTimeline {
  int64_t drain_start_ms = 0;  // DrainWorker sent
  int64_t drain_done_ms = 0;   // the drain ended (or gave up)
  int64_t done_ms = 0;         // the worker unmounted: the node may go
  uint64_t bytes_moved = 0;
};

inline std::string PreemptJson(const store::proto::DrainStatus& s, const PreemptTimeline& t,
                               bool unmounted) {
  return absl::StrCat("{", DrainStatusJsonFields(s),
                      ",\"unmounted\":", unmounted ? "true" : "false",
                      ",\"timeline\":{\"notice_ms\":0", ",\"drain_start_ms\":", t.drain_start_ms,
                      ",\"drain_done_ms\":", t.drain_done_ms, ",\"bytes_moved\":", t.bytes_moved,
                      ",\"done_ms\":", t.done_ms, "}}\n");
}

// "drain done in 1234 ms: 10 of 12 objects moved (5242880 bytes), 2 dropped, 0 left,
// 0 gone, 0 copies failed" (the store binary logs it).
inline std::string DrainSummaryLine(const store::proto::DrainStatus& s) {
  return absl::StrCat("drain ", AbslView(DrainStateName(s.state())), " in ", s.elapsed_ms(),
                      " ms: ", s.objects_moved(), " of ", s.objects_total(), " objects moved (",
                      s.bytes_moved(), " bytes), ", s.objects_dropped(), " dropped, ",
                      s.objects_left(), " left, ", s.objects_gone(), " gone, ", s.copies_failed(),
                      " copies failed");
}

}  // namespace mooncake::node

#endif  // MOONCAKE_STORE_NODE_DRAIN_H_
