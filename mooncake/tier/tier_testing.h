// The Tier conformance kit: every model instantiates it in one line.
//
//   template <> struct mooncake::tier::TierTestTraits<MyTier> {
//     static std::unique_ptr<MyTier> Make(uint64_t capacity_bytes);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(MyTier, TierConformanceTest, ::testing::Types<MyTier>);
//
// Make returns a fresh, empty tier able to hold about `capacity_bytes` of
// objects (per-object overhead is the model's business).
#ifndef MOONCAKE_TIER_TIER_TESTING_H_
#define MOONCAKE_TIER_TIER_TESTING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier {

template <typename T>
struct TierTestTraits;

// Deterministic bytes that depend on the key and the size.
inline std::vector<std::byte> TestObject(std::string_view key, size_t size) {
  std::vector<std::byte> out(size);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ size;
  for (char c : key) x = (x ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x);
  }
  return out;
}

template <typename T>
class TierConformanceTest : public ::testing::Test {
 protected:
  std::unique_ptr<T> Make(uint64_t capacity_bytes = 8 << 20) {
    return TierTestTraits<T>::Make(capacity_bytes);
  }
};

TYPED_TEST_SUITE_P(TierConformanceTest);

TYPED_TEST_P(TierConformanceTest, WriteReadRoundTrip) {
  auto tier = this->Make();
  for (size_t size : {1ul, 100ul, 4096ul, 70000ul, 1ul << 20}) {
    const std::string key = "obj-" + std::to_string(size);
    const auto data = TestObject(key, size);
    ASSERT_TRUE(WriteBlocking(*tier, key, data, ObjectMeta{compress::DType::kBytes, size}).ok());
    std::vector<std::byte> back(size + 7);
    auto r = ReadBlocking(*tier, key, back);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->raw_bytes, size);
    EXPECT_EQ(r->meta.user_tag, size);
    back.resize(size);
    EXPECT_EQ(back, data);
    ASSERT_TRUE(tier->Contains(key));
    EXPECT_EQ(tier->Lookup(key)->raw_bytes, size);
  }
  EXPECT_EQ(tier->stats().objects, 5u);
}

TYPED_TEST_P(TierConformanceTest, ErrorsAreStatuses) {
  auto tier = this->Make();
  const auto data = TestObject("a", 1000);
  EXPECT_EQ(WriteBlocking(*tier, "", data).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteBlocking(*tier, std::string(kMaxKeyBytes + 1, 'k'), data).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteBlocking(*tier, "empty", std::span<const std::byte>()).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WriteBlocking(*tier, "a", data).ok());
  EXPECT_EQ(WriteBlocking(*tier, "a", data).code(), absl::StatusCode::kAlreadyExists);
  std::vector<std::byte> small(999);
  EXPECT_EQ(ReadBlocking(*tier, "a", small).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBlocking(*tier, "b", small).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RemoveBlocking(*tier, "b").code(), absl::StatusCode::kNotFound);
  EXPECT_GE(tier->stats().read_misses, 1u);
}

// Completion callbacks may call back into the tier and start new operations, whatever the
// outcome, including errors found before any I/O (a model that completes those inline while
// holding its own lock deadlocks here).
TYPED_TEST_P(TierConformanceTest, CallbacksMayCallBackIntoTheTier) {
  auto tier = this->Make();
  TypeParam& t = *tier;
  const auto data = TestObject("re", 5000);
  std::vector<std::byte> into(5000), small(10);
  // Each callback looks at the tier and starts a remove of an absent key (without waiting
  // for it: a callback must not block on another operation), then reports its own status;
  // the caller waits for both.
  struct Reentry {
    std::promise<absl::Status> own, nested;
    absl::Status Wait() {
      absl::Status s = own.get_future().get();
      const absl::Status n = nested.get_future().get();
      return absl::IsNotFound(n) ? s : n;
    }
  };
  auto reenter = [&t](absl::Status own, Reentry& r) {
    (void)t.stats();
    (void)t.Contains("re");
    (void)t.Lookup("re");
    t.ForEach([](const ObjectInfo&) {});
    t.Remove("absent", [&r](absl::Status s) { r.nested.set_value(s); });
    r.own.set_value(own);
  };
  auto write = [&](std::string_view key, std::span<const std::byte> bytes) {
    Reentry r;
    t.Write(key, bytes, {}, [&](absl::Status s) { reenter(s, r); });
    return r.Wait();
  };
  auto read = [&](std::string_view key, std::span<std::byte> buf) {
    Reentry r;
    t.Read(key, buf, [&](absl::StatusOr<ReadResult> res) { reenter(res.status(), r); });
    return r.Wait();
  };
  auto remove = [&](std::string_view key) {
    Reentry r;
    t.Remove(key, [&](absl::Status s) { reenter(s, r); });
    return r.Wait();
  };
  EXPECT_TRUE(write("re", data).ok());
  EXPECT_EQ(write("re", data).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(write("", data).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(write("empty", {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(read("re", into).ok());
  EXPECT_EQ(into, data);
  EXPECT_EQ(read("re", small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read("absent", into).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(remove("re").ok());
  EXPECT_EQ(remove("re").code(), absl::StatusCode::kNotFound);
}

TYPED_TEST_P(TierConformanceTest, RemoveFreesSpaceForReuse) {
  auto tier = this->Make(4 << 20);
  const auto data = TestObject("big", 1 << 20);
  int written = 0;
  for (; written < 64; ++written) {
    absl::Status s = WriteBlocking(*tier, "k" + std::to_string(written), data);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      break;
    }
  }
  ASSERT_GT(written, 0);
  ASSERT_LT(written, 64) << "a 4 MiB tier took 64 MiB";
  for (int i = 0; i < written; ++i)
    ASSERT_TRUE(RemoveBlocking(*tier, "k" + std::to_string(i)).ok());
  EXPECT_FALSE(tier->Contains("k0"));
  EXPECT_EQ(tier->stats().objects, 0u);
  for (int i = 0; i < written; ++i) {
    ASSERT_TRUE(WriteBlocking(*tier, "again" + std::to_string(i), data).ok()) << i;
  }
}

TYPED_TEST_P(TierConformanceTest, ForEachVisitsEveryObject) {
  auto tier = this->Make();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(WriteBlocking(*tier, "k" + std::to_string(i), TestObject("x", 100 + i)).ok());
  }
  uint64_t count = 0, bytes = 0;
  tier->ForEach([&](const ObjectInfo& info) {
    ++count;
    bytes += info.raw_bytes;
  });
  EXPECT_EQ(count, 20u);
  EXPECT_EQ(bytes, 20u * 100 + 190);
  EXPECT_EQ(tier->stats().raw_bytes, bytes);
  EXPECT_GT(tier->capacity_bytes(), 0u);
}

TYPED_TEST_P(TierConformanceTest, ConcurrentWritersReadersRemovers) {
  auto tier = this->Make(16 << 20);
  constexpr int kThreads = 4, kPerThread = 40;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string key = "t" + std::to_string(t) + "-" + std::to_string(i);
        const auto data = TestObject(key, 1000 + 977 * i);
        if (!WriteBlocking(*tier, key, data).ok()) ++wrong;
        std::vector<std::byte> back(data.size());
        auto r = ReadBlocking(*tier, key, back);
        if (!r.ok() || back != data) ++wrong;
        if (i % 3 == 0 && !RemoveBlocking(*tier, key).ok()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(tier->stats().objects, static_cast<uint64_t>(kThreads * (kPerThread - 14)));
}

REGISTER_TYPED_TEST_SUITE_P(TierConformanceTest, WriteReadRoundTrip, ErrorsAreStatuses,
                            CallbacksMayCallBackIntoTheTier, RemoveFreesSpaceForReuse,
                            ForEachVisitsEveryObject, ConcurrentWritersReadersRemovers);

}  // namespace mooncake::tier

#endif  // MOONCAKE_TIER_TIER_TESTING_H_
