#include "tools/bench/kv_driver.h"

#include <memory>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/kv_driver_testing.h"
#include "tools/bench/testing/fake_kv_driver.h"

namespace mooncake::bench {
namespace {

// One broken type per requirement of KvDriver.
struct Base {
  std::string_view system() const { return "x"; }
  absl::Status Put(std::string_view, std::string_view) { return absl::OkStatus(); }
  absl::StatusOr<std::string_view> Get(std::string_view) { return std::string_view(); }
  void BatchGet(std::span<const std::string_view>, std::vector<absl::StatusOr<std::string_view>>&) {
  }
  void BatchPut(std::span<const std::string_view>, std::span<const std::string_view>,
                std::vector<absl::Status>&) {}
  absl::Status Remove(std::string_view) { return absl::OkStatus(); }
};
static_assert(KvDriver<Base>);

struct NoSystem {
  absl::Status Put(std::string_view, std::string_view) { return absl::OkStatus(); }
  absl::StatusOr<std::string_view> Get(std::string_view) { return std::string_view(); }
  void BatchGet(std::span<const std::string_view>, std::vector<absl::StatusOr<std::string_view>>&) {
  }
  void BatchPut(std::span<const std::string_view>, std::span<const std::string_view>,
                std::vector<absl::Status>&) {}
  absl::Status Remove(std::string_view) { return absl::OkStatus(); }
};
static_assert(!KvDriver<NoSystem>);

struct PutReturnsBool : Base {
  bool Put(std::string_view, std::string_view) { return true; }
};
static_assert(!KvDriver<PutReturnsBool>);

struct GetReturnsString : Base {
  std::string Get(std::string_view) { return ""; }  // no error channel
};
static_assert(!KvDriver<GetReturnsString>);

struct BatchGetReturnsVector : Base {
  std::vector<std::string> BatchGet(std::span<const std::string_view>,
                                    std::vector<absl::StatusOr<std::string_view>>&) {
    return {};
  }
};
static_assert(!KvDriver<BatchGetReturnsVector>);

struct RemoveTakesInt : Base {
  absl::Status Remove(int) { return absl::OkStatus(); }
};
static_assert(!KvDriver<RemoveTakesInt>);

// The kit against the in-process fake: the kit itself is exercised here
// without any server.
FakeKvStore& TheFake() {
  static FakeKvStore* store = new FakeKvStore();
  return *store;
}

struct FakeEnv {
  using Driver = FakeKvDriver;
  static absl::Status SetUp() { return absl::OkStatus(); }
  static void TearDown() {}
  static absl::StatusOr<std::unique_ptr<Driver>> Connect() {
    return std::make_unique<FakeKvDriver>(&TheFake());
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Fake, KvDriverConformance, ::testing::Types<FakeEnv>);

}  // namespace
}  // namespace mooncake::bench
