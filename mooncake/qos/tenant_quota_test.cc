#include "mooncake/qos/tenant_quota.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace mooncake::qos {
namespace {

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(TenantQuotaTest, AdmitsUpToCapacityAndRefusesWithTheNumbers) {
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("acme", 1000).ok());
  EXPECT_TRUE(q.Admit("acme", 600).ok());
  EXPECT_TRUE(q.Admit("acme", 400).ok());
  const absl::Status s = q.Admit("acme", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(s, "tenant 'acme'")) << s;
  EXPECT_TRUE(Contains(s, "admitting 1 bytes with 1000 in use")) << s;
  EXPECT_TRUE(Contains(s, "capacity of 1000 bytes")) << s;
  const TenantUsage u = *q.Usage("acme");
  EXPECT_EQ(u.used_bytes, 1000u);
  EXPECT_EQ(u.admitted_requests, 2u);
  EXPECT_EQ(u.refused_requests, 1u);
  EXPECT_TRUE(q.Release("acme", 300).ok());
  EXPECT_TRUE(q.Admit("acme", 300).ok());
}

TEST(TenantQuotaTest, HugeRequestsDoNotWrapAround) {
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("t", 100).ok());
  ASSERT_TRUE(q.Admit("t", 50).ok());
  EXPECT_EQ(q.Admit("t", UINT64_MAX).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(q.Admit("t", UINT64_MAX - 40).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(q.Usage("t")->used_bytes, 50u);
}

TEST(TenantQuotaTest, TenantsAreIndependent) {
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("a", 10).ok());
  ASSERT_TRUE(q.SetCapacity("b", 20).ok());
  EXPECT_TRUE(q.Admit("a", 10).ok());
  EXPECT_TRUE(q.Admit("b", 20).ok());
  EXPECT_FALSE(q.Admit("a", 1).ok());
  EXPECT_EQ(q.TenantCount(), 2u);
}

TEST(TenantQuotaTest, UnknownTenantIsNotFoundUnlessADefaultExists) {
  TenantQuota strict;
  const absl::Status s = strict.Admit("ghost", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, "'ghost'")) << s;
  EXPECT_EQ(strict.Release("ghost", 1).code(), absl::StatusCode::kNotFound);

  TenantQuota open({.default_capacity_bytes = 64});
  EXPECT_TRUE(open.Admit("new", 64).ok());
  EXPECT_EQ(open.Usage("new")->capacity_bytes, 64u);
  EXPECT_EQ(open.Admit("new", 1).code(), absl::StatusCode::kResourceExhausted);
}

TEST(TenantQuotaTest, CapacityChangesAtRunTime) {
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("t", 1000).ok());
  ASSERT_TRUE(q.Admit("t", 800).ok());
  ASSERT_TRUE(q.SetCapacity("t", 500).ok());  // below use: nothing evicted
  EXPECT_EQ(q.Usage("t")->used_bytes, 800u);
  const absl::Status s = q.Admit("t", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(s, "(0 free)")) << s;
  ASSERT_TRUE(q.Release("t", 400).ok());
  EXPECT_TRUE(q.Admit("t", 100).ok());
  EXPECT_FALSE(q.Admit("t", 1).ok());
  ASSERT_TRUE(q.SetCapacity("t", 10'000).ok());
  EXPECT_TRUE(q.Admit("t", 9'500).ok());
}

TEST(TenantQuotaTest, OverReleaseIsRefusedAndChangesNothing) {
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("t", 100).ok());
  ASSERT_TRUE(q.Admit("t", 30).ok());
  const absl::Status s = q.Release("t", 31);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s, "releasing 31 bytes but only 30")) << s;
  EXPECT_EQ(q.Usage("t")->used_bytes, 30u);
}

TEST(TenantQuotaTest, RemoveOnlyWhenNothingIsHeld) {
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("t", 100).ok());
  ASSERT_TRUE(q.Admit("t", 1).ok());
  EXPECT_EQ(q.RemoveTenant("t").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(q.Release("t", 1).ok());
  EXPECT_TRUE(q.RemoveTenant("t").ok());
  EXPECT_FALSE(q.Usage("t").has_value());
  EXPECT_EQ(q.RemoveTenant("t").code(), absl::StatusCode::kNotFound);
}

TEST(TenantQuotaTest, BadNamesAndAFullTableGetClearErrors) {
  TenantQuota q({.default_capacity_bytes = 10, .max_tenants = 2});
  EXPECT_EQ(q.SetCapacity("", 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q.Admit(std::string(257, 'x'), 1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(q.Admit("a", 1).ok());
  ASSERT_TRUE(q.SetCapacity("b", 1).ok());
  const absl::Status s = q.Admit("c", 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(s, "table is full (2 tenants)")) << s;
}

// Threads admit and release random sizes on shared tenants. Each thread adds
// to a shadow counter after a successful Admit and subtracts before Release,
// so the shadow never exceeds what the quota holds: if the shadow ever passes
// the capacity, the quota admitted too much.
TEST(TenantQuotaTest, ConcurrentAdmitAndReleaseNeverExceedCapacity) {
  constexpr int kThreads = 4, kTenants = 3, kOpsPerThread = 20000;
  constexpr uint64_t kCapacity[kTenants] = {10'000, 25'000, 4'096};
  const std::string names[kTenants] = {"t0", "t1", "t2"};
  TenantQuota q;
  for (int t = 0; t < kTenants; ++t) ASSERT_TRUE(q.SetCapacity(names[t], kCapacity[t]).ok());
  std::atomic<uint64_t> shadow[kTenants] = {};
  std::atomic<int> violations{0};
  std::atomic<uint64_t> admits{0}, refusals{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937_64 rng(100 + th);
      std::vector<std::vector<uint64_t>> held(kTenants);
      for (int op = 0; op < kOpsPerThread; ++op) {
        const int t = static_cast<int>(rng() % kTenants);
        if (rng() % 100 < 55 || held[t].empty()) {
          const uint64_t bytes = 1 + rng() % (kCapacity[t] / 3);
          const absl::Status s = q.Admit(names[t], bytes);
          if (s.ok()) {
            if (shadow[t].fetch_add(bytes) + bytes > kCapacity[t]) violations.fetch_add(1);
            held[t].push_back(bytes);
            admits.fetch_add(1);
          } else {
            if (s.code() != absl::StatusCode::kResourceExhausted) violations.fetch_add(1);
            refusals.fetch_add(1);
          }
        } else {
          const uint64_t bytes = held[t].back();
          held[t].pop_back();
          shadow[t].fetch_sub(bytes);
          if (!q.Release(names[t], bytes).ok()) violations.fetch_add(1);
        }
        if (op % 64 == 0) {
          const TenantUsage u = *q.Usage(names[t]);
          if (u.used_bytes > u.capacity_bytes) violations.fetch_add(1);
        }
      }
      for (int t = 0; t < kTenants; ++t) {
        for (uint64_t bytes : held[t]) {
          shadow[t].fetch_sub(bytes);
          if (!q.Release(names[t], bytes).ok()) violations.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(admits.load(), 1000u);
  EXPECT_GT(refusals.load(), 100u) << "the stress never pressed against a quota";
  uint64_t admitted = 0, refused = 0;
  for (int t = 0; t < kTenants; ++t) {
    const TenantUsage u = *q.Usage(names[t]);
    EXPECT_EQ(u.used_bytes, 0u) << names[t];
    admitted += u.admitted_requests;
    refused += u.refused_requests;
  }
  EXPECT_EQ(admitted, admits.load());
  EXPECT_EQ(refused, refusals.load());
}

// Capacity flips while admits run: once SetCapacity(low) returns, no admit
// may take use above `low` until the capacity is raised again.
TEST(TenantQuotaTest, ConcurrentCapacityChangesAreRespected) {
  constexpr uint64_t kHigh = 50'000, kLow = 5'000;
  TenantQuota q;
  ASSERT_TRUE(q.SetCapacity("t", kHigh).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 3; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937_64 rng(200 + th);
      std::vector<uint64_t> held;
      while (!stop.load(std::memory_order_relaxed)) {
        if (rng() % 2 == 0 || held.empty()) {
          const uint64_t bytes = 1 + rng() % 2000;
          if (q.Admit("t", bytes).ok()) held.push_back(bytes);
        } else {
          if (!q.Release("t", held.back()).ok()) violations.fetch_add(1);
          held.pop_back();
        }
      }
      for (uint64_t bytes : held) {
        if (!q.Release("t", bytes).ok()) violations.fetch_add(1);
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(q.SetCapacity("t", kLow).ok());
    // Use may still be above kLow from before; it may only fall until raised.
    uint64_t last = q.Usage("t")->used_bytes;
    for (int i = 0; i < 20; ++i) {
      const uint64_t now = q.Usage("t")->used_bytes;
      // Releases only lower use; an admit may raise it only to <= kLow.
      if (now > last && now > kLow) violations.fetch_add(1);
      last = now;
    }
    ASSERT_TRUE(q.SetCapacity("t", kHigh).ok());
    std::this_thread::yield();
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(q.Usage("t")->used_bytes, 0u);
}

}  // namespace
}  // namespace mooncake::qos
