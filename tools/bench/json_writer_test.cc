#include "tools/bench/json_writer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace mooncake::bench {
namespace {

TEST(JsonWriterTest, NestedDocument) {
  JsonWriter w;
  w.BeginObject();
  w.Field("name", "bench");
  w.Field("n", uint64_t{3});
  w.Field("neg", int64_t{-2});
  w.Field("ok", true);
  w.Field("ratio", 1.25);
  w.Key("rows");
  w.BeginArray();
  w.BeginObject();
  w.EndObject();
  w.Int(7);
  w.Null();
  w.EndArray();
  w.Key("empty");
  w.BeginArray();
  w.EndArray();
  w.EndObject();
  EXPECT_EQ(w.Take(), R"({"name":"bench","n":3,"neg":-2,"ok":true,"ratio":1.25,"rows":[{},7,null],)"
                      R"("empty":[]})");
}

TEST(JsonWriterTest, StringsAreEscaped) {
  JsonWriter w;
  w.BeginArray();
  w.String("a\"b\\c\nd\x01");
  w.EndArray();
  EXPECT_EQ(w.Take(), R"(["a\"b\\c\nd\u0001"])");
}

TEST(JsonWriterTest, NonFiniteNumbersAreNull) {
  JsonWriter w;
  w.BeginArray();
  w.Double(std::numeric_limits<double>::quiet_NaN());
  w.Double(std::numeric_limits<double>::infinity());
  w.Double(0.5);
  w.EndArray();
  EXPECT_EQ(w.Take(), "[null,null,0.5]");
}

TEST(JsonWriterDeathTest, MisuseAsserts) {
  EXPECT_DEATH(
      {
        JsonWriter w;
        w.BeginObject();
        w.Int(1);  // no key
      },
      "needs a key");
  EXPECT_DEATH(
      {
        JsonWriter w;
        w.BeginArray();
        w.EndObject();
      },
      "unbalanced");
  EXPECT_DEATH(
      {
        JsonWriter w;
        w.BeginArray();
        (void)w.Take();
      },
      "unbalanced");
}

}  // namespace
}  // namespace mooncake::bench
