// Synthetic Mooncake-format request traces, deterministic from a seed, for
// judging eviction policies on workloads they were not tuned on.
//
// A trace is a set of *clients* whose requests are merged by time. Clients
// start as a Poisson process (`clients_per_s`) and are one of three kinds,
// drawn by weight:
//
//   chat    a system prompt, then turns: prompt = everything so far (system
//           prompt, earlier questions and answers) + a new question. After
//           turn k the user asks again with probability
//           min(continue_max, continue_first + continue_step * k), after a
//           think time; the first question is drawn from its own length
//           distribution (pasted text makes it long).
//   agent   a tool-call loop: a system prompt (tool schemas) and a task,
//           then `steps` requests in quick succession, each re-sending the
//           whole context grown by the model's call and the tool's result.
//   docqa   many users over a few long shared documents: system prompt +
//           document (popularity skewed) + question, then chat-like
//           follow-ups.
//
// Token accounting follows the public Mooncake traces: a prompt of T tokens
// names ceil(T / block_tokens) hash ids, root first. Full blocks keep their
// id while a client grows; the last, partial block gets a fresh id and is a
// different block (a new id) in the next request, as a real block hash is.
// A shared prefix (a system prompt, or system prompt + document) has fixed
// ids for its full blocks; the block where it ends mixes it with a client's
// own tokens, so that block is the client's own. System prompts and
// documents are picked by Zipf popularity (weight of rank r: 1 / r^skew).
//
// Determinism: SplitMix64 and closed-form samplers (no <random>
// distributions, whose output differs between standard libraries), so a seed
// gives the same trace byte for byte on every platform.
//
// Thread-safety: pure functions.
#ifndef MOONCAKE_INDEX_TRACE_GENERATOR_H_
#define MOONCAKE_INDEX_TRACE_GENERATOR_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/index/mooncake_trace.h"

namespace mooncake::index {

// A positive quantity drawn log-normally (median, sigma of its log), then
// clamped to [min, max].
struct LogNormal {
  double median = 1.0;
  double sigma = 0.0;
  double min = 0.0;
  double max = 1e12;
};

// A shared-prefix family: `count` distinct texts, lengths drawn once each,
// picked per client with Zipf(`skew`) popularity.
struct SharedPrefixes {
  uint32_t count = 1;
  LogNormal tokens{.median = 600, .sigma = 0.0, .min = 1, .max = 200000};
  double skew = 1.0;
};

struct ChatOptions {
  LogNormal first_tokens{.median = 5000, .sigma = 1.2, .min = 20, .max = 100000};
  LogNormal question_tokens{.median = 250, .sigma = 1.2, .min = 5, .max = 30000};
  LogNormal answer_tokens{.median = 350, .sigma = 0.6, .min = 5, .max = 4000};
  LogNormal think_s{.median = 90, .sigma = 1.3, .min = 2, .max = 7200};
  double continue_first = 0.31;  // P(turn 2 | turn 1)
  double continue_step = 0.10;   // added per turn already taken
  double continue_max = 0.75;
  uint32_t turns_max = 64;
};

struct AgentOptions {
  SharedPrefixes system{
      .count = 8, .tokens = {.median = 6000, .sigma = 0.5, .min = 500, .max = 30000}, .skew = 1.0};
  LogNormal task_tokens{.median = 1500, .sigma = 1.0, .min = 10, .max = 20000};
  LogNormal steps{.median = 20, .sigma = 0.7, .min = 1, .max = 100};
  LogNormal call_tokens{.median = 150, .sigma = 0.6, .min = 5, .max = 2000};
  LogNormal result_tokens{.median = 1200, .sigma = 1.2, .min = 5, .max = 20000};
  LogNormal step_delay_s{.median = 8, .sigma = 0.7, .min = 0.5, .max = 300};
};

struct DocQaOptions {
  SharedPrefixes documents{.count = 100,
                           .tokens = {.median = 24000, .sigma = 0.6, .min = 2000, .max = 120000},
                           .skew = 1.0};
  ChatOptions followups{.first_tokens = {.median = 80, .sigma = 0.8, .min = 5, .max = 2000},
                        .question_tokens = {.median = 60, .sigma = 0.8, .min = 5, .max = 2000},
                        .answer_tokens = {.median = 250, .sigma = 0.6, .min = 5, .max = 3000},
                        .think_s = {.median = 40, .sigma = 1.0, .min = 2, .max = 3600},
                        .continue_first = 0.45,
                        .continue_step = 0.05,
                        .continue_max = 0.7};
};

struct TraceGeneratorOptions {
  uint64_t seed = 1;
  uint64_t block_tokens = 512;  // tokens per hash id; REQUIRES > 0
  uint32_t clients = 6000;
  double clients_per_s = 2.0;  // Poisson arrival rate of new clients
  // Client kinds, by relative weight (at least one positive).
  double chat_weight = 1.0;
  double agent_weight = 0.0;
  double docqa_weight = 0.0;
  // System prompts of chat and docqa clients (agents have their own).
  SharedPrefixes system;
  ChatOptions chat;
  AgentOptions agent;
  DocQaOptions docqa;
};

// A generated trace: requests sorted by timestamp (ties by client), and the
// client each request belongs to (not part of the JSONL format; tests and
// shape measurements use it).
struct GeneratedTrace {
  std::vector<TraceRequest> requests;
  std::vector<uint32_t> client_of;
};

}  // namespace mooncake::index

namespace mooncake::index_internal {

// SplitMix64 (Steele, Lea, Flood 2014): fully specified, so portable.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // In (0, 1): never 0, so log() is finite.
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1p-53; }
  double Normal() {  // Box-Muller, one value per call
    return std::sqrt(-2.0 * std::log(Uniform())) * std::cos(2.0 * std::numbers::pi * Uniform());
  }
  double Exponential(double rate) { return -std::log(Uniform()) / rate; }
  bool Bernoulli(double p) { return Uniform() < p; }
  double Draw(const index::LogNormal& d) {
    const double x = d.median * std::exp(d.sigma * Normal());
    return std::clamp(x, d.min, d.max);
  }
  uint64_t DrawCount(const index::LogNormal& d) {
    return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(Draw(d))));
  }

 private:
  uint64_t state_;
};

// Zipf(skew) over [0, n): rank r has weight 1 / (r + 1)^skew.
class ZipfSampler {
 public:
  ZipfSampler(uint32_t n, double skew) : cdf_(std::max<uint32_t>(n, 1)) {
    double sum = 0;
    for (size_t r = 0; r < cdf_.size(); ++r) cdf_[r] = sum += std::pow(r + 1.0, -skew);
    for (double& c : cdf_) c /= sum;
  }
  uint32_t Draw(SplitMix64& rng) const {
    const double u = rng.Uniform();
    const auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<uint32_t>(std::min<size_t>(it - cdf_.begin(), cdf_.size() - 1));
  }

 private:
  std::vector<double> cdf_;
};

// One client's growing prompt. `prefix` holds the ids of the shared
// prefix's full blocks; `own` the client's full blocks after it.
class ClientContext {
 public:
  ClientContext(const std::vector<uint64_t>* prefix, uint64_t prefix_tokens, uint64_t block_tokens)
      : prefix_(prefix), tokens_(prefix_tokens), block_tokens_(block_tokens) {
    MC_ASSERT(prefix->size() == prefix_tokens / block_tokens, "prefix ids and length disagree");
  }

  // Appends `tokens`; blocks that became full get fresh ids.
  void Grow(uint64_t tokens, uint64_t& next_id) {
    tokens_ += tokens;
    while (prefix_->size() + own_.size() < tokens_ / block_tokens_) own_.push_back(next_id++);
  }

  // The request for the current context; a partial last block gets a fresh id.
  index::TraceRequest Request(int64_t timestamp_ms, uint64_t output_tokens,
                              uint64_t& next_id) const {
    index::TraceRequest r{.timestamp_ms = timestamp_ms,
                          .input_length = static_cast<int64_t>(tokens_),
                          .output_length = static_cast<int64_t>(output_tokens)};
    r.hash_ids.reserve(prefix_->size() + own_.size() + 1);
    r.hash_ids.assign(prefix_->begin(), prefix_->end());
    r.hash_ids.insert(r.hash_ids.end(), own_.begin(), own_.end());
    if (tokens_ % block_tokens_ != 0) r.hash_ids.push_back(next_id++);
    return r;
  }

 private:
  const std::vector<uint64_t>* prefix_;
  uint64_t tokens_;
  uint64_t block_tokens_;
  std::vector<uint64_t> own_;
};

// Shared prefixes drawn once per trace: each text's length and, per
// (system prompt, document) pair actually used, its full blocks' ids.
class PrefixCatalog {
 public:
  PrefixCatalog(const index::SharedPrefixes& family, uint64_t block_tokens, SplitMix64& rng)
      : zipf_(family.count, family.skew), block_tokens_(block_tokens) {
    for (uint32_t i = 0; i < std::max<uint32_t>(family.count, 1); ++i) {
      tokens_.push_back(static_cast<uint64_t>(std::llround(rng.Draw(family.tokens))));
    }
  }
  uint32_t Pick(SplitMix64& rng) const { return zipf_.Draw(rng); }
  uint64_t Tokens(uint32_t i) const { return tokens_[i]; }

  // Full-block ids of the text `i` following `outer` (an id from another
  // catalog, or kNone); stable for the trace.
  static constexpr uint64_t kNone = ~uint64_t{0};
  const std::vector<uint64_t>& Ids(uint64_t outer, uint32_t i, uint64_t total_tokens,
                                   uint64_t& next_id) {
    std::vector<uint64_t>& ids = ids_[{outer, i}];
    if (ids.empty()) {
      for (uint64_t b = 0; b < total_tokens / block_tokens_; ++b) ids.push_back(next_id++);
    }
    return ids;
  }

 private:
  ZipfSampler zipf_;
  uint64_t block_tokens_;
  std::vector<uint64_t> tokens_;
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, std::vector<uint64_t>> ids_;
};

struct TimedRequest {
  index::TraceRequest request;
  uint32_t client;
  uint32_t seq;
};

class TraceBuilder {
 public:
  explicit TraceBuilder(const index::TraceGeneratorOptions& o)
      : o_(o),
        rng_(o.seed),
        system_(o.system, o.block_tokens, rng_),
        agents_(o.agent.system, o.block_tokens, rng_),
        documents_(o.docqa.documents, o.block_tokens, rng_) {}

  index::GeneratedTrace Build() {
    const double weights = o_.chat_weight + o_.agent_weight + o_.docqa_weight;
    double start_s = 0;
    for (uint32_t s = 0; s < o_.clients; ++s) {
      start_s += rng_.Exponential(o_.clients_per_s);
      const double kind = rng_.Uniform() * weights;
      if (kind < o_.chat_weight) {
        Chat(s, start_s);
      } else if (kind < o_.chat_weight + o_.agent_weight) {
        Agent(s, start_s);
      } else {
        DocQa(s, start_s);
      }
    }
    std::sort(out_.begin(), out_.end(), [](const TimedRequest& a, const TimedRequest& b) {
      return std::tie(a.request.timestamp_ms, a.client, a.seq) <
             std::tie(b.request.timestamp_ms, b.client, b.seq);
    });
    index::GeneratedTrace trace;
    for (TimedRequest& t : out_) {
      trace.requests.push_back(std::move(t.request));
      trace.client_of.push_back(t.client);
    }
    return trace;
  }

 private:
  void Emit(uint32_t client, uint32_t seq, double t_s, const ClientContext& ctx,
            uint64_t output_tokens) {
    const auto ms = static_cast<int64_t>(std::llround(t_s * 1000.0));
    out_.push_back({ctx.Request(ms, output_tokens, next_id_), client, seq});
  }

  // Turns of a chat-like exchange over `ctx`, starting at `t_s`.
  void Turns(uint32_t s, double t_s, const index::ChatOptions& c, ClientContext& ctx) {
    uint64_t question = static_cast<uint64_t>(rng_.Draw(c.first_tokens));
    for (uint32_t turn = 0; turn < c.turns_max; ++turn) {
      ctx.Grow(question, next_id_);
      const auto answer = static_cast<uint64_t>(rng_.Draw(c.answer_tokens));
      Emit(s, turn, t_s, ctx, answer);
      const double p = std::min(c.continue_max, c.continue_first + c.continue_step * turn);
      if (!rng_.Bernoulli(p)) break;
      ctx.Grow(answer, next_id_);
      t_s += rng_.Draw(c.think_s);
      question = static_cast<uint64_t>(rng_.Draw(c.question_tokens));
    }
  }

  void Chat(uint32_t s, double t_s) {
    const uint32_t p = system_.Pick(rng_);
    const uint64_t tokens = system_.Tokens(p);
    ClientContext ctx(&system_.Ids(PrefixCatalog::kNone, p, tokens, next_id_), tokens,
                      o_.block_tokens);
    Turns(s, t_s, o_.chat, ctx);
  }

  void DocQa(uint32_t s, double t_s) {
    const uint32_t p = system_.Pick(rng_);
    const uint32_t d = documents_.Pick(rng_);
    const uint64_t tokens = system_.Tokens(p) + documents_.Tokens(d);
    ClientContext ctx(&documents_.Ids(p, d, tokens, next_id_), tokens, o_.block_tokens);
    Turns(s, t_s, o_.docqa.followups, ctx);
  }

  void Agent(uint32_t s, double t_s) {
    const index::AgentOptions& a = o_.agent;
    const uint32_t p = agents_.Pick(rng_);
    const uint64_t tokens = agents_.Tokens(p);
    ClientContext ctx(&agents_.Ids(PrefixCatalog::kNone, p, tokens, next_id_), tokens,
                      o_.block_tokens);
    ctx.Grow(static_cast<uint64_t>(rng_.Draw(a.task_tokens)), next_id_);
    const uint64_t steps = rng_.DrawCount(a.steps);
    for (uint32_t step = 0; step < steps; ++step) {
      const auto call = static_cast<uint64_t>(rng_.Draw(a.call_tokens));
      Emit(s, step, t_s, ctx, call);
      ctx.Grow(call + static_cast<uint64_t>(rng_.Draw(a.result_tokens)), next_id_);
      t_s += rng_.Draw(a.step_delay_s);
    }
  }

  const index::TraceGeneratorOptions& o_;
  SplitMix64 rng_;
  PrefixCatalog system_;
  PrefixCatalog agents_;
  PrefixCatalog documents_;
  // Ids below 2^32 (the JSONL reader's range); 0 is never used.
  uint64_t next_id_ = 1;
  std::vector<TimedRequest> out_;
};

}  // namespace mooncake::index_internal

namespace mooncake::index {

// INVALID_ARGUMENT names the first option out of range.
inline absl::Status ValidateTraceGeneratorOptions(const TraceGeneratorOptions& o) {
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("trace generator: ", AbslView(what)));
  };
  if (o.block_tokens == 0) return bad("block_tokens must be positive");
  if (o.clients == 0 || o.clients > 10'000'000) return bad("clients must be in [1, 1e7]");
  if (!(o.clients_per_s > 0)) return bad("clients_per_s must be positive");
  if (o.chat_weight < 0 || o.agent_weight < 0 || o.docqa_weight < 0 ||
      !(o.chat_weight + o.agent_weight + o.docqa_weight > 0)) {
    return bad("client kind weights must be >= 0 with a positive sum");
  }
  for (const SharedPrefixes* f : {&o.system, &o.agent.system, &o.docqa.documents}) {
    if (f->count == 0 || f->count > 1'000'000) return bad("prefix count must be in [1, 1e6]");
    if (f->skew < 0) return bad("prefix skew must be >= 0");
  }
  for (const ChatOptions* c : {&o.chat, &o.docqa.followups}) {
    if (c->continue_first < 0 || c->continue_max > 1 || c->turns_max == 0) {
      return bad("continue probabilities must be in [0, 1] and turns_max positive");
    }
  }
  return absl::OkStatus();
}

// The trace for `options`; the same options give the same trace.
inline absl::StatusOr<GeneratedTrace> GenerateTrace(const TraceGeneratorOptions& options) {
  if (absl::Status st = ValidateTraceGeneratorOptions(options); !st.ok()) return st;
  GeneratedTrace trace = index_internal::TraceBuilder(options).Build();
  for (const TraceRequest& r : trace.requests) {
    if (!r.hash_ids.empty() && r.hash_ids.back() > 0xffffffffULL) {
      return absl::ResourceExhaustedError("trace generator: more than 2^32 block ids");
    }
  }
  return trace;
}

// One JSONL line (no newline) that ParseTraceLine reads back to `r`.
inline std::string FormatTraceLine(const TraceRequest& r) {
  return absl::StrCat("{\"timestamp\": ", r.timestamp_ms, ", \"input_length\": ", r.input_length,
                      ", \"output_length\": ", r.output_length, ", \"hash_ids\": [",
                      absl::StrJoin(r.hash_ids, ", "), "]}");
}

// Named presets, each a different workload shape at a similar size (about
// 10K-20K requests, 200K-500K blocks requested at 512 tokens per block):
//
//   chat        like the Mooncake conversation trace: one 600-token system
//               prompt, 2 clients/s, turn continuation 0.31 rising by 0.1.
//   chat-skew   200 system prompts of ~2.5K tokens, Zipf 1.2 popularity.
//   chat-load   chat at 3x the arrival rate (more interleaving between turns)
//               and shorter threads (continuation 0.2 rising by 0.05).
//   agent       tool-call loops: 8 agents' 4K-token prompts, ~12 steps of
//               ~850 tokens each, 3 s apart.
//   agent-load  agents at 4x the arrival rate with 64 agent prompts (Zipf 0.6).
//   docqa       30 documents of ~20K tokens (Zipf 1.0), short questions.
//   docqa-flat  300 documents (Zipf 0.4): sharing spread thin.
//   mixed       60% chat, 20% agent, 20% docqa.
//   mixed-load  mixed at 3x the arrival rate.
inline std::vector<std::string> TracePresetNames() {
  return {"chat",  "chat-skew",  "chat-load", "agent",     "agent-load",
          "docqa", "docqa-flat", "mixed",     "mixed-load"};
}

inline absl::StatusOr<TraceGeneratorOptions> TracePreset(std::string_view name, uint64_t seed = 1) {
  TraceGeneratorOptions o;
  o.seed = seed;
  if (name == "chat") {
  } else if (name == "chat-skew") {
    o.system = {.count = 200,
                .tokens = {.median = 2500, .sigma = 0.7, .min = 200, .max = 30000},
                .skew = 1.2};
  } else if (name == "chat-load") {
    o.clients = 9000;
    o.clients_per_s = 6.0;
    o.chat.continue_first = 0.2;
    o.chat.continue_step = 0.05;
  } else if (name == "agent" || name == "agent-load") {
    o.chat_weight = 0;
    o.agent_weight = 1;
    o.clients = 800;
    o.clients_per_s = 0.5;
    if (name == "agent-load") {
      o.clients_per_s = 2.0;
      o.agent.system.count = 64;
      o.agent.system.skew = 0.6;
    }
  } else if (name == "docqa" || name == "docqa-flat") {
    o.chat_weight = 0;
    o.docqa_weight = 1;
    o.clients = 8000;
    o.clients_per_s = 3.0;
    o.system.tokens.median = 300;
    if (name == "docqa-flat") {
      o.docqa.documents.count = 400;
      o.docqa.documents.skew = 0.5;
    }
  } else if (name == "mixed" || name == "mixed-load") {
    o.chat_weight = 0.6;
    o.agent_weight = 0.2;
    o.docqa_weight = 0.2;
    o.clients = 4000;
    o.clients_per_s = name == "mixed" ? 2.0 : 5.0;
  } else {
    return absl::NotFoundError(
        absl::StrCat("unknown trace preset \"", AbslView(name),
                     "\"; known: ", absl::StrJoin(TracePresetNames(), ", ")));
  }
  return o;
}

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_TRACE_GENERATOR_H_
