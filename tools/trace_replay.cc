// trace_replay: prefix hit rate of a Mooncake-format JSONL trace under every
// eviction policy and a range of cache capacities.
//
//   trace_replay PATH [--block_tokens=512] [--index=radix|hash]
//                     [--capacities=500000,1000000,3000000,10000000,0]
//                     [--ablations]
//
// Capacities are in tokens (0 = unlimited) and become floor(tokens /
// block_tokens) blocks. Hit rate = hit blocks / requested blocks; a request's
// hit stops at its first missing block, then all its blocks are inserted or
// touched. Online policies: lru, s3fifo, reuse_depth, conversation; best/lru
// is the best of them over LRU in the same run. belady is the offline
// reference (farthest next use, knows the whole trace), printed for the gap.
// --ablations adds a table of ConversationPolicy with one mechanism changed
// at a time (docs/index.md explains each row).
// Exit status 1 with a message on a bad argument or a malformed line.
#include "mooncake/index/trace_replay.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/index/belady_policy.h"
#include "mooncake/index/conversation_policy.h"
#include "mooncake/index/hash_chain_index.h"
#include "mooncake/index/lru_policy.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/radix_tree.h"
#include "mooncake/index/reuse_depth_policy.h"
#include "mooncake/index/s3fifo_policy.h"

namespace mooncake::index {
namespace {

struct Args {
  std::string path;
  uint64_t block_tokens = 512;
  bool radix = true;
  bool ablations = false;
  std::vector<uint64_t> capacities_tokens = {500000, 1000000, 3000000, 10000000, 0};
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view flag) -> std::optional<std::string_view> {
      if (a.substr(0, flag.size()) == flag) return a.substr(flag.size());
      return std::nullopt;
    };
    if (auto v = value("--block_tokens=")) {
      if (!absl::SimpleAtoi(AbslView(*v), &args.block_tokens) || args.block_tokens == 0) {
        return absl::InvalidArgumentError("--block_tokens must be a positive integer");
      }
    } else if (auto v = value("--index=")) {
      if (*v != "radix" && *v != "hash") {
        return absl::InvalidArgumentError("--index must be radix or hash");
      }
      args.radix = *v == "radix";
    } else if (auto v = value("--capacities=")) {
      args.capacities_tokens.clear();
      for (absl::string_view part : absl::StrSplit(AbslView(*v), ',')) {
        uint64_t c;
        if (!absl::SimpleAtoi(part, &c)) {
          return absl::InvalidArgumentError("--capacities takes token counts, 0 for unlimited");
        }
        args.capacities_tokens.push_back(c);
      }
    } else if (a == "--ablations") {
      args.ablations = true;
    } else if (!a.empty() && a[0] != '-' && args.path.empty()) {
      args.path = std::string(a);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument: ", AbslView(a)));
    }
  }
  if (args.path.empty())
    return absl::InvalidArgumentError("usage: trace_replay TRACE.jsonl [flags]");
  return args;
}

template <typename Index, typename Policy>
double Run(const std::vector<std::vector<BlockKey>>& chains, uint64_t blocks, Policy policy) {
  PrefixCache<Index, Policy> cache(blocks, 1, Index(), std::move(policy));
  return Replay<decltype(cache)>(chains, cache).HitRate();
}

template <typename Index>
void PrintTable(const Args& args, const std::vector<std::vector<BlockKey>>& chains,
                uint64_t total_blocks) {
  const auto future = MakeBeladyFuture<>(std::span<const std::vector<BlockKey>>(chains));
  std::printf("%-18s %10s %10s %10s %12s %12s %10s %10s\n", "capacity_tokens", "blocks", "lru",
              "s3fifo", "reuse_depth", "conversation", "best/lru", "belady");
  for (uint64_t tokens : args.capacities_tokens) {
    // Unlimited: room for every block the trace names.
    const uint64_t blocks = tokens == 0 ? total_blocks + 1 : tokens / args.block_tokens;
    const double lru = Run<Index>(chains, blocks, LruPolicy<>());
    const double s3 = Run<Index>(chains, blocks, S3FifoPolicy<>());
    const double rd =
        Run<Index>(chains, blocks, ReuseDepthPolicy<>(ReuseDepthOptions{.capacity = blocks}));
    const double conv =
        Run<Index>(chains, blocks, ConversationPolicy<>(ConversationOptions{.capacity = blocks}));
    const double opt = Run<Index>(chains, blocks, BeladyPolicy<>(future));
    const double best = std::max({lru, s3, rd, conv});
    const std::string label = tokens == 0 ? "unlimited" : std::to_string(tokens);
    std::printf("%-18s %10llu %10.4f %10.4f %12.4f %12.4f %10.3f %10.4f\n", label.c_str(),
                static_cast<unsigned long long>(blocks), lru, s3, rd, conv,
                lru > 0 ? best / lru : 0.0, opt);
  }
}

// ConversationPolicy with one mechanism changed per row, same capacities.
template <typename Index>
void PrintAblations(const Args& args, const std::vector<std::vector<BlockKey>>& chains,
                    uint64_t total_blocks) {
  struct Variant {
    const char* name;
    void (*apply)(ConversationOptions&);
  };
  const Variant variants[] = {
      {"default", [](ConversationOptions&) {}},
      {"no_ghost", [](ConversationOptions& o) { o.ghost_factor = 0; }},
      {"ghost_2x", [](ConversationOptions& o) { o.ghost_factor = 2; }},
      {"ghost_32x", [](ConversationOptions& o) { o.ghost_factor = 32; }},
      {"no_tail_demotion", [](ConversationOptions& o) { o.demote_tail = false; }},
      {"no_turn_bonus",
       [](ConversationOptions& o) {
         o.turn_bonus = {0, 0, 0, 0};
       }},
      {"bonus_in_capacities",
       [](ConversationOptions& o) { o.gap_samples_min = std::numeric_limits<uint32_t>::max(); }},
      {"bonus_0_1_2_3",
       [](ConversationOptions& o) {
         o.turn_bonus = {0, 1, 2, 3};
       }},
      {"bonus_0_3_4_5",
       [](ConversationOptions& o) {
         o.turn_bonus = {0, 3, 4, 5};
       }},
      {"gap_quantile_0.25", [](ConversationOptions& o) { o.gap_quantile = 0.25; }},
  };
  std::printf("\nConversationPolicy ablations (hit rate; capacities in tokens)\n%-20s", "variant");
  for (uint64_t tokens : args.capacities_tokens) {
    std::printf(" %10s", tokens == 0 ? "unlimited" : std::to_string(tokens).c_str());
  }
  std::printf("\n");
  for (const Variant& v : variants) {
    std::printf("%-20s", v.name);
    for (uint64_t tokens : args.capacities_tokens) {
      const uint64_t blocks = tokens == 0 ? total_blocks + 1 : tokens / args.block_tokens;
      ConversationOptions options{.capacity = blocks};
      v.apply(options);
      std::printf(" %10.4f", Run<Index>(chains, blocks, ConversationPolicy<>(options)));
    }
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<Args> args = ParseArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "trace_replay: %s\n", std::string(args.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::vector<TraceRequest>> trace = ReadTraceFile(args->path);
  if (!trace.ok()) {
    std::fprintf(stderr, "trace_replay: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{.model_id = "mooncake-trace"}, 1);
  std::vector<std::vector<BlockKey>> chains;
  uint64_t requested = 0;
  absl::flat_hash_map<BlockKey, char, index_internal::BlockKeyHash> distinct;
  for (const TraceRequest& r : *trace) {
    chains.push_back(TraceChain(keyer, r));
    requested += chains.back().size();
    for (const BlockKey& k : chains.back()) distinct.try_emplace(k, 0);
  }
  std::printf(
      "trace %s: %zu requests, %llu blocks requested, %zu distinct, %llu tokens/block, "
      "index %s\n",
      args->path.c_str(), chains.size(), static_cast<unsigned long long>(requested),
      distinct.size(), static_cast<unsigned long long>(args->block_tokens),
      args->radix ? "radix" : "hash");
  if (args->radix) {
    PrintTable<RadixTree<uint32_t>>(*args, chains, distinct.size());
    if (args->ablations) PrintAblations<RadixTree<uint32_t>>(*args, chains, distinct.size());
  } else {
    PrintTable<HashChainIndex<uint32_t>>(*args, chains, distinct.size());
    if (args->ablations) PrintAblations<HashChainIndex<uint32_t>>(*args, chains, distinct.size());
  }
  return 0;
}

}  // namespace
}  // namespace mooncake::index

int main(int argc, char** argv) { return mooncake::index::Main(argc, argv); }
