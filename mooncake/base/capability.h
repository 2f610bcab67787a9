// Range capabilities: the master's grant, to one tenant, of read or write
// access to one byte range of one segment of one worker, until a deadline
// (docs/security.md, "Tenant isolation on the workers").
//
//   // master, answering a tenant's GetReplicas:
//   ASSIGN_OR_RETURN(auth::CapabilityKey key, auth::CapabilityKey::FromCredentials(*creds));
//   std::string cap = key.Issue(worker_id, "tenant:alice", segment_id,
//                               {auth::kCapRead, offset, length, expiry_unix_ms});
//   // worker, serving a READ frame of a tenant's connection:
//   RETURN_IF_ERROR(key.Check(worker_id, who.name, segment_id, cap, auth::kCapRead,
//                             offset, length, NowUnixMs()));
//
// A capability is 64 bytes, little-endian:
//
//   off size field
//     0    1 version    1
//     1    1 rights     kCapRead | kCapWrite
//     2    6 reserved   0
//     8    8 offset     first byte granted
//    16    8 length     bytes granted (> 0)
//    24    8 expiry     Unix time in ms after which it is refused
//    32   32 mac        HMAC-SHA256(key, "mooncake-cap-v1" | scope | principal |
//                       segment | bytes 0..31), scope and principal
//                       length-prefixed (4 bytes), segment 8 bytes
//
// The key is HMAC-SHA256(cluster secret, "mooncake capability key v1"): every
// process holding the cluster's token file (masters and workers) derives it,
// a tenant's client (whose file has only its own line) cannot. The MAC binds
// the capability to the worker (`scope`, the worker id), the segment (the
// master's id) and the principal it was issued to, so it is useless on
// another worker, segment or connection of another tenant. Expiry is wall
// clock: masters and workers are assumed to keep their clocks synchronized
// (NTP); a worker whose clock is behind accepts a capability that much longer.
//
// Cryptography is OpenSSL's libcrypto (HMAC-SHA256, CRYPTO_memcmp).
//
// Thread-safety: CapabilityKey is immutable; share it const.
#ifndef MOONCAKE_BASE_CAPABILITY_H_
#define MOONCAKE_BASE_CAPABILITY_H_

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"

namespace mooncake::auth {

inline constexpr size_t kCapabilityBytes = 64;
inline constexpr uint8_t kCapabilityVersion = 1;
inline constexpr uint8_t kCapRead = 1;
inline constexpr uint8_t kCapWrite = 2;

// What a capability grants (its fields before the MAC).
struct CapabilityGrant {
  uint8_t rights = 0;  // kCapRead | kCapWrite
  uint64_t offset = 0;
  uint64_t length = 0;
  int64_t expiry_unix_ms = 0;

  friend bool operator==(const CapabilityGrant&, const CapabilityGrant&) = default;
};

inline int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

namespace capability_detail {

inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace capability_detail

// The grant in `cap`'s first 32 bytes; INVALID_ARGUMENT when they cannot be
// one (wrong size or version, reserved bytes set, unknown rights, an empty
// or wrapping range). Says nothing about the MAC.
inline absl::StatusOr<CapabilityGrant> DecodeCapabilityGrant(std::string_view cap) {
  using capability_detail::GetU64;
  if (cap.size() != kCapabilityBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a capability is ", kCapabilityBytes, " bytes, not ", cap.size()));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(cap.data());
  if (p[0] != kCapabilityVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unknown capability version ", p[0]));
  }
  for (int i = 2; i < 8; ++i) {
    if (p[i] != 0) return absl::InvalidArgumentError("capability reserved bytes are not zero");
  }
  CapabilityGrant g;
  g.rights = p[1];
  g.offset = GetU64(p + 8);
  g.length = GetU64(p + 16);
  g.expiry_unix_ms = static_cast<int64_t>(GetU64(p + 24));
  if (g.rights == 0 || (g.rights & ~(kCapRead | kCapWrite)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capability rights ", static_cast<int>(g.rights), " are not read/write"));
  }
  if (g.length == 0 || g.offset + g.length < g.offset) {
    return absl::InvalidArgumentError("capability range is empty or wraps");
  }
  return g;
}

class CapabilityKey {
 public:
  // From a token file that lists "cluster" (masters, workers).
  // FAILED_PRECONDITION without it: a tenant's file cannot sign or check.
  static absl::StatusOr<CapabilityKey> FromCredentials(const Credentials& creds) {
    const std::string* secret = creds.SecretOf(kClusterPrincipal);
    if (secret == nullptr) {
      return absl::FailedPreconditionError(
          "capabilities need the 'cluster' secret: the token file lists no 'cluster' line");
    }
    return FromSecret(*secret);
  }
  static CapabilityKey FromSecret(std::string_view cluster_secret) {
    static constexpr std::string_view kLabel = "mooncake capability key v1";
    CapabilityKey k;
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), cluster_secret.data(), static_cast<int>(cluster_secret.size()),
             reinterpret_cast<const unsigned char*>(kLabel.data()), kLabel.size(), k.key_.data(),
             &len) == nullptr ||
        len != k.key_.size()) {
      std::abort();  // only on a broken libcrypto
    }
    return k;
  }

  // A capability for `grant` of `segment` on the worker `scope`, to
  // `principal` ("tenant:NAME"). REQUIRES: a grant DecodeCapabilityGrant
  // accepts (rights set, non-empty range that does not wrap).
  std::string Issue(std::string_view scope, std::string_view principal, uint64_t segment,
                    const CapabilityGrant& grant) const {
    using capability_detail::PutU64;
    std::string cap(kCapabilityBytes, '\0');
    auto* p = reinterpret_cast<uint8_t*>(cap.data());
    p[0] = kCapabilityVersion;
    p[1] = grant.rights;
    PutU64(p + 8, grant.offset);
    PutU64(p + 16, grant.length);
    PutU64(p + 24, static_cast<uint64_t>(grant.expiry_unix_ms));
    const Mac mac = Sign(scope, principal, segment, p);
    std::memcpy(p + 32, mac.data(), mac.size());
    return cap;
  }

  // OK when `cap` is a capability this key issued for (scope, principal,
  // segment), unexpired at `now_unix_ms`, whose rights include `right` and
  // whose range covers [offset, offset + length). PERMISSION_DENIED with the
  // reason otherwise (the MAC is compared in constant time). `grant_out`, when
  // set, receives the grant (only on OK).
  absl::Status Check(std::string_view scope, std::string_view principal, uint64_t segment,
                     std::string_view cap, uint8_t right, uint64_t offset, uint64_t length,
                     int64_t now_unix_ms, CapabilityGrant* grant_out = nullptr) const {
    absl::StatusOr<CapabilityGrant> g = DecodeCapabilityGrant(cap);
    if (!g.ok()) return absl::PermissionDeniedError(g.status().message());
    const auto* p = reinterpret_cast<const uint8_t*>(cap.data());
    const Mac mac = Sign(scope, principal, segment, p);
    if (CRYPTO_memcmp(mac.data(), p + 32, mac.size()) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "capability does not verify for segment ", segment, " of ", AbslView(scope), " and '",
          AbslView(principal), "' (issued for another worker, segment or tenant, or altered)"));
    }
    if (absl::Status s = Covers(*g, right, offset, length, now_unix_ms); !s.ok()) return s;
    if (grant_out != nullptr) *grant_out = *g;
    return absl::OkStatus();
  }

  // The checks of Check that do not need the MAC, for a grant already
  // verified (a server that caches the last capability of a connection).
  static absl::Status Covers(const CapabilityGrant& g, uint8_t right, uint64_t offset,
                             uint64_t length, int64_t now_unix_ms) {
    if ((g.rights & right) == 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("capability grants ", (g.rights & kCapRead) != 0 ? "read" : "write",
                       " access, not ", right == kCapRead ? "read" : "write"));
    }
    if (now_unix_ms > g.expiry_unix_ms) {
      return absl::PermissionDeniedError(
          absl::StrCat("capability expired ", now_unix_ms - g.expiry_unix_ms,
                       " ms ago (ask the master for the object again)"));
    }
    if (offset < g.offset || length > g.length || offset - g.offset > g.length - length) {
      return absl::PermissionDeniedError(absl::StrCat("[", offset, ", +", length,
                                                      ") is outside the capability's [", g.offset,
                                                      ", +", g.length, ")"));
    }
    return absl::OkStatus();
  }

 private:
  using Mac = std::array<uint8_t, 32>;
  CapabilityKey() = default;

  Mac Sign(std::string_view scope, std::string_view principal, uint64_t segment,
           const uint8_t* head) const {
    std::string t = "mooncake-cap-v1";
    for (std::string_view field : {scope, principal}) {
      const auto n = static_cast<uint32_t>(field.size());
      for (int i = 0; i < 4; ++i) t.push_back(static_cast<char>(n >> (8 * i)));
      t.append(field);
    }
    for (int i = 0; i < 8; ++i) t.push_back(static_cast<char>(segment >> (8 * i)));
    t.append(reinterpret_cast<const char*>(head), 32);
    Mac out{};
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
             reinterpret_cast<const unsigned char*>(t.data()), t.size(), out.data(),
             &len) == nullptr ||
        len != out.size()) {
      std::abort();  // only on a broken libcrypto
    }
    return out;
  }

  std::array<uint8_t, 32> key_{};
};

}  // namespace mooncake::auth

#endif  // MOONCAKE_BASE_CAPABILITY_H_
