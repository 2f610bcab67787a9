// trace_gen: writes a synthetic Mooncake-format JSONL trace
// (mooncake/index/trace_generator.h documents the model and the presets).
//
//   trace_gen --preset=NAME [--seed=1] [--clients=N] [--rate_scale=X]
//             [--block_tokens=512] [--out=PATH] [--shape]
//
// --clients and --rate_scale override the preset's client count and scale
// its arrival rate. Writes to stdout unless --out is given; --shape prints the
// trace's shape (mooncake/index/trace_shape.h) to stderr. The same flags give
// the same bytes. Exit status 1 with a message on a bad argument.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/index/trace_generator.h"
#include "mooncake/index/trace_shape.h"

namespace mooncake::index {
namespace {

struct Args {
  std::string preset;
  std::string out;
  bool shape = false;
  TraceGeneratorOptions options;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  uint64_t seed = 1;
  int64_t clients = -1;
  double rate_scale = 1.0;
  uint64_t block_tokens = 512;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view flag) -> std::optional<absl::string_view> {
      if (a.substr(0, flag.size()) == flag) return AbslView(a.substr(flag.size()));
      return std::nullopt;
    };
    bool ok = true;
    if (auto v = value("--preset=")) {
      args.preset = std::string(*v);
    } else if (auto v = value("--seed=")) {
      ok = absl::SimpleAtoi(*v, &seed);
    } else if (auto v = value("--clients=")) {
      ok = absl::SimpleAtoi(*v, &clients) && clients > 0;
    } else if (auto v = value("--rate_scale=")) {
      ok = absl::SimpleAtod(*v, &rate_scale) && rate_scale > 0;
    } else if (auto v = value("--block_tokens=")) {
      ok = absl::SimpleAtoi(*v, &block_tokens) && block_tokens > 0;
    } else if (auto v = value("--out=")) {
      args.out = std::string(*v);
    } else if (a == "--shape") {
      args.shape = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument: ", AbslView(a)));
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value in ", AbslView(a)));
  }
  if (args.preset.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("usage: trace_gen --preset=NAME [flags]; presets: ",
                     absl::StrJoin(TracePresetNames(), ", ")));
  }
  absl::StatusOr<TraceGeneratorOptions> options = TracePreset(args.preset, seed);
  if (!options.ok()) return options.status();
  args.options = *options;
  if (clients > 0) args.options.clients = static_cast<uint32_t>(clients);
  args.options.clients_per_s *= rate_scale;
  args.options.block_tokens = block_tokens;
  return args;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Args> args = ParseArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "trace_gen: %s\n", std::string(args.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<GeneratedTrace> trace = GenerateTrace(args->options);
  if (!trace.ok()) {
    std::fprintf(stderr, "trace_gen: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  std::ofstream file;
  if (!args->out.empty()) {
    file.open(args->out, std::ios::binary | std::ios::trunc);
    if (!file) {
      std::fprintf(stderr, "trace_gen: cannot write %s\n", args->out.c_str());
      return 1;
    }
  }
  std::ostream& out = args->out.empty() ? std::cout : file;
  for (const TraceRequest& r : trace->requests) out << FormatTraceLine(r) << '\n';
  out.flush();
  if (!out) {
    std::fprintf(stderr, "trace_gen: write failed\n");
    return 1;
  }
  if (args->shape) {
    const TraceShape s = MeasureTraceShape(trace->requests, trace->client_of);
    std::fprintf(stderr,
                 "%s seed %llu: %llu requests, %llu blocks requested, %llu distinct, reused %.3f, "
                 "cross-client %.3f, reuse distance p50 %llu p90 %llu blocks\n",
                 args->preset.c_str(), static_cast<unsigned long long>(args->options.seed),
                 static_cast<unsigned long long>(s.requests),
                 static_cast<unsigned long long>(s.requested_blocks),
                 static_cast<unsigned long long>(s.distinct_blocks), s.reused_share,
                 s.cross_client_share, static_cast<unsigned long long>(s.reuse_distance_p50),
                 static_cast<unsigned long long>(s.reuse_distance_p90));
  }
  return 0;
}

}  // namespace
}  // namespace mooncake::index

int main(int argc, char** argv) { return mooncake::index::Main(argc, argv); }
