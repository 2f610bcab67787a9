// Reading Mooncake-format request traces (one JSON object per line):
//
//   {"timestamp": 0, "input_length": 6758, "output_length": 500,
//    "hash_ids": [0, 1, 2, ...]}
//
// hash_ids names the request's prompt blocks (512 tokens each in the public
// traces), root first; equal ids mean equal prefixes. Unknown keys are
// skipped. This is a small, strict JSON reader for exactly this shape (no new
// dependency); anything else gets InvalidArgument naming the line and column.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_INDEX_MOONCAKE_TRACE_H_
#define MOONCAKE_INDEX_MOONCAKE_TRACE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/index/block_key.h"

namespace mooncake::index_internal {

using ::mooncake::AbslView;

// A cursor over one line; every error carries the column.
class JsonLineReader {
 public:
  explicit JsonLineReader(std::string_view s) : s_(s) {}

  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("column ", pos_ + 1, ": ", AbslView(what)));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == s_.size();
  }

  absl::StatusOr<std::string> String() {
    if (!Consume('"')) return Error("expected a string");
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\') {
        if (++pos_ == s_.size()) break;
        if (s_[pos_] == 'u') {
          if (pos_ + 4 >= s_.size()) return Error("truncated \\u escape");
          pos_ += 4;  // keys we care about are ASCII; keep a placeholder
          out.push_back('?');
        } else {
          out.push_back(s_[pos_]);
        }
      } else {
        out.push_back(s_[pos_]);
      }
      ++pos_;
    }
    if (pos_ == s_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }

  // A JSON number that must be an integer in [min, max]; a fraction is
  // accepted and truncated only when allow_fraction (timestamps).
  absl::StatusOr<int64_t> Integer(int64_t min, int64_t max, bool allow_fraction = false) {
    SkipSpace();
    const size_t start = pos_;
    bool negative = pos_ < s_.size() && s_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ == s_.size() || s_[pos_] < '0' || s_[pos_] > '9') return Error("expected a number");
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return Error("number overflows");
      v = v * 10 + d;
      ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
      if (!allow_fraction) return Error("expected an integer");
      while (pos_ < s_.size() &&
             (std::string_view("0123456789.eE+-").find(s_[pos_]) != std::string_view::npos)) {
        ++pos_;
      }
    }
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      pos_ = start;
      return Error("number out of range");
    }
    const int64_t value = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
    if (value < min || value > max) {
      pos_ = start;
      return Error(absl::StrCat("number ", value, " outside [", min, ", ", max, "]"));
    }
    return value;
  }

  // Skips any JSON value (for unknown keys), nesting at most kMaxDepth.
  absl::Status SkipValue(int depth = 0) {
    static constexpr int kMaxDepth = 32;
    if (depth > kMaxDepth) return Error("value nested too deeply");
    SkipSpace();
    if (pos_ == s_.size()) return Error("expected a value");
    const char c = s_[pos_];
    if (c == '"') return String().status();
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (Consume(close)) return absl::OkStatus();
      do {
        if (c == '{') {
          if (absl::Status st = String().status(); !st.ok()) return st;
          if (!Consume(':')) return Error("expected ':'");
        }
        if (absl::Status st = SkipValue(depth + 1); !st.ok()) return st;
      } while (Consume(','));
      return Consume(close) ? absl::OkStatus() : Error("unterminated array or object");
    }
    for (std::string_view word : {"true", "false", "null"}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return absl::OkStatus();
      }
    }
    return Integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), true)
        .status();
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

inline absl::Status ParseHashIds(JsonLineReader& r, std::vector<uint64_t>& out) {
  if (!r.Consume('[')) return r.Error("hash_ids must be an array");
  if (r.Consume(']')) return absl::OkStatus();
  do {
    absl::StatusOr<int64_t> id = r.Integer(0, std::numeric_limits<uint32_t>::max());
    if (!id.ok()) return id.status();
    out.push_back(static_cast<uint64_t>(*id));
  } while (r.Consume(','));
  return r.Consume(']') ? absl::OkStatus() : r.Error("expected ',' or ']' in hash_ids");
}

}  // namespace mooncake::index_internal

namespace mooncake::index {

struct TraceRequest {
  int64_t timestamp_ms = 0;
  int64_t input_length = 0;
  int64_t output_length = 0;
  std::vector<uint64_t> hash_ids;
};

// Parses one line. Requires "hash_ids" (ids in [0, 2^32)); the lengths and
// timestamp default to 0 when absent.
inline absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line) {
  index_internal::JsonLineReader r(line);
  TraceRequest req;
  bool has_ids = false;
  if (!r.Consume('{')) return r.Error("expected '{'");
  if (!r.Consume('}')) {
    do {
      absl::StatusOr<std::string> key = r.String();
      if (!key.ok()) return key.status();
      if (!r.Consume(':')) return r.Error("expected ':'");
      absl::Status st;
      constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
      if (*key == "hash_ids") {
        req.hash_ids.clear();
        st = index_internal::ParseHashIds(r, req.hash_ids);
        has_ids = true;
      } else if (*key == "timestamp") {
        absl::StatusOr<int64_t> v = r.Integer(0, kMax, /*allow_fraction=*/true);
        st = v.status();
        if (v.ok()) req.timestamp_ms = *v;
      } else if (*key == "input_length" || *key == "output_length") {
        absl::StatusOr<int64_t> v = r.Integer(0, kMax);
        st = v.status();
        if (v.ok()) (*key == "input_length" ? req.input_length : req.output_length) = *v;
      } else {
        st = r.SkipValue();
      }
      if (!st.ok()) return st;
    } while (r.Consume(','));
    if (!r.Consume('}')) return r.Error("expected ',' or '}'");
  }
  if (!r.AtEnd()) return r.Error("trailing characters after the object");
  if (!has_ids) return absl::InvalidArgumentError("missing \"hash_ids\"");
  return req;
}

// Parses a whole trace; blank lines are skipped. Errors name the line.
inline absl::StatusOr<std::vector<TraceRequest>> ParseTrace(std::string_view text) {
  std::vector<TraceRequest> out;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    absl::StatusOr<TraceRequest> req = ParseTraceLine(line);
    if (!req.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace line ", line_no, ", ", req.status().message()));
    }
    out.push_back(std::move(*req));
  }
  return out;
}

// Reads and parses the trace file at `path`. NOT_FOUND if it cannot be opened;
// parse errors name the path and the line.
inline absl::StatusOr<std::vector<TraceRequest>> ReadTraceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<TraceRequest>> trace = ParseTrace(text.str());
  if (!trace.ok()) {
    return absl::Status(trace.status().code(), absl::StrCat(path, ": ", trace.status().message()));
  }
  return trace;
}

// The flags the trace-replay benchmarks share: --trace=PATH and --block_bytes=N
// (raised to at least min_block_bytes). INVALID_ARGUMENT names an unknown flag.
struct TraceReplayFlags {
  std::string trace = "/work/shared/traces/conversation_trace.jsonl";
  uint64_t block_bytes = 64;
};

inline absl::StatusOr<TraceReplayFlags> ParseTraceReplayFlags(int argc, char** argv,
                                                              TraceReplayFlags flags,
                                                              uint64_t min_block_bytes) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.substr(0, 8) == "--trace=") {
      flags.trace = std::string(a.substr(8));
    } else if (a.substr(0, 14) == "--block_bytes=") {
      flags.block_bytes =
          std::max<uint64_t>(min_block_bytes, std::strtoull(argv[i] + 14, nullptr, 10));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", argv[i], " (--trace=PATH --block_bytes=N)"));
    }
  }
  return flags;
}

// Block keys for a trace request: the hash ids chained through BlockKeyer as
// one-token blocks, so equal id sequences give equal keys and a key names its
// whole prefix, as real block keys do.
inline std::vector<BlockKey> TraceChain(const BlockKeyer& keyer, const TraceRequest& req) {
  std::vector<uint32_t> ids(req.hash_ids.begin(), req.hash_ids.end());
  std::vector<BlockKey> keys(ids.size());
  BlockKey parent = keyer.root();
  for (size_t i = 0; i < ids.size(); ++i) {
    parent = keyer.Next(parent, std::span<const uint32_t>(&ids[i], 1));
    keys[i] = parent;
  }
  return keys;
}

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_MOONCAKE_TRACE_H_
