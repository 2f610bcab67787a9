// Conformance kit for KvDriver models (kv_driver.h). Each model instantiates
// it with an environment type that starts (or reaches) a server:
//
//   struct MyEnv {
//     using Driver = MyDriver;
//     static absl::Status SetUp();     // once per suite: start the server
//     static void TearDown();          // once per suite
//     static absl::StatusOr<std::unique_ptr<Driver>> Connect();  // a new connection
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, KvDriverConformance, ::testing::Types<MyEnv>);
//
// Every test uses keys unique to it, so suites may share one server.
#ifndef MOONCAKE_TOOLS_BENCH_KV_DRIVER_TESTING_H_
#define MOONCAKE_TOOLS_BENCH_KV_DRIVER_TESTING_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/bench/kv_driver.h"
#include "tools/bench/value_pool.h"

namespace mooncake::bench {

template <typename Env>
class KvDriverConformance : public ::testing::Test {
 protected:
  using Driver = typename Env::Driver;
  static_assert(KvDriver<Driver>);

  static void SetUpTestSuite() {
    const absl::Status s = Env::SetUp();
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() { Env::TearDown(); }

  void SetUp() override {
    auto d = Env::Connect();
    ASSERT_TRUE(d.ok()) << d.status();
    driver_ = std::move(*d);
  }

  std::string Key(std::string_view name) const {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return absl::StrCat("conf/", info->test_suite_name(), "/", info->name(), "/",
                        std::string(name));
  }

  ValuePool pool_{size_t{4} << 20};
  std::unique_ptr<Driver> driver_;
};

TYPED_TEST_SUITE_P(KvDriverConformance);

TYPED_TEST_P(KvDriverConformance, PutThenGetReturnsTheSameBytes) {
  auto& d = *this->driver_;
  EXPECT_FALSE(d.system().empty());
  for (size_t size : {size_t{1}, size_t{1000}, size_t{64} << 10, size_t{4} << 20}) {
    const std::string key = this->Key(absl::StrCat("v", size));
    ASSERT_TRUE(d.Put(key, this->pool_.Value(key, size)).ok()) << size;
    absl::StatusOr<std::string_view> got = d.Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(this->pool_.Verify(key, size, *got, VerifyMode::kFull).ok()) << size;
  }
}

TYPED_TEST_P(KvDriverConformance, MissingKeyIsNotFound) {
  absl::StatusOr<std::string_view> got = this->driver_->Get(this->Key("never-put"));
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
}

TYPED_TEST_P(KvDriverConformance, BatchGetAnswersEachKeyInOrder) {
  auto& d = *this->driver_;
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(this->Key(absl::StrCat("k", i)));
  // Key 2 is never put: its slot must say NOT_FOUND and the others must not shift.
  for (int i = 0; i < 5; ++i) {
    if (i == 2) continue;
    ASSERT_TRUE(d.Put(keys[i], this->pool_.Value(keys[i], 1000 + 100 * i)).ok());
  }
  std::vector<std::string_view> views(keys.rbegin(), keys.rend());  // reversed order
  std::vector<absl::StatusOr<std::string_view>> out;
  d.BatchGet(views, out);
  ASSERT_EQ(out.size(), views.size());
  for (size_t j = 0; j < views.size(); ++j) {
    const int i = 4 - static_cast<int>(j);
    if (i == 2) {
      EXPECT_TRUE(absl::IsNotFound(out[j].status())) << out[j].status();
      continue;
    }
    ASSERT_TRUE(out[j].ok()) << out[j].status();
    EXPECT_TRUE(this->pool_.Verify(keys[i], 1000 + 100 * i, *out[j], VerifyMode::kFull).ok()) << i;
  }
}

TYPED_TEST_P(KvDriverConformance, BatchPutStoresEachValue) {
  auto& d = *this->driver_;
  std::vector<std::string> keys;
  std::vector<std::string_view> key_views, values;
  for (int i = 0; i < 17; ++i) keys.push_back(this->Key(absl::StrCat("p", i)));
  // The last four are 4 MiB: a batch larger than any socket buffer.
  const auto size = [](int i) { return i >= 13 ? size_t{4} << 20 : size_t{100} + 4000 * i; };
  for (int i = 0; i < 17; ++i) {
    key_views.push_back(keys[i]);
    values.push_back(this->pool_.Value(keys[i], size(i)));
  }
  std::vector<absl::Status> out;
  d.BatchPut(key_views, values, out);
  ASSERT_EQ(out.size(), keys.size());
  for (int i = 0; i < 17; ++i) {
    ASSERT_TRUE(out[i].ok()) << i << ": " << out[i];
    absl::StatusOr<std::string_view> got = d.Get(keys[i]);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(this->pool_.Verify(keys[i], size(i), *got, VerifyMode::kFull).ok()) << i;
  }
  // The connection stays usable for single calls and a second batch.
  d.BatchPut(std::span<const std::string_view>(key_views).first(1),
             std::span<const std::string_view>(values).subspan(1, 1), out);
  ASSERT_EQ(out.size(), 1u);
  // The store's objects are immutable: a second put of a key is refused there.
  if (d.system().starts_with("store")) {
    EXPECT_FALSE(out[0].ok());
  } else {
    EXPECT_TRUE(out[0].ok()) << out[0];
  }
}

TYPED_TEST_P(KvDriverConformance, RemoveMakesTheKeyMissing) {
  auto& d = *this->driver_;
  const std::string key = this->Key("gone");
  ASSERT_TRUE(d.Put(key, this->pool_.Value(key, 100)).ok());
  ASSERT_TRUE(d.Remove(key).ok());
  EXPECT_TRUE(absl::IsNotFound(d.Get(key).status()));
  EXPECT_TRUE(absl::IsNotFound(d.Remove(key)));
}

TYPED_TEST_P(KvDriverConformance, ConnectionsSeeEachOthersWrites) {
  auto other = TypeParam::Connect();
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string key = this->Key("shared");
  ASSERT_TRUE(this->driver_->Put(key, this->pool_.Value(key, 5000)).ok());
  absl::StatusOr<std::string_view> got = (*other)->Get(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(this->pool_.Verify(key, 5000, *got, VerifyMode::kFull).ok());
}

REGISTER_TYPED_TEST_SUITE_P(KvDriverConformance, PutThenGetReturnsTheSameBytes,
                            MissingKeyIsNotFound, BatchGetAnswersEachKeyInOrder,
                            BatchPutStoresEachValue, RemoveMakesTheKeyMissing,
                            ConnectionsSeeEachOthersWrites);

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_KV_DRIVER_TESTING_H_
