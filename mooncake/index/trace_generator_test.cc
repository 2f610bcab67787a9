#include "mooncake/index/trace_generator.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/index/mooncake_trace.h"
#include "mooncake/index/trace_shape.h"

namespace mooncake::index {
namespace {

// A preset with fewer clients, so every test stays fast.
TraceGeneratorOptions Small(const std::string& preset, uint64_t seed = 1, uint32_t clients = 400) {
  absl::StatusOr<TraceGeneratorOptions> o = TracePreset(preset, seed);
  EXPECT_TRUE(o.ok()) << o.status();
  o->clients = clients;
  return *o;
}

std::string Jsonl(const GeneratedTrace& trace) {
  std::string out;
  for (const TraceRequest& r : trace.requests) absl::StrAppend(&out, FormatTraceLine(r), "\n");
  return out;
}

TEST(TraceGeneratorTest, SameSeedSameBytesOtherSeedOtherTrace) {
  const std::string a = Jsonl(*GenerateTrace(Small("mixed", 7)));
  EXPECT_EQ(a, Jsonl(*GenerateTrace(Small("mixed", 7))));
  EXPECT_NE(a, Jsonl(*GenerateTrace(Small("mixed", 8))));
  EXPECT_GT(a.size(), 10000u);
}

TEST(TraceGeneratorTest, EveryPresetParsesBackWithMooncakeTrace) {
  for (const std::string& preset : TracePresetNames()) {
    const GeneratedTrace trace = *GenerateTrace(Small(preset, 3, 150));
    ASSERT_FALSE(trace.requests.empty()) << preset;
    ASSERT_EQ(trace.client_of.size(), trace.requests.size());
    absl::StatusOr<std::vector<TraceRequest>> parsed = ParseTrace(Jsonl(trace));
    ASSERT_TRUE(parsed.ok()) << preset << ": " << parsed.status();
    ASSERT_EQ(parsed->size(), trace.requests.size()) << preset;
    for (size_t i = 0; i < parsed->size(); ++i) {
      const TraceRequest& r = (*parsed)[i];
      ASSERT_EQ(r.hash_ids, trace.requests[i].hash_ids) << preset << " line " << i + 1;
      ASSERT_EQ(r.timestamp_ms, trace.requests[i].timestamp_ms);
      ASSERT_EQ(r.input_length, trace.requests[i].input_length);
      ASSERT_EQ(r.output_length, trace.requests[i].output_length);
      // ceil(input_length / 512) ids, in time order.
      ASSERT_EQ(r.hash_ids.size(), static_cast<size_t>((r.input_length + 511) / 512)) << preset;
      if (i > 0) {
        ASSERT_LE((*parsed)[i - 1].timestamp_ms, r.timestamp_ms);
      }
    }
  }
}

// A client's next request keeps every full block of the previous one and
// replaces its partial last block, as real block hashes do.
TEST(TraceGeneratorTest, NextRequestKeepsFullBlocksAndReplacesThePartialOne) {
  for (const std::string preset : {"chat", "agent", "docqa"}) {
    const GeneratedTrace trace = *GenerateTrace(Small(preset, 5, 100));
    std::vector<const TraceRequest*> last(100, nullptr);
    size_t continuations = 0;
    for (size_t i = 0; i < trace.requests.size(); ++i) {
      const TraceRequest& r = trace.requests[i];
      const TraceRequest* prev = last[trace.client_of[i]];
      last[trace.client_of[i]] = &r;
      if (prev == nullptr) continue;
      ++continuations;
      const size_t full = static_cast<size_t>(prev->input_length / 512);
      ASSERT_GT(r.hash_ids.size(), full);
      EXPECT_TRUE(
          std::equal(prev->hash_ids.begin(), prev->hash_ids.begin() + full, r.hash_ids.begin()))
          << preset;
      if (full < prev->hash_ids.size()) {
        EXPECT_NE(r.hash_ids[full], prev->hash_ids[full]);
      }
    }
    EXPECT_GT(continuations, 20u) << preset;
  }
}

TEST(TraceGeneratorTest, PresetsDifferMeasurably) {
  auto shape = [](const std::string& preset, uint32_t clients) {
    const GeneratedTrace t = *GenerateTrace(Small(preset, 1, clients));
    return MeasureTraceShape(t.requests, t.client_of);
  };
  const TraceShape chat = shape("chat", 1500);
  const TraceShape skew = shape("chat-skew", 1500);
  const TraceShape load = shape("chat-load", 1500);
  const TraceShape agent = shape("agent", 500);
  const TraceShape agent_load = shape("agent-load", 500);
  const TraceShape docqa = shape("docqa", 1500);
  const TraceShape flat = shape("docqa-flat", 1500);
  // Chat reuses under half its blocks, agents and document QA nearly all.
  EXPECT_LT(chat.reused_share, 0.5);
  EXPECT_GT(agent.reused_share, 0.85);
  EXPECT_GT(docqa.reused_share, 0.85);
  // Shared system prompts and documents show up as cross-client blocks.
  EXPECT_LT(chat.cross_client_share, 0.1);
  EXPECT_GT(skew.cross_client_share, 2 * chat.cross_client_share);
  EXPECT_GT(docqa.cross_client_share, 0.9);
  // Shorter threads reuse less; load and flat popularity push reuses apart.
  EXPECT_LT(load.reused_share, chat.reused_share - 0.05);
  EXPECT_GT(agent_load.reuse_distance_p50, 3 * agent.reuse_distance_p50 / 2);
  EXPECT_GT(flat.reuse_distance_p50, 2 * docqa.reuse_distance_p50);
}

TEST(TraceGeneratorTest, RejectsBadOptionsAndUnknownPresets) {
  TraceGeneratorOptions o;
  o.block_tokens = 0;
  EXPECT_EQ(GenerateTrace(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TraceGeneratorOptions();
  o.chat_weight = 0;
  EXPECT_EQ(GenerateTrace(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TraceGeneratorOptions();
  o.system.count = 0;
  EXPECT_EQ(GenerateTrace(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TracePreset("nope").status().code(), absl::StatusCode::kNotFound);
}

// The 4-request trace of tools/testdata/small_trace.jsonl, worked by hand.
TEST(TraceShapeTest, SmallTraceByHand) {
  std::vector<TraceRequest> t(4);
  t[0].hash_ids = {0, 1, 2};
  t[1].hash_ids = {0, 1, 3};
  t[2].hash_ids = {0, 1, 2, 4};
  t[3].hash_ids = {5};
  const std::vector<uint32_t> clients = {0, 1, 0, 2};
  const TraceShape s = MeasureTraceShape(t, clients);
  EXPECT_EQ(s.requested_blocks, 11u);
  EXPECT_EQ(s.distinct_blocks, 6u);
  EXPECT_DOUBLE_EQ(s.reused_share, 5.0 / 11);
  // [0] and [0 1] are requested by clients 0 and 1, three times each.
  EXPECT_DOUBLE_EQ(s.cross_client_share, 6.0 / 11);
  // Reuse distances 3, 3, 3, 3, 6.
  EXPECT_EQ(s.reuse_distance_p50, 3u);
  EXPECT_EQ(MeasureTraceShape(t).cross_client_share, 0.0);
}

}  // namespace
}  // namespace mooncake::index
