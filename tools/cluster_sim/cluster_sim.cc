// cluster_sim: prefix-cache hit rate of a prefill cluster with per-node DRAM
// caches (local) against one global pool of the same total size (global),
// on a Mooncake-format JSONL trace (tools/cluster_sim/cluster_sim.h, README.md).
//
//   cluster_sim [--trace=PATH] [--nodes=4,8,16]
//               [--sizes=1000000,3000000,10000000] [--policy=lru]
//               [--block_tokens=512] [--routing=conductor|least_loaded]
//               [--queue_weight=1]
//               [--node_tokens_per_s=20000] [--kv_bytes_per_token=327680]
//               [--json=FILE]
//
// Sizes are total cache tokens over all nodes; they become
// floor(tokens / block_tokens) blocks, split evenly over the nodes (local) or
// the pool's segments (global). Hit rate = prompt tokens served from cache /
// prompt tokens. Deterministic: one run is the answer.
// Exit status 1 with a message on a bad argument or a malformed trace.
#include "tools/cluster_sim/cluster_sim.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/index/mooncake_trace.h"

namespace mooncake::cluster_sim {
namespace {

using ::mooncake::AbslView;

struct Args {
  std::string trace = "/work/shared/traces/conversation_trace.jsonl";
  std::vector<uint64_t> nodes = {4, 8, 16};
  std::vector<uint64_t> sizes_tokens = {1000000, 3000000, 10000000};
  std::string json;
  ClusterOptions base;
};

absl::Status ParseList(std::string_view flag, std::string_view v, std::vector<uint64_t>& out) {
  out.clear();
  for (absl::string_view part : absl::StrSplit(AbslView(v), ',')) {
    uint64_t x;
    if (!absl::SimpleAtoi(part, &x) || x == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(flag), " takes a comma-separated list of positive integers"));
    }
    out.push_back(x);
  }
  return absl::OkStatus();
}

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view flag) -> std::optional<std::string_view> {
      if (a.substr(0, flag.size()) == flag) return a.substr(flag.size());
      return std::nullopt;
    };
    absl::Status st;
    if (auto v = value("--trace=")) {
      args.trace = std::string(*v);
    } else if (auto v = value("--json=")) {
      args.json = std::string(*v);
    } else if (auto v = value("--nodes=")) {
      st = ParseList("--nodes", *v, args.nodes);
      for (uint64_t n : args.nodes) {
        if (st.ok() && n > kNodesMax) st = absl::InvalidArgumentError("--nodes too large");
      }
    } else if (auto v = value("--sizes=")) {
      st = ParseList("--sizes", *v, args.sizes_tokens);
    } else if (auto v = value("--policy=")) {
      const std::optional<PolicyKind> kind = ParsePolicyKind(*v);
      if (!kind) {
        st =
            absl::InvalidArgumentError("--policy must be lru, s3fifo, reuse_depth or conversation");
      } else {
        args.base.policy = *kind;
      }
    } else if (auto v = value("--routing=")) {
      if (*v != "conductor" && *v != "least_loaded") {
        st = absl::InvalidArgumentError("--routing must be conductor or least_loaded");
      }
      args.base.routing = *v == "conductor" ? RoutingKind::kConductor : RoutingKind::kLeastLoaded;
    } else if (auto v = value("--block_tokens=")) {
      if (!absl::SimpleAtoi(AbslView(*v), &args.base.block_tokens) || args.base.block_tokens == 0) {
        st = absl::InvalidArgumentError("--block_tokens must be a positive integer");
      }
    } else if (auto v = value("--kv_bytes_per_token=")) {
      if (!absl::SimpleAtoi(AbslView(*v), &args.base.kv_bytes_per_token)) {
        st = absl::InvalidArgumentError("--kv_bytes_per_token must be an integer");
      }
    } else if (auto v = value("--queue_weight=")) {
      if (!absl::SimpleAtod(AbslView(*v), &args.base.queue_weight) ||
          !(args.base.queue_weight >= 0.0)) {
        st = absl::InvalidArgumentError("--queue_weight must be a number >= 0");
      }
    } else if (auto v = value("--node_tokens_per_s=")) {
      if (!absl::SimpleAtod(AbslView(*v), &args.base.node_tokens_per_s) ||
          !(args.base.node_tokens_per_s > 0.0)) {
        st = absl::InvalidArgumentError("--node_tokens_per_s must be a positive number");
      }
    } else {
      st = absl::InvalidArgumentError(absl::StrCat("unknown argument: ", AbslView(a)));
    }
    if (!st.ok()) return st;
  }
  return args;
}

struct Row {
  uint64_t nodes = 0;
  uint64_t size_tokens = 0;
  uint64_t blocks = 0;
  ClusterStats local;
  ClusterStats global;
  double seconds = 0.0;
};

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string StatsJson(const ClusterStats& s) {
  uint64_t busiest = 0;
  for (uint64_t r : s.requests_per_node) busiest = std::max(busiest, r);
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"hit_rate\": %.6f, \"saved_tokens\": %llu, \"block_hit_rate\": %.6f, "
                "\"hit_blocks\": %llu, \"remote_hit_blocks\": %llu, \"bytes_moved\": %llu, "
                "\"evicted_blocks\": %llu, \"busiest_node_requests\": %llu}",
                s.HitRate(), static_cast<unsigned long long>(s.saved_tokens), s.BlockHitRate(),
                static_cast<unsigned long long>(s.hit_blocks),
                static_cast<unsigned long long>(s.remote_hit_blocks),
                static_cast<unsigned long long>(s.bytes_moved),
                static_cast<unsigned long long>(s.evicted_blocks),
                static_cast<unsigned long long>(busiest));
  return buf;
}

absl::Status WriteJson(const Args& args, const ClusterStats& any, const std::vector<Row>& rows) {
  std::string out = absl::StrCat(
      "{\n  \"trace\": \"", JsonEscape(args.trace), "\",\n  \"requests\": ", any.requests,
      ",\n  \"prompt_tokens\": ", any.prompt_tokens,
      ",\n  \"requested_blocks\": ", any.requested_blocks,
      ",\n  \"block_tokens\": ", args.base.block_tokens, ",\n  \"policy\": \"",
      PolicyName(args.base.policy), "\",\n  \"routing\": \"", RoutingName(args.base.routing),
      "\",\n  \"queue_weight\": ", args.base.queue_weight,
      ",\n  \"node_tokens_per_s\": ", args.base.node_tokens_per_s,
      ",\n  \"kv_bytes_per_token\": ", args.base.kv_bytes_per_token, ",\n  \"rows\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    absl::StrAppend(&out, "    {\"nodes\": ", r.nodes, ", \"size_tokens\": ", r.size_tokens,
                    ", \"blocks\": ", r.blocks, ",\n     \"local\": ", StatsJson(r.local),
                    ",\n     \"global\": ", StatsJson(r.global),
                    ",\n     \"global_over_local\": ", Ratio(r.global.HitRate(), r.local.HitRate()),
                    "}", i + 1 < rows.size() ? ",\n" : "\n");
  }
  out += "  ]\n}\n";
  std::FILE* f = std::fopen(args.json.c_str(), "w");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot write ", args.json));
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat("writing ", args.json));
  return absl::OkStatus();
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "cluster_sim: %s\n", std::string(st.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Args> args = ParseArgs(argc, argv);
  if (!args.ok()) return Fail(args.status());
  absl::StatusOr<std::vector<index::TraceRequest>> trace = index::ReadTraceFile(args->trace);
  if (!trace.ok()) return Fail(trace.status());
  const std::vector<SimRequest> requests = ToSimRequests(*trace, args->base.block_tokens);
  std::printf(
      "trace %s: %zu requests; policy %s, routing %s, block_tokens %llu, queue_weight %g, "
      "node_tokens_per_s %g, kv_bytes_per_token %llu\n",
      args->trace.c_str(), requests.size(), PolicyName(args->base.policy),
      RoutingName(args->base.routing), static_cast<unsigned long long>(args->base.block_tokens),
      args->base.queue_weight, args->base.node_tokens_per_s,
      static_cast<unsigned long long>(args->base.kv_bytes_per_token));
  std::printf("%5s %12s %8s %9s %9s %8s %14s %14s %9s %9s %10s %7s\n", "nodes", "size_tokens",
              "blocks", "local", "global", "glob/loc", "local_saved", "global_saved", "local_blk",
              "global_blk", "moved_GiB", "secs");
  std::vector<Row> rows;
  ClusterStats any;
  for (uint64_t p : args->nodes) {
    for (uint64_t size : args->sizes_tokens) {
      const auto start = std::chrono::steady_clock::now();
      ClusterOptions o = args->base;
      o.nodes = static_cast<uint32_t>(p);
      o.capacity_blocks = size / o.block_tokens;
      if (absl::Status st = ValidateOptions(o); !st.ok()) return Fail(st);
      Row row{.nodes = p, .size_tokens = size, .blocks = o.capacity_blocks};
      o.mode = PoolMode::kLocal;
      row.local = Simulate(requests, o);
      o.mode = PoolMode::kGlobal;
      row.global = Simulate(requests, o);
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      any = row.global;
      std::printf("%5llu %12llu %8llu %9.4f %9.4f %8.3f %14llu %14llu %9.4f %9.4f %10.1f %7.2f\n",
                  static_cast<unsigned long long>(p), static_cast<unsigned long long>(size),
                  static_cast<unsigned long long>(row.blocks), row.local.HitRate(),
                  row.global.HitRate(), Ratio(row.global.HitRate(), row.local.HitRate()),
                  static_cast<unsigned long long>(row.local.saved_tokens),
                  static_cast<unsigned long long>(row.global.saved_tokens),
                  row.local.BlockHitRate(), row.global.BlockHitRate(),
                  static_cast<double>(row.global.bytes_moved) / (1ull << 30), row.seconds);
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  std::printf("prompt tokens %llu, requested blocks %llu\n",
              static_cast<unsigned long long>(any.prompt_tokens),
              static_cast<unsigned long long>(any.requested_blocks));
  if (!args->json.empty()) {
    if (absl::Status st = WriteJson(*args, any, rows); !st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace
}  // namespace mooncake::cluster_sim

int main(int argc, char** argv) { return mooncake::cluster_sim::Main(argc, argv); }
