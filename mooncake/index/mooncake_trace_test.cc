#include "mooncake/index/mooncake_trace.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace mooncake::index {
namespace {

TEST(MooncakeTraceTest, ParsesALine) {
  auto req = ParseTraceLine(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]})");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->timestamp_ms, 27482);
  EXPECT_EQ(req->input_length, 6955);
  EXPECT_EQ(req->output_length, 52);
  EXPECT_EQ(req->hash_ids, (std::vector<uint64_t>{46, 47, 48}));
}

TEST(MooncakeTraceTest, SkipsUnknownKeysAndAcceptsAnyOrder) {
  auto req = ParseTraceLine(
      R"( { "hash_ids":[], "meta": {"a": [1, 2.5e3, "x\"y", null, true]}, "timestamp": 1.5 } )");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->hash_ids.empty());
  EXPECT_EQ(req->timestamp_ms, 1);
}

TEST(MooncakeTraceTest, MalformedLinesGetClearErrors) {
  struct Case {
    const char* line;
    const char* error;
  };
  for (
      const Case& c : {
          Case{R"({"hash_ids": [1, 2)", "expected ',' or ']'"},
          Case{R"({"hash_ids": [1, -2]})", "outside [0, 4294967295]"},
          Case{R"({"hash_ids": [1.5]})", "expected an integer"},
          Case{R"({"hash_ids": "1,2"})", "hash_ids must be an array"},
          Case{R"({"input_length": 5})", "missing \"hash_ids\""},
          Case{R"({"hash_ids": [1]} trailing)", "trailing characters"},
          Case{R"({"hash_ids": [99999999999999999999999]})", "overflows"},
          Case{R"(["hash_ids"])", "expected '{'"},
          Case{R"({"hash_ids" [1]})", "expected ':'"},
          Case{
              R"({"hash_ids": [1], "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})",
              "nested too deeply"},
      }) {
    auto req = ParseTraceLine(c.line);
    ASSERT_FALSE(req.ok()) << c.line;
    EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(req.status().message().find(c.error), std::string::npos)
        << c.line << " -> " << req.status();
  }
}

TEST(MooncakeTraceTest, TraceErrorsNameTheLine) {
  auto ok = ParseTrace("{\"hash_ids\": [0, 1]}\n\n{\"hash_ids\": [0, 2]}\r\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 2u);
  auto bad = ParseTrace("{\"hash_ids\": [0]}\n{\"hash_ids\": [0,]}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("trace line 2, column 17"), std::string::npos)
      << bad.status();
}

TEST(MooncakeTraceTest, ReadTraceFileReadsAndNamesThePath) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/trace.jsonl";
  {
    std::ofstream out(path);
    out << "{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 3, \"hash_ids\": [4, "
           "5]}\n\n";
  }
  auto t = ReadTraceFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].hash_ids.size(), 2u);
  EXPECT_TRUE(absl::IsNotFound(ReadTraceFile(path + ".missing").status()));
  {
    std::ofstream out(path);
    out << "not json\n";
  }
  auto bad = ReadTraceFile(path);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status();
}

TEST(MooncakeTraceTest, ChainsNamePrefixes) {
  const BlockKeyer keyer = *BlockKeyer::Create(KeyNamespace{"trace"}, 1);
  TraceRequest a{.hash_ids = {0, 1, 2}};
  TraceRequest b{.hash_ids = {0, 1, 3}};
  TraceRequest c{.hash_ids = {5, 1, 2}};
  const auto ka = TraceChain(keyer, a), kb = TraceChain(keyer, b), kc = TraceChain(keyer, c);
  EXPECT_EQ(ka[1], kb[1]);
  EXPECT_NE(ka[2], kb[2]);
  EXPECT_NE(ka[1], kc[1]) << "same id under another prefix is another block";
}

}  // namespace
}  // namespace mooncake::index
