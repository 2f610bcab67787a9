#include "mooncake/base/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace mooncake {
namespace {

absl::Status Fail(absl::StatusCode code) { return absl::Status(code, "boom"); }

absl::StatusOr<int> Parse(bool ok) {
  if (!ok) return absl::InvalidArgumentError("not a number");
  return 42;
}

absl::Status UseReturnIfError(bool fail, int* reached) {
  RETURN_IF_ERROR(fail ? Fail(absl::StatusCode::kUnavailable) : absl::OkStatus());
  ++*reached;
  return absl::OkStatus();
}

absl::StatusOr<int> UseAssignOrReturn(bool ok) {
  ASSIGN_OR_RETURN(int v, Parse(ok));
  ASSIGN_OR_RETURN(auto w, Parse(ok));
  return v + w;
}

absl::StatusOr<std::unique_ptr<int>> MakeUnique(int v) { return std::make_unique<int>(v); }

absl::Status AssignToExisting(int* out) {
  std::unique_ptr<int> p;
  ASSIGN_OR_RETURN(p, MakeUnique(7));  // move-only value
  *out = *p;
  return absl::OkStatus();
}

absl::Status ReturnIfErrorOnStatusOr(bool ok) {
  RETURN_IF_ERROR(Parse(ok));
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorPropagatesAndContinues) {
  int reached = 0;
  absl::Status s = UseReturnIfError(true, &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "boom");
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(UseReturnIfError(false, &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorAcceptsStatusOr) {
  EXPECT_TRUE(ReturnIfErrorOnStatusOr(true).ok());
  EXPECT_EQ(ReturnIfErrorOnStatusOr(false).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacrosTest, AssignOrReturnDeclaresAndPropagates) {
  absl::StatusOr<int> ok = UseAssignOrReturn(true);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 84);
  absl::StatusOr<int> bad = UseAssignOrReturn(false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "not a number");
}

TEST(StatusMacrosTest, AssignOrReturnMovesIntoExistingVariable) {
  int out = 0;
  ASSERT_TRUE(AssignToExisting(&out).ok());
  EXPECT_EQ(out, 7);
}

TEST(StatusMacrosTest, ExpressionIsEvaluatedOnce) {
  int calls = 0;
  auto counted = [&]() -> absl::Status {
    ++calls;
    return absl::OkStatus();
  };
  auto f = [&]() -> absl::Status {
    RETURN_IF_ERROR(counted());
    return absl::OkStatus();
  };
  EXPECT_TRUE(f().ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace mooncake
