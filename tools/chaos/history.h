// The chaos campaign's history (chaos.cc writes it, check_history.cc and the
// campaign itself read it back): one JSON object per line, flat (string and
// integer fields only), in the order events finished.
//
//   {"t":"meta","seed":7,"deadline_ms":30000,"start_ns":..,"end_ns":..,"evictions":0}
//   {"t":"op","c":3,"op":"put","key":"c3/k5","v":7,"inv_ns":..,"end_ns":..,"res":"ok",
//    "digest":..,"size":..,"code":""}
//   {"t":"fault","kind":"kill","target":"worker1","peer":"","start_ns":..,"end_ns":..,
//    "loses_data":0}
//   {"t":"rss","proc":"worker0","peak_kb":..,"bound_kb":..}
//
// op: put, get, remove, prefix (a GetPrefixInto over the client's block chain;
// its `v` is how many blocks it returned) and prefix_block (one returned block,
// judged like a get). res: ok, not_found, fail (any other error: `code` names
// it) or pending (never completed; end_ns is when the campaign gave up on it).
// v: the version put, or the version a read's bytes claim (their first 8
// bytes). digest: StableHash64 of the bytes put or read. Times: one monotonic
// clock (ns) for the whole campaign.
//
// The checker (CheckHistory) replays each key's operations in invoke order
// through ha_failover's KeyModel (every key has one writing client, so a key's
// operations never overlap) and judges each read:
// - LOST: a get answered NOT_FOUND while the model says the object must be
//   there (its last put was acknowledged, no remove started since, and no
//   fault with loses_data=1 happened since that put began).
// - GONE (with cause): the same NOT_FOUND where a loses_data fault (a single
//   master's SIGKILL: its metadata is in its memory only) happened since; the
//   cause is named, never silently dropped.
// - WRONG: a read (get or prefix block) whose bytes are not Value(key, v) for
//   a version v the model allows (a put of v acknowledged or unknown).
// - HANG: an operation pending, or whose end_ns - inv_ns passed deadline_ms.
// - Longest stall: the longest time in [start_ns, end_ns] in which no client
//   completed an operation OK (ok or not_found).
// - Memory: every rss line whose peak_kb exceeds bound_kb.
// A prefix read that returns fewer blocks than its chain is counted
// (prefix_short), never LOST: GetPrefixInto ends a prefix at a block it could
// not read (a replica behind a fault) as at a missing one; a real loss shows
// up at that key's next get (and at the final read of every key).
//
// Thread-safety: HistoryWriter is safe to call from every client thread; the
// rest are pure functions.
#ifndef MOONCAKE_TOOLS_CHAOS_HISTORY_H_
#define MOONCAKE_TOOLS_CHAOS_HISTORY_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/mutex.h"
#include "tools/ha_failover/workload.h"

namespace mooncake::chaos {

// One history line: field name to its text (strings unquoted).
using Record = std::map<std::string, std::string>;

inline uint64_t Digest(std::string_view bytes) { return StableHash64(bytes); }

// A flat JSON object of string and integer fields, as this file's writer
// writes them (strings need no escapes: keys, names and status codes only).
inline std::string ToJson(const Record& r, const std::vector<std::string>& numeric) {
  std::string out = "{";
  for (const auto& [k, v] : r) {
    if (out.size() > 1) out += ",";
    const bool number = std::find(numeric.begin(), numeric.end(), k) != numeric.end();
    absl::StrAppend(&out, "\"", k, "\":", number ? v : absl::StrCat("\"", v, "\""));
  }
  return out + "}";
}

// Parses one line written by ToJson; INVALID_ARGUMENT names what is wrong.
inline absl::StatusOr<Record> ParseLine(std::string_view line) {
  Record r;
  size_t i = line.find('{');
  if (i == std::string_view::npos) return absl::InvalidArgumentError("no '{'");
  ++i;
  auto skip = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
  };
  for (skip(); i < line.size() && line[i] != '}'; skip()) {
    if (line[i] != '"') return absl::InvalidArgumentError(absl::StrCat("bad key at ", i));
    const size_t key_end = line.find('"', i + 1);
    if (key_end == std::string_view::npos || key_end + 1 >= line.size() ||
        line[key_end + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("unterminated key at ", i));
    }
    std::string key(line.substr(i + 1, key_end - i - 1));
    i = key_end + 2;
    std::string value;
    if (i < line.size() && line[i] == '"') {
      const size_t end = line.find('"', i + 1);
      if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated string");
      value = std::string(line.substr(i + 1, end - i - 1));
      i = end + 1;
    } else {
      const size_t end = line.find_first_of(",}", i);
      if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated number");
      value = std::string(line.substr(i, end - i));
      i = end;
    }
    r[std::move(key)] = std::move(value);
  }
  if (i >= line.size()) return absl::InvalidArgumentError("no '}'");
  return r;
}

inline int64_t Int(const Record& r, const std::string& k, int64_t dflt = 0) {
  auto it = r.find(k);
  int64_t v = dflt;
  if (it != r.end() && !absl::SimpleAtoi(it->second, &v)) return dflt;
  return v;
}
inline uint64_t U64(const Record& r, const std::string& k) {
  auto it = r.find(k);
  uint64_t v = 0;
  if (it != r.end() && !absl::SimpleAtoi(it->second, &v)) return 0;
  return v;
}
inline std::string Str(const Record& r, const std::string& k) {
  auto it = r.find(k);
  return it == r.end() ? std::string() : it->second;
}

// Appends lines to a file; every line is flushed so a crashed campaign
// leaves a history up to its crash.
class HistoryWriter {
 public:
  static absl::StatusOr<std::unique_ptr<HistoryWriter>> Open(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write history ", path));
    return std::unique_ptr<HistoryWriter>(new HistoryWriter(f));
  }
  ~HistoryWriter() { std::fclose(file_); }
  HistoryWriter(const HistoryWriter&) = delete;
  HistoryWriter& operator=(const HistoryWriter&) = delete;

  void Append(const Record& r) {
    static const std::vector<std::string> kNumeric = {
        "seed",   "deadline_ms", "start_ns", "end_ns",  "evictions", "c",         "v",
        "inv_ns", "digest",      "size",     "peak_kb", "bound_kb",  "loses_data"};
    const std::string line = ToJson(r, kNumeric) + "\n";
    MutexLock lock(&mu_);
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
  }

 private:
  explicit HistoryWriter(FILE* f) : file_(f) {}
  Mutex mu_;
  FILE* const file_ ABSL_PT_GUARDED_BY(mu_);
};

inline absl::StatusOr<std::vector<Record>> ReadHistory(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no history file ", path));
  std::vector<Record> out;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    absl::StatusOr<Record> r = ParseLine(line);
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": ", r.status().message()));
    }
    out.push_back(*std::move(r));
  }
  return out;
}

struct CheckReport {
  std::map<std::string, uint64_t> ops_by_outcome;  // "put ok", "get not_found", ...
  std::map<std::string, uint64_t> faults_by_kind;
  uint64_t lost = 0;
  uint64_t wrong = 0;
  uint64_t hangs = 0;
  uint64_t gone_with_cause = 0;
  uint64_t prefix_short = 0;
  uint64_t memory_over = 0;
  uint64_t evictions = 0;
  int64_t longest_stall_ns = 0;
  int64_t stall_at_ns = 0;  // when the longest stall began (relative to start)
  int64_t longest_op_ns = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> rss_kb;  // proc -> peak, bound
  std::vector<std::string> anomalies;                         // the first few, named
  bool Passed() const {
    return lost == 0 && wrong == 0 && hangs == 0 && memory_over == 0 && evictions == 0;
  }
};

namespace chaos_internal {

inline void Note(CheckReport& r, std::string line) {
  if (r.anomalies.size() < 40) r.anomalies.push_back(std::move(line));
}

// The model's judgement of one read (get or prefix_block) of `key`.
inline void JudgeRead(const Record& op, const ha_failover::KeyModel& m, const std::string& cause,
                      CheckReport& r) {
  const std::string key = Str(op, "key");
  const std::string res = Str(op, "res");
  if (res == "not_found") {
    if (m.maybe_absent && !cause.empty() && !m.versions.empty()) ++r.gone_with_cause;
    if (m.maybe_absent) return;
    ++r.lost;
    Note(r, absl::StrCat("LOST: c", Str(op, "c"), " ", key, " NOT_FOUND at ", Int(op, "end_ns"),
                         "; expected version ", m.versions.back()));
    return;
  }
  if (res != "ok") return;
  const uint64_t v = U64(op, "v");
  const bool allowed = std::find(m.versions.begin(), m.versions.end(), v) != m.versions.end();
  if (allowed && U64(op, "digest") == Digest(ha_failover::Value(key, v))) return;
  ++r.wrong;
  std::string allowed_list;
  for (uint64_t a : m.versions) absl::StrAppend(&allowed_list, a, " ");
  Note(r, absl::StrCat("WRONG: c", Str(op, "c"), " ", Str(op, "op"), " ", key, " at ",
                       Int(op, "end_ns"), " read ", Int(op, "size"), " bytes claiming version ", v,
                       allowed ? " (digest differs)" : " (version not allowed)",
                       "; allowed: ", m.maybe_absent ? "absent " : "", allowed_list));
}

// Replays one key's operations (sorted by invoke time) through the model.
inline void ReplayKey(std::vector<const Record*>& ops, const std::vector<const Record*>& losses,
                      CheckReport& r) {
  std::sort(ops.begin(), ops.end(),
            [](const Record* a, const Record* b) { return Int(*a, "inv_ns") < Int(*b, "inv_ns"); });
  ha_failover::KeyModel m;
  std::string cause;  // the loses_data fault that widened the model, if any
  int64_t since = 0;  // losses after this may have taken the object
  for (const Record* op : ops) {
    for (const Record* f : losses) {
      const int64_t t = Int(*f, "start_ns");
      if (t >= since && t <= Int(*op, "end_ns")) {
        m.maybe_absent = true;
        cause = absl::StrCat(Str(*f, "kind"), " ", Str(*f, "target"));
      }
    }
    since = Int(*op, "inv_ns");
    const std::string kind = Str(*op, "op");
    const std::string res = Str(*op, "res");
    if (kind == "put") {
      const uint64_t v = U64(*op, "v");
      if (res == "ok") {
        m.versions = {v};
        m.maybe_absent = false;
        cause.clear();
      } else {
        m.versions.push_back(v);
      }
    } else if (kind == "remove") {
      if (res == "ok" || res == "not_found") m.versions.clear();
      m.maybe_absent = true;
    } else if (kind == "get" || kind == "prefix_block") {
      JudgeRead(*op, m, cause, r);
    }
  }
}

inline void LongestStall(std::vector<int64_t>& ok_ends, int64_t start, int64_t end,
                         CheckReport& r) {
  std::sort(ok_ends.begin(), ok_ends.end());
  int64_t prev = start;
  ok_ends.push_back(end);
  for (int64_t t : ok_ends) {
    if (t - prev > r.longest_stall_ns) {
      r.longest_stall_ns = t - prev;
      r.stall_at_ns = prev - start;
    }
    prev = std::max(prev, t);
  }
}

}  // namespace chaos_internal

// Judges a whole history (see the top of this file for the rules).
inline CheckReport CheckHistory(const std::vector<Record>& history) {
  CheckReport r;
  int64_t start = 0, end = 0, deadline_ns = 30'000'000'000;
  std::map<std::string, std::vector<const Record*>> by_key;
  std::vector<const Record*> losses;
  std::vector<int64_t> ok_ends;
  for (const Record& rec : history) {  // the meta line comes last: read it first
    if (Str(rec, "t") != "meta") continue;
    start = Int(rec, "start_ns", start);
    end = Int(rec, "end_ns", end);
    deadline_ns = Int(rec, "deadline_ms", deadline_ns / 1'000'000) * 1'000'000;
    r.evictions = std::max<uint64_t>(r.evictions, U64(rec, "evictions"));
  }
  for (const Record& rec : history) {
    const std::string t = Str(rec, "t");
    if (t == "fault") {
      ++r.faults_by_kind[Str(rec, "kind")];
      if (Int(rec, "loses_data") != 0) losses.push_back(&rec);
    } else if (t == "rss") {
      const int64_t peak = Int(rec, "peak_kb"), bound = Int(rec, "bound_kb");
      auto& [p, b] = r.rss_kb[Str(rec, "proc")];
      p = std::max(p, peak);
      b = bound;
      if (peak > bound) {
        ++r.memory_over;
        chaos_internal::Note(r, absl::StrCat("MEMORY: ", Str(rec, "proc"), " peak ", peak,
                                             " KiB over its bound ", bound, " KiB"));
      }
    } else if (t == "op") {
      const std::string op = Str(rec, "op"), res = Str(rec, "res");
      ++r.ops_by_outcome[absl::StrCat(op, " ", res)];
      const int64_t took = Int(rec, "end_ns") - Int(rec, "inv_ns");
      r.longest_op_ns = std::max(r.longest_op_ns, took);
      if (res == "pending" || took > deadline_ns) {
        ++r.hangs;
        chaos_internal::Note(r, absl::StrCat("HANG: c", Str(rec, "c"), " ", op, " ",
                                             Str(rec, "key"), " ", res, " after ", took / 1'000'000,
                                             " ms (deadline ", deadline_ns / 1'000'000, " ms)"));
      }
      if (res == "ok" || res == "not_found") ok_ends.push_back(Int(rec, "end_ns"));
      if (op == "prefix" && res == "ok" && Int(rec, "v") < Int(rec, "size")) {
        ++r.prefix_short;  // size: the chain's length; v: blocks returned
      }
      if (op != "prefix") by_key[Str(rec, "key")].push_back(&rec);
    }
  }
  for (auto& [key, ops] : by_key) chaos_internal::ReplayKey(ops, losses, r);
  if (end > start) chaos_internal::LongestStall(ok_ends, start, end, r);
  if (r.evictions > 0) {
    chaos_internal::Note(r, absl::StrCat("MODEL: the master evicted ", r.evictions,
                                         " objects; the no-eviction model does not hold"));
  }
  return r;
}

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_HISTORY_H_
