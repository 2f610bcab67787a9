// policy_report: every eviction policy on the real trace(s) and on generated
// traces, as hit rate over LRU's, with the offline Belady reference.
//
//   policy_report [--trace=PATH]... [--generated=all|NAME,NAME...]
//                 [--seed=1] [--block_tokens=512]
//                 [--capacities=500000,1000000,3000000,10000000]
//                 [--summary_tokens=3000000] [--markdown]
//
// Replay and token accounting are trace_replay's (mooncake/index/trace_replay.h,
// TraceChain): a capacity of C tokens is floor(C / block_tokens) blocks, a
// request's hit stops at its first missing block. Generated traces come from
// the presets of mooncake/index/trace_generator.h with --seed. Per trace it
// prints the trace's shape and a table of hit rates; then one summary row per
// trace at --summary_tokens: each online policy / LRU, Belady / LRU and
// Belady's hit rate (--markdown: as a Markdown table). Policies run with
// their defaults and no per-trace settings.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/index/belady_policy.h"
#include "mooncake/index/conversation_policy.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/reuse_depth_policy.h"
#include "mooncake/index/s3fifo_policy.h"
#include "mooncake/index/trace_generator.h"
#include "mooncake/index/trace_replay.h"
#include "mooncake/index/trace_shape.h"

namespace mooncake::index {
namespace {

struct Args {
  std::vector<std::string> traces;
  std::vector<std::string> presets;
  uint64_t seed = 1;
  uint64_t block_tokens = 512;
  std::vector<uint64_t> capacities_tokens = {500000, 1000000, 3000000, 10000000};
  uint64_t summary_tokens = 3000000;
  bool markdown = false;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view flag) -> std::optional<absl::string_view> {
      if (a.substr(0, flag.size()) == flag) return AbslView(a.substr(flag.size()));
      return std::nullopt;
    };
    bool ok = true;
    if (auto v = value("--trace=")) {
      args.traces.emplace_back(*v);
    } else if (auto v = value("--generated=")) {
      if (*v == "all") {
        args.presets = TracePresetNames();
      } else {
        for (absl::string_view p : absl::StrSplit(*v, ',')) args.presets.emplace_back(p);
      }
    } else if (auto v = value("--seed=")) {
      ok = absl::SimpleAtoi(*v, &args.seed);
    } else if (auto v = value("--block_tokens=")) {
      ok = absl::SimpleAtoi(*v, &args.block_tokens) && args.block_tokens > 0;
    } else if (auto v = value("--summary_tokens=")) {
      ok = absl::SimpleAtoi(*v, &args.summary_tokens) && args.summary_tokens > 0;
    } else if (auto v = value("--capacities=")) {
      args.capacities_tokens.clear();
      for (absl::string_view part : absl::StrSplit(*v, ',')) {
        uint64_t c = 0;
        ok = ok && absl::SimpleAtoi(part, &c) && c > 0;
        args.capacities_tokens.push_back(c);
      }
    } else if (a == "--markdown") {
      args.markdown = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument: ", AbslView(a)));
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value in ", AbslView(a)));
  }
  if (args.traces.empty() && args.presets.empty()) {
    return absl::InvalidArgumentError("usage: policy_report [--trace=PATH]... [--generated=all]");
  }
  if (std::find(args.capacities_tokens.begin(), args.capacities_tokens.end(),
                args.summary_tokens) == args.capacities_tokens.end()) {
    args.capacities_tokens.push_back(args.summary_tokens);
  }
  return args;
}

struct NamedTrace {
  std::string name;
  std::vector<TraceRequest> requests;
  std::vector<uint32_t> client_of;  // empty for a real trace
};

// The online policies, in table order, then Belady.
constexpr const char* kPolicies[] = {"lru", "s3fifo", "reuse_depth", "conversation"};
constexpr size_t kOnline = std::size(kPolicies);

struct Row {
  uint64_t tokens = 0;
  uint64_t blocks = 0;
  double hit[kOnline] = {};
  double belady = 0;
};

template <typename Policy>
double Run(std::span<const std::vector<BlockKey>> chains, uint64_t blocks, Policy policy) {
  using Index = RadixTree<uint32_t>;
  PrefixCache<Index, Policy> cache(blocks, 1, Index(), std::move(policy));
  return Replay<decltype(cache)>(chains, cache).HitRate();
}

std::vector<Row> Measure(const Args& args, const NamedTrace& trace) {
  const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{.model_id = "mooncake-trace"}, 1);
  std::vector<std::vector<BlockKey>> chains;
  for (const TraceRequest& r : trace.requests) chains.push_back(TraceChain(keyer, r));
  const auto future = MakeBeladyFuture<>(std::span<const std::vector<BlockKey>>(chains));
  std::vector<Row> rows;
  for (uint64_t tokens : args.capacities_tokens) {
    Row row{.tokens = tokens, .blocks = std::max<uint64_t>(1, tokens / args.block_tokens)};
    const uint64_t b = row.blocks;
    row.hit[0] = Run(chains, b, LruPolicy<>());
    row.hit[1] = Run(chains, b, S3FifoPolicy<>());
    row.hit[2] = Run(chains, b, ReuseDepthPolicy<>(ReuseDepthOptions{.capacity = b}));
    row.hit[3] = Run(chains, b, ConversationPolicy<>(ConversationOptions{.capacity = b}));
    row.belady = Run(chains, b, BeladyPolicy<>(future));
    rows.push_back(row);
  }
  return rows;
}

void PrintTrace(const NamedTrace& trace, const std::vector<Row>& rows) {
  const TraceShape s = MeasureTraceShape(trace.requests, trace.client_of);
  std::printf(
      "\n%s: %llu requests, %llu blocks requested, %llu distinct, reused %.3f, cross-client "
      "%s, reuse distance p50 %llu p90 %llu blocks\n",
      trace.name.c_str(), static_cast<unsigned long long>(s.requests),
      static_cast<unsigned long long>(s.requested_blocks),
      static_cast<unsigned long long>(s.distinct_blocks), s.reused_share,
      trace.client_of.empty() ? "n/a" : absl::StrCat(s.cross_client_share).substr(0, 5).c_str(),
      static_cast<unsigned long long>(s.reuse_distance_p50),
      static_cast<unsigned long long>(s.reuse_distance_p90));
  std::printf("%-12s %8s", "tokens", "blocks");
  for (const char* p : kPolicies) std::printf(" %12s", p);
  std::printf(" %12s %10s %10s\n", "belady", "best/lru", "belady/lru");
  for (const Row& r : rows) {
    std::printf("%-12llu %8llu", static_cast<unsigned long long>(r.tokens),
                static_cast<unsigned long long>(r.blocks));
    for (double h : r.hit) std::printf(" %12.4f", h);
    const double best = *std::max_element(std::begin(r.hit), std::end(r.hit));
    const double lru = r.hit[0];
    std::printf(" %12.4f %10.3f %10.3f\n", r.belady, lru > 0 ? best / lru : 0.0,
                lru > 0 ? r.belady / lru : 0.0);
  }
}

void PrintSummary(const Args& args, const std::vector<std::string>& names,
                  const std::vector<Row>& rows) {
  const char* sep = args.markdown ? " | " : " ";
  std::printf("\nAt %llu tokens: policy hit rate / LRU's (LRU and Belady: hit rates)\n",
              static_cast<unsigned long long>(args.summary_tokens));
  if (args.markdown) std::printf("| ");
  std::printf("%-14s%s%8s", "trace", sep, "LRU");
  for (size_t p = 1; p < kOnline; ++p) std::printf("%s%12s", sep, kPolicies[p]);
  std::printf("%s%10s%s%10s", sep, "belady/lru", sep, "belady");
  std::printf(args.markdown ? " |\n|---|---:|---:|---:|---:|---:|---:|\n" : "\n");
  for (size_t t = 0; t < names.size(); ++t) {
    const Row& r = rows[t];
    const double lru = r.hit[0];
    if (args.markdown) std::printf("| ");
    std::printf("%-14s%s%8.4f", names[t].c_str(), sep, lru);
    for (size_t p = 1; p < kOnline; ++p) std::printf("%s%12.2f", sep, lru > 0 ? r.hit[p] / lru : 0);
    std::printf("%s%10.2f%s%10.4f", sep, lru > 0 ? r.belady / lru : 0, sep, r.belady);
    std::printf(args.markdown ? " |\n" : "\n");
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<Args> args = ParseArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "policy_report: %s\n", std::string(args.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> names;
  std::vector<Row> summary;
  auto report = [&](const NamedTrace& trace) {
    const std::vector<Row> rows = Measure(*args, trace);
    PrintTrace(trace, rows);
    names.push_back(trace.name);
    for (const Row& r : rows) {
      if (r.tokens == args->summary_tokens) summary.push_back(r);
    }
  };
  for (const std::string& path : args->traces) {
    absl::StatusOr<std::vector<TraceRequest>> trace = ReadTraceFile(path);
    if (!trace.ok()) {
      std::fprintf(stderr, "policy_report: %s\n", std::string(trace.status().message()).c_str());
      return 1;
    }
    const size_t slash = path.find_last_of('/');
    report(NamedTrace{path.substr(slash == std::string::npos ? 0 : slash + 1), *trace, {}});
  }
  for (const std::string& preset : args->presets) {
    absl::StatusOr<TraceGeneratorOptions> options = TracePreset(preset, args->seed);
    if (options.ok()) options->block_tokens = args->block_tokens;
    absl::StatusOr<GeneratedTrace> trace =
        options.ok() ? GenerateTrace(*options) : absl::StatusOr<GeneratedTrace>(options.status());
    if (!trace.ok()) {
      std::fprintf(stderr, "policy_report: %s\n", std::string(trace.status().message()).c_str());
      return 1;
    }
    report(NamedTrace{preset, std::move(trace->requests), std::move(trace->client_of)});
  }
  PrintSummary(*args, names, summary);
  return 0;
}

}  // namespace
}  // namespace mooncake::index

int main(int argc, char** argv) { return mooncake::index::Main(argc, argv); }
