// JsonWriter: a streaming writer of JSON text (RFC 8259) for the benchmark's
// --json output. Commas and nesting are tracked; strings are escaped;
// non-finite numbers are written as null (JSON has no NaN).
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("rows"); w.BeginArray(); ... w.EndArray();
//   w.EndObject();
//   std::string text = w.Take();
//
// Misuse (a value where a key is due, unbalanced End*) is a programmer error
// and asserts.
//
// Thread-safety: none.
#ifndef MOONCAKE_TOOLS_BENCH_JSON_WRITER_H_
#define MOONCAKE_TOOLS_BENCH_JSON_WRITER_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mooncake/base/assert.h"

namespace mooncake::bench {

class JsonWriter {
 public:
  void BeginObject() { Open('{', /*object=*/true); }
  void EndObject() { Close('}', /*object=*/true); }
  void BeginArray() { Open('[', /*object=*/false); }
  void EndArray() { Close(']', /*object=*/false); }

  void Key(std::string_view key) {
    MC_ASSERT(!stack_.empty() && stack_.back().object && !key_pending_, "a key outside an object");
    Separate();
    AppendString(key);
    out_ += ':';
    key_pending_ = true;
  }

  void String(std::string_view s) {
    BeforeValue();
    AppendString(s);
  }
  void Bool(bool b) {
    BeforeValue();
    out_ += b ? "true" : "false";
  }
  void Null() {
    BeforeValue();
    out_ += "null";
  }
  void Int(int64_t v) {
    BeforeValue();
    out_ += std::to_string(v);
  }
  void Uint(uint64_t v) {
    BeforeValue();
    out_ += std::to_string(v);
  }
  void Double(double v) {
    BeforeValue();
    if (!std::isfinite(v)) {
      out_ += "null";
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    out_ += buf;
  }

  // Key + value in one call.
  template <typename T>
  void Field(std::string_view key, T&& value) {
    Key(key);
    if constexpr (std::is_same_v<std::decay_t<T>, bool>) {
      Bool(value);
    } else if constexpr (std::is_floating_point_v<std::decay_t<T>>) {
      Double(value);
    } else if constexpr (std::is_integral_v<std::decay_t<T>> && std::is_signed_v<std::decay_t<T>>) {
      Int(value);
    } else if constexpr (std::is_integral_v<std::decay_t<T>>) {
      Uint(value);
    } else {
      String(std::string_view(std::forward<T>(value)));
    }
  }

  // The document; REQUIRES: every Begin* was ended.
  std::string Take() {
    MC_ASSERT(stack_.empty() && !out_.empty(), "unbalanced or empty JSON document");
    return std::move(out_);
  }

 private:
  struct Level {
    bool object;
    bool empty = true;
  };

  void Separate() {
    if (stack_.empty()) return;
    if (!stack_.back().empty) out_ += ',';
    stack_.back().empty = false;
  }

  void BeforeValue() {
    if (!stack_.empty() && stack_.back().object) {
      MC_ASSERT(key_pending_, "a value in an object needs a key first");
      key_pending_ = false;
      return;
    }
    MC_ASSERT(!stack_.empty() || out_.empty(), "a second top-level value");
    Separate();
  }

  void Open(char c, bool object) {
    BeforeValue();
    out_ += c;
    stack_.push_back({object});
  }

  void Close(char c, bool object) {
    MC_ASSERT(!stack_.empty() && stack_.back().object == object && !key_pending_,
              "unbalanced JSON nesting");
    stack_.pop_back();
    out_ += c;
  }

  void AppendString(std::string_view s) {
    out_ += '"';
    for (const char ch : s) {
      const auto u = static_cast<unsigned char>(ch);
      if (ch == '"' || ch == '\\') {
        out_ += '\\';
        out_ += ch;
      } else if (ch == '\n') {
        out_ += "\\n";
      } else if (u < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", u);
        out_ += buf;
      } else {
        out_ += ch;
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<Level> stack_;
  bool key_pending_ = false;
};

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_JSON_WRITER_H_
