#include "mooncake/store/node/http_request.h"

#include <string>

#include "gtest/gtest.h"

namespace mooncake::node {
namespace {

HttpRequest MustParse(std::string_view in, const HttpLimits& limits = {}) {
  auto r = ParseHttpRequest(in, limits);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r.ok() && r->has_value()) << "incomplete: " << in;
  return r.ok() && r->has_value() ? **r : HttpRequest{};
}

TEST(HttpRequest, ParsesRequestLineAndHeaders) {
  const std::string in =
      "GET /metrics?name=x&y HTTP/1.1\r\nHost: localhost:9090\r\nAccept:  text/plain \r\n\r\n";
  const HttpRequest r = MustParse(in);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/metrics?name=x&y");
  EXPECT_EQ(r.path, "/metrics");
  EXPECT_EQ(r.query, "name=x&y");
  EXPECT_EQ(r.minor_version, 1);
  ASSERT_EQ(r.headers.size(), 2u);
  ASSERT_NE(r.Header("host"), nullptr);
  EXPECT_EQ(*r.Header("host"), "localhost:9090");
  EXPECT_EQ(*r.Header("accept"), "text/plain");  // names lower-cased, values trimmed
  EXPECT_EQ(r.Header("missing"), nullptr);
  EXPECT_EQ(r.head_bytes, in.size());
}

TEST(HttpRequest, HeadBytesStopsAtBlankLineLeavingBody) {
  const std::string head = "GET / HTTP/1.0\r\n\r\n";
  const HttpRequest r = MustParse(head + "body bytes");
  EXPECT_EQ(r.head_bytes, head.size());
  EXPECT_EQ(r.minor_version, 0);
}

TEST(HttpRequest, BareLineFeedsAndLeadingEmptyLinesAccepted) {
  const HttpRequest r = MustParse("\r\n\nGET /health HTTP/1.1\nHost: a\n\n");
  EXPECT_EQ(r.path, "/health");
  EXPECT_EQ(*r.Header("host"), "a");
}

TEST(HttpRequest, IncompleteAtEveryPrefix) {
  const std::string in = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  for (size_t n = 0; n < in.size(); ++n) {
    auto r = ParseHttpRequest(std::string_view(in).substr(0, n));
    ASSERT_TRUE(r.ok()) << n << ": " << r.status();
    EXPECT_FALSE(r->has_value()) << "complete after only " << n << " bytes";
  }
  auto whole = ParseHttpRequest(in);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole->has_value());
}

TEST(HttpRequest, MalformedIsInvalidArgument) {
  for (const char* in : {
           "GET\r\n\r\n",                        // no target
           "GET  /x HTTP/1.1\r\n\r\n",           // empty target
           "GET /x\r\n\r\n",                     // no version
           "GET /x HTTP/2.0\r\n\r\n",            // not 1.x
           "GET /x HTTP/1.1x\r\n\r\n",           // junk after the version
           "G(T /x HTTP/1.1\r\n\r\n",            // not a token
           "GET x HTTP/1.1\r\n\r\n",             // target not absolute path
           "GET /a\x01 HTTP/1.1\r\n\r\n",        // control byte in the target
           "GET / HTTP/1.1\r\nNoColon\r\n\r\n",  // header without colon
           "GET / HTTP/1.1\r\n: v\r\n\r\n",      // empty header name
           "GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",
           "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
           "GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n",
       }) {
    auto r = ParseHttpRequest(in);
    ASSERT_FALSE(r.ok()) << "accepted: " << in;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_EQ(HttpStatusForParseError(r.status()), 400);
  }
}

TEST(HttpRequest, OversizedHeadIsResourceExhausted) {
  const HttpLimits limits{.max_head_bytes = 64, .max_headers = 3};
  // Longer than the limit, no end in sight.
  auto r = ParseHttpRequest("GET /" + std::string(100, 'a'), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(HttpStatusForParseError(r.status()), 431);
  // Complete, but its end lies past the limit.
  r = ParseHttpRequest("GET / HTTP/1.1\r\nX: " + std::string(60, 'b') + "\r\n\r\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status()));
  // Exactly at the limit is fine.
  std::string exact = "GET / HTTP/1.1\r\nX: ";
  exact += std::string(64 - exact.size() - 4, 'c') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), 64u);
  EXPECT_EQ(MustParse(exact, limits).head_bytes, 64u);
  // Too many headers.
  r = ParseHttpRequest("GET / HTTP/1.1\r\na:1\r\nb:2\r\nc:3\r\nd:4\r\n\r\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status()));
}

TEST(HttpRequest, MethodIsNotJudgedHere) {
  EXPECT_EQ(MustParse("DELETE /x HTTP/1.1\r\n\r\n").method, "DELETE");
}

TEST(HttpRequest, BodyBytesFromContentLength) {
  EXPECT_EQ(*RequestBodyBytes(MustParse("PUT /x HTTP/1.1\r\n\r\n")), std::nullopt);
  EXPECT_EQ(*RequestBodyBytes(MustParse("PUT /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n")), 0u);
  EXPECT_EQ(*RequestBodyBytes(MustParse("PUT /x HTTP/1.1\r\ncontent-length:  42 \r\n\r\n")), 42u);
  // Equal duplicates count once (RFC 9112 6.3); different ones are an error.
  EXPECT_EQ(*RequestBodyBytes(
                MustParse("PUT /x HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n")),
            7u);
  for (const char* bad : {"PUT /x HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n",
                          "PUT /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                          "PUT /x HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
                          "PUT /x HTTP/1.1\r\nContent-Length:\r\n\r\n",
                          "PUT /x HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"}) {
    auto r = RequestBodyBytes(MustParse(bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(HttpStatusForParseError(r.status()), 400) << bad;
  }
  EXPECT_EQ(*RequestBodyBytes(
                MustParse("PUT /x HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n")),
            9999999999999999999u);
  auto chunked =
      RequestBodyBytes(MustParse("PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
  ASSERT_FALSE(chunked.ok());
  EXPECT_EQ(HttpStatusForParseError(chunked.status()), 501);
}

TEST(HttpRequest, UrlDecodeAndQueryParameter) {
  EXPECT_EQ(*UrlDecode("a%2Fb+c%20d%41%7e"), "a/b c dA~");
  EXPECT_EQ(*UrlDecode(""), "");
  EXPECT_EQ(*UrlDecode("%00"), std::string(1, '\0'));
  for (const char* bad : {"%", "%4", "%zz", "a%g1"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(UrlDecode(bad).status())) << bad;
  }
  EXPECT_EQ(**QueryParameter("key=a%2Fb", "key"), "a/b");
  EXPECT_EQ(**QueryParameter("x=1&key=v&key=w", "key"), "v");  // the first
  EXPECT_EQ(**QueryParameter("k%65y=v", "key"), "v");          // names decode too
  EXPECT_EQ(**QueryParameter("key", "key"), "");
  EXPECT_EQ(**QueryParameter("key=", "key"), "");
  EXPECT_EQ(*QueryParameter("keys=1&&k=2", "key"), std::nullopt);
  EXPECT_EQ(*QueryParameter("", "key"), std::nullopt);
  EXPECT_FALSE(QueryParameter("key=%zz", "key").ok());
}

}  // namespace
}  // namespace mooncake::node
