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
// Cryptography is OpenSSL's libcrypto (HMAC-SHA256 through EVP_MAC,
// CRYPTO_memcmp). A key keeps an HMAC context initialized with it, and each
// thread signs with its own copy re-initialized per message: OpenSSL's
// one-shot HMAC() looks the algorithm up on every call, which cost ~10 us a
// capability between network round trips (measured with auth_benchmark).
//
// Thread-safety: CapabilityKey is immutable; share it const.
#ifndef MOONCAKE_BASE_CAPABILITY_H_
#define MOONCAKE_BASE_CAPABILITY_H_

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/auth.h"
#include "mooncake/base/mutex.h"

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

// The system clock's coarse reading (CLOCK_REALTIME_COARSE through the
// vDSO, the time of the last kernel tick: a few ms behind at most, ~5 ns a
// call against ~22 for the precise one): called on every capability issued
// and on every frame checked. A worker so accepts a capability up to a tick
// past its expiry, which the 1 s margin of held write windows covers
// (docs/security.md).
inline int64_t NowUnixMs() {
  timespec ts{};
  if (::clock_gettime(CLOCK_REALTIME_COARSE, &ts) != 0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

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
    std::array<uint8_t, 32> key{};
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), cluster_secret.data(), static_cast<int>(cluster_secret.size()),
             reinterpret_cast<const unsigned char*>(kLabel.data()), kLabel.size(), key.data(),
             &len) == nullptr ||
        len != key.size()) {
      std::abort();  // only on a broken libcrypto
    }
    CapabilityKey k;
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (mac == nullptr) std::abort();
    k.template_ = std::shared_ptr<EVP_MAC_CTX>(EVP_MAC_CTX_new(mac), CtxFree());
    EVP_MAC_free(mac);  // the context holds its own reference
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_END};
    if (k.template_ == nullptr ||
        EVP_MAC_init(k.template_.get(), key.data(), key.size(), params) != 1) {
      std::abort();
    }
    OPENSSL_cleanse(key.data(), key.size());
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
  CapabilityKey() : id_(NextId()) {}

  Mac Sign(std::string_view scope, std::string_view principal, uint64_t segment,
           const uint8_t* head) const {
    std::string t = "mooncake-cap-v1";
    t.reserve(15 + 8 + scope.size() + principal.size() + 8 + 32);
    for (std::string_view field : {scope, principal}) {
      const auto n = static_cast<uint32_t>(field.size());
      for (int i = 0; i < 4; ++i) t.push_back(static_cast<char>(n >> (8 * i)));
      t.append(field);
    }
    for (int i = 0; i < 8; ++i) t.push_back(static_cast<char>(segment >> (8 * i)));
    t.append(reinterpret_cast<const char*>(head), 32);
    EVP_MAC_CTX* c = ThreadContext();
    Mac out{};
    size_t len = 0;
    if (EVP_MAC_init(c, nullptr, 0, nullptr) != 1 ||
        EVP_MAC_update(c, reinterpret_cast<const unsigned char*>(t.data()), t.size()) != 1 ||
        EVP_MAC_final(c, out.data(), &len, out.size()) != 1 || len != out.size()) {
      std::abort();  // only on a broken libcrypto
    }
    return out;
  }

  struct CtxFree {
    void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
  };
  using Ctx = std::unique_ptr<EVP_MAC_CTX, CtxFree>;

  // This thread's copy of template_ (keyed by id_, never by address: a key
  // destroyed and another made at the same address must not share a copy).
  EVP_MAC_CTX* ThreadContext() const {
    struct Cached {
      uint64_t id = 0;
      Ctx ctx;
    };
    thread_local Cached cached;
    if (cached.id != id_) {
      cached.ctx.reset(EVP_MAC_CTX_dup(template_.get()));
      if (cached.ctx == nullptr) std::abort();
      cached.id = id_;
    }
    return cached.ctx.get();
  }

  static uint64_t NextId() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  // Shared by copies (immutable: threads copy it, never use it directly).
  std::shared_ptr<EVP_MAC_CTX> template_;
  uint64_t id_;
};

namespace capability_detail {

// A bounded map from strings to V in kShards mutex-guarded shards; a shard
// that reaches its share of `max_entries` is emptied (entries are cheap to
// make again, and every value is checked for expiry when used).
template <typename V>
class ShardedMemo {
 public:
  explicit ShardedMemo(size_t max_entries)
      : per_shard_(std::max<size_t>(1, max_entries / kShards)) {}

  std::optional<V> Find(const std::string& key) {
    Shard& s = ShardOf(key);
    MutexLock lock(&s.mu);
    auto it = s.map.find(AbslView(key));
    if (it == s.map.end()) return std::nullopt;
    return it->second;
  }
  void Put(std::string key, V value) {
    Shard& s = ShardOf(key);
    MutexLock lock(&s.mu);
    if (s.map.size() >= per_shard_) s.map.clear();
    s.map.insert_or_assign(std::move(key), std::move(value));
  }

 private:
  static constexpr size_t kShards = 8;
  struct Shard {
    Mutex mu;
    absl::flat_hash_map<std::string, V> map ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(const std::string& key) {
    return shards_[absl::Hash<absl::string_view>{}(AbslView(key)) % kShards];
  }
  const size_t per_shard_;
  std::array<Shard, kShards> shards_;
};

inline void AppendField(std::string* out, std::string_view field) {
  const auto n = static_cast<uint32_t>(field.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(n >> (8 * i)));
  out->append(field);
}
inline void AppendU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

}  // namespace capability_detail

// The owner's side with memory: CapabilityKey::Check that pays the HMAC once
// per distinct (capability, holder, target); a capability seen again (the
// slices of a request, another read of the same object within its lease) is
// only checked for rights, range and expiry. Failures are not remembered.
// OpenSSL's HMAC costs ~5 us a call between network round trips, a fifth of
// a small GET's latency on loopback. Thread-safe.
class VerifiedCapabilities {
 public:
  explicit VerifiedCapabilities(std::shared_ptr<const CapabilityKey> key,
                                size_t max_entries = size_t{1} << 15)
      : key_(std::move(key)), memo_(max_entries) {}

  absl::Status Check(std::string_view scope, std::string_view principal, uint64_t segment,
                     std::string_view cap, uint8_t right, uint64_t offset, uint64_t length,
                     int64_t now_unix_ms) {
    std::string k(cap);
    capability_detail::AppendField(&k, principal);
    capability_detail::AppendField(&k, scope);
    capability_detail::AppendU64(&k, segment);
    if (std::optional<CapabilityGrant> g = memo_.Find(k)) {
      return CapabilityKey::Covers(*g, right, offset, length, now_unix_ms);
    }
    CapabilityGrant g;
    if (absl::Status s =
            key_->Check(scope, principal, segment, cap, right, offset, length, now_unix_ms, &g);
        !s.ok()) {
      return s;
    }
    memo_.Put(std::move(k), g);
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const CapabilityKey> key_;
  capability_detail::ShardedMemo<CapabilityGrant> memo_;
};

// The issuer's side with memory: the same grant to the same holder gets the
// same bytes (so the owner's VerifiedCapabilities recognizes it) without a
// second HMAC. Pair it with QuantizedExpiry, which makes grants of one
// second equal. A grant this thread issued lately is found in a small cache
// the thread keeps (no lock, no allocation); others in a memo the threads
// share. Thread-safe.
class IssuedCapabilities {
 public:
  using Bytes = std::array<char, kCapabilityBytes>;

  explicit IssuedCapabilities(std::shared_ptr<const CapabilityKey> key,
                              size_t max_entries = size_t{1} << 15)
      : key_(std::move(key)), memo_(max_entries), id_(NextId()) {}

  Bytes IssueBytes(std::string_view scope, std::string_view principal, uint64_t segment,
                   const CapabilityGrant& grant) {
    Set& set = ThreadRecent()[SetOf(segment, grant)];
    for (int w = 0; w < kWays; ++w) {
      const Recent& r = set.way[w];
      if (r.owner == id_ && r.segment == segment && r.grant == grant && r.scope == scope &&
          r.principal == principal) {
        set.last = static_cast<uint8_t>(w);
        return r.cap;
      }
    }
    // The shared memo's key, built in a buffer each thread keeps.
    thread_local std::string k;
    k.clear();
    capability_detail::AppendField(&k, principal);
    capability_detail::AppendField(&k, scope);
    capability_detail::AppendU64(&k, segment);
    capability_detail::AppendU64(&k, grant.offset);
    capability_detail::AppendU64(&k, grant.length);
    capability_detail::AppendU64(&k, static_cast<uint64_t>(grant.expiry_unix_ms));
    k.push_back(static_cast<char>(grant.rights));
    Bytes cap;
    if (std::optional<Bytes> found = memo_.Find(k)) {
      cap = *found;
    } else {
      const std::string made = key_->Issue(scope, principal, segment, grant);
      std::memcpy(cap.data(), made.data(), cap.size());
      memo_.Put(k, cap);
    }
    // Replaces the way not used last.
    set.last = static_cast<uint8_t>(1 - set.last);
    Recent& r = set.way[set.last];
    r.owner = id_;
    r.segment = segment;
    r.grant = grant;
    r.scope.assign(scope);
    r.principal.assign(principal);
    r.cap = cap;
    return cap;
  }

  std::string Issue(std::string_view scope, std::string_view principal, uint64_t segment,
                    const CapabilityGrant& grant) {
    const Bytes cap = IssueBytes(scope, principal, segment, grant);
    return std::string(cap.data(), cap.size());
  }

 private:
  // A grant this thread issued for the IssuedCapabilities `owner` (its id_,
  // never its address; 0: empty).
  struct Recent {
    uint64_t owner = 0;
    uint64_t segment = 0;
    CapabilityGrant grant;
    std::string scope;
    std::string principal;
    Bytes cap{};
  };
  // Two-way sets: a few dozen grants in turn (one object's replicas, a
  // client's working set) do not evict each other as they would in one way.
  static constexpr int kWays = 2;
  static constexpr size_t kSets = 128;
  struct Set {
    std::array<Recent, kWays> way;
    uint8_t last = 0;  // the way used last
  };
  // Made on first use: threads that issue nothing keep no ~45 KB.
  static std::array<Set, kSets>& ThreadRecent() {
    thread_local std::unique_ptr<std::array<Set, kSets>> recent;
    if (recent == nullptr) recent = std::make_unique<std::array<Set, kSets>>();
    return *recent;
  }
  static size_t SetOf(uint64_t segment, const CapabilityGrant& g) {
    uint64_t h = segment * 0x9E3779B97F4A7C15ull;
    h ^= (g.offset + (h << 6) + (h >> 2)) * 0xC2B2AE3D27D4EB4Full;
    h ^= (g.length + static_cast<uint64_t>(g.expiry_unix_ms) + g.rights) * 0x165667B19E3779F9ull;
    static_assert(kSets == 128);
    return static_cast<size_t>(h >> 57);
  }
  static uint64_t NextId() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  std::shared_ptr<const CapabilityKey> key_;
  capability_detail::ShardedMemo<Bytes> memo_;
  const uint64_t id_;
};

// An expiry for a grant of `ttl_ms` from `now_unix_ms`, rounded down to a
// whole second when that keeps at least half the ttl (grants made within the
// same second then carry the same expiry, and IssuedCapabilities the same
// bytes); exact otherwise. Never later than now + ttl.
inline int64_t QuantizedExpiry(int64_t now_unix_ms, int64_t ttl_ms) {
  const int64_t exact = now_unix_ms + ttl_ms;
  const int64_t rounded = exact - exact % 1000;
  return rounded - now_unix_ms >= ttl_ms / 2 ? rounded : exact;
}

}  // namespace mooncake::auth

#endif  // MOONCAKE_BASE_CAPABILITY_H_
