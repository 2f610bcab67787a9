#include "mooncake/store/compat/return_codes.h"

#include "gtest/gtest.h"

namespace mooncake::compat {
namespace {

TEST(ReturnCodes, EachStatusMapsToMooncakesNumber) {
  EXPECT_EQ(ToMooncakeCode(absl::OkStatus()), 0);
  EXPECT_EQ(ToMooncakeCode(absl::NotFoundError("")), -704);
  EXPECT_EQ(ToMooncakeCode(absl::AlreadyExistsError("")), -705);
  EXPECT_EQ(ToMooncakeCode(absl::AbortedError("")), -706);
  EXPECT_EQ(ToMooncakeCode(absl::FailedPreconditionError("")), -706);
  EXPECT_EQ(ToMooncakeCode(absl::ResourceExhaustedError("")), -200);
  EXPECT_EQ(ToMooncakeCode(absl::OutOfRangeError("")), -10);
  EXPECT_EQ(ToMooncakeCode(absl::InvalidArgumentError("")), -600);
  EXPECT_EQ(ToMooncakeCode(absl::DataLossError("")), -801);
  EXPECT_EQ(ToMooncakeCode(absl::UnavailableError("")), -900);
  EXPECT_EQ(ToMooncakeCode(absl::DeadlineExceededError("")), -900);
  EXPECT_EQ(ToMooncakeCode(absl::UnavailableError(""), /*transfer=*/true), -800);
  EXPECT_EQ(ToMooncakeCode(absl::InternalError("")), -1);
  EXPECT_EQ(ToMooncakeCode(absl::UnknownError("")), -1);
}

TEST(ReturnCodes, NamesAreMooncakes) {
  EXPECT_EQ(MooncakeCodeName(kObjectNotFound), "OBJECT_NOT_FOUND");
  EXPECT_EQ(MooncakeCodeName(kRpcFail), "RPC_FAIL");
  EXPECT_EQ(MooncakeCodeName(12345), "UNKNOWN");
}

}  // namespace
}  // namespace mooncake::compat
