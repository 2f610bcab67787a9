// Feeds arbitrary bytes to the capability checks of base/capability.h, what a
// worker runs on the 64 bytes a tenant's connection sends with each READ and
// WRITE (docs/security.md). Every outcome must be a Status, never a crash;
// nothing not issued with the cluster's key verifies; what decodes re-issues
// to bytes that verify for exactly that grant.
//
// An input: byte 0 the right asked (bit 0: write) and which holder (bit 1:
// bob), bytes 1..8 and 9..16 the offset and length asked, then the
// capability's 64 bytes (what is there; short is fine).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/base/capability.h"

namespace mooncake {
namespace {

constexpr std::string_view kScope = "router://h/1|tcp://127.0.0.1:9#1";
constexpr int64_t kNow = 1'800'000'000'000;

const std::shared_ptr<const auth::CapabilityKey>& TheKey() {
  static const auto* key =
      new std::shared_ptr<const auth::CapabilityKey>(std::make_shared<const auth::CapabilityKey>(
          auth::CapabilityKey::FromSecret("0123456789abcdef0123456789abcdef")));
  return *key;
}

uint64_t U64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::string Seed(uint8_t flags, uint64_t offset, uint64_t length, const std::string& cap) {
  std::string s(1, static_cast<char>(flags));
  for (uint64_t v : {offset, length}) {
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  }
  return s + cap;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  const auth::CapabilityKey& k = *TheKey();
  const std::string read =
      k.Issue(kScope, "tenant:alice", 7, {auth::kCapRead, 4096, 8192, kNow + 1000});
  const std::string write =
      k.Issue(kScope, "tenant:bob", 7, {auth::kCapWrite, 0, 1 << 20, kNow + 5000});
  return {Seed(0, 4096, 8192, read), Seed(0, 4096, 8193, read),
          Seed(1, 4096, 1, read),    Seed(3, 0, 4096, write),
          Seed(2, 0, 4096, write),   Seed(0, 0, 1, std::string(64, '\0')),
          Seed(0, 0, 1, "short")};
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake;
  if (size < 17) return 0;
  const uint8_t right = (data[0] & 1) != 0 ? auth::kCapWrite : auth::kCapRead;
  const std::string_view holder = (data[0] & 2) != 0 ? "tenant:bob" : "tenant:alice";
  const uint64_t offset = U64(data + 1), length = U64(data + 9);
  const std::string_view cap(reinterpret_cast<const char*>(data + 17), size - 17);
  static auto* verified = new auth::VerifiedCapabilities(TheKey(), 256);

  const absl::Status direct = TheKey()->Check(kScope, holder, 7, cap, right, offset, length, kNow);
  const absl::Status memo = verified->Check(kScope, holder, 7, cap, right, offset, length, kNow);
  MC_ASSERT(direct.ok() == memo.ok(), "the memo and the key disagree");
  MC_ASSERT(direct.ok() || absl::IsPermissionDenied(direct), "a refusal is PERMISSION_DENIED");

  absl::StatusOr<auth::CapabilityGrant> g = auth::DecodeCapabilityGrant(cap);
  if (g.ok()) {
    // Issued with the key for that grant, it verifies over its whole range
    // (and the input's bytes verify only if they are exactly those).
    const std::string issued = TheKey()->Issue(kScope, holder, 7, *g);
    MC_ASSERT(direct.ok() == (issued == cap && g->expiry_unix_ms >= kNow &&
                              auth::CapabilityKey::Covers(*g, right, offset, length, kNow).ok()),
              "verified bytes that the key did not issue for that grant");
    const uint8_t any = (g->rights & auth::kCapRead) != 0 ? auth::kCapRead : auth::kCapWrite;
    MC_ASSERT(TheKey()
                  ->Check(kScope, holder, 7, issued, any, g->offset, g->length, g->expiry_unix_ms)
                  .ok(),
              "an issued capability does not verify over its own range");
  } else {
    MC_ASSERT(!direct.ok(), "bytes that do not decode verified");
  }
  return 0;
}
