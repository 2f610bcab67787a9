// Shared-secret authentication of connections (docs/security.md).
//
// A cluster has a token file (`--auth_token_file`): one principal per line,
//
//   # NAME          SECRET (>= 16 bytes, no whitespace)
//   cluster         6f1c0c3e9a0d4b1f8e2a77c5d3b9e041
//   tenant:alice    0e8f3b7a51c94d26a1f0c2e6b8d4795a
//
// "cluster" is the cluster's own identity: masters, workers and operators
// (every RPC method, every admin endpoint). "tenant:NAME" is a client of
// tenant NAME: the master binds its connections to that tenant (a request for
// another tenant is refused). Servers hold every principal a peer may prove;
// a process proves, when it connects, the principal `Credentials::self()`
// names: "cluster" if its file has it, else the file's only entry.
//
// A connection is authenticated by a challenge-response (the two protocols
// that use it, the RPC frames and the TCP transport, carry the same four
// messages in their own framing):
//
//   client -> server  HELLO     principal name, client nonce (32 random bytes)
//   server -> client  CHALLENGE server nonce (32 random bytes)
//   client -> server  PROOF     HMAC-SHA256(secret, transcript("client"))
//   server -> client  OK        HMAC-SHA256(secret, transcript("server"))
//
// transcript(role) = "mooncake-auth-v1" | protocol | role | principal |
// client nonce | server nonce (each variable field length-prefixed). The
// secret never crosses the wire, a proof cannot be replayed on another
// connection (fresh nonces on both sides), and the client checks the server's
// proof too (a server without the secret cannot pose as the cluster).
// Proofs are compared in constant time. The bytes that follow are not
// encrypted or authenticated: docs/security.md says what that leaves open.
//
// Cryptography is OpenSSL's libcrypto (HMAC, SHA-256, RAND_bytes,
// CRYPTO_memcmp); nothing here is hand-written.
//
// Thread-safety: Credentials is immutable after Load/Parse (share it const);
// the free functions are thread-safe.
#ifndef MOONCAKE_BASE_AUTH_H_
#define MOONCAKE_BASE_AUTH_H_

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"

namespace mooncake::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 1024;
inline constexpr size_t kMaxPrincipalBytes = 128;
inline constexpr size_t kMaxPrincipals = 4096;
inline constexpr std::string_view kClusterPrincipal = "cluster";
inline constexpr std::string_view kTenantPrefix = "tenant:";

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

// Who a connection proved to be.
struct Principal {
  std::string name;    // "cluster" or "tenant:NAME"
  std::string tenant;  // NAME for a tenant principal; empty for "cluster"
  bool cluster() const { return name == kClusterPrincipal; }
};

// "cluster" or "tenant:NAME" (NAME non-empty, printable, no whitespace).
inline absl::Status ValidatePrincipalName(std::string_view name) {
  if (name.empty() || name.size() > kMaxPrincipalBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("principal name must be 1..", kMaxPrincipalBytes, " bytes"));
  }
  for (char c : name) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("principal name has a non-printable or space character");
    }
  }
  if (name == kClusterPrincipal) return absl::OkStatus();
  if (name.size() > kTenantPrefix.size() && name.substr(0, kTenantPrefix.size()) == kTenantPrefix) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("principal '", AbslView(name), "' is neither 'cluster' nor 'tenant:NAME'"));
}

inline Principal PrincipalFromName(std::string_view name) {
  Principal p;
  p.name = std::string(name);
  if (name != kClusterPrincipal) p.tenant = std::string(name.substr(kTenantPrefix.size()));
  return p;
}

class Credentials {
 public:
  struct Entry {
    std::string name;
    std::string secret;
  };

  // Parses a token file's text (format: the file comment). `origin` names it
  // in errors. INVALID_ARGUMENT for a malformed line, a short secret, a
  // duplicate name, no entry at all, or several entries and no "cluster".
  static absl::StatusOr<Credentials> Parse(std::string_view text, std::string_view origin) {
    Credentials c;
    size_t line_no = 0;
    while (!text.empty()) {
      ++line_no;
      const size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
      if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
        line = line.substr(0, hash);
      }
      std::vector<std::string_view> fields;
      size_t i = 0;
      while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
        const size_t start = i;
        while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
        if (i > start) fields.push_back(line.substr(start, i - start));
      }
      if (fields.empty()) continue;
      const auto where = [&] { return absl::StrCat(AbslView(origin), ":", line_no, ": "); };
      if (fields.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "expected 'NAME SECRET', got ", fields.size(), " fields"));
      }
      if (absl::Status s = ValidatePrincipalName(fields[0]); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where(), s.message()));
      }
      if (fields[1].size() < kMinSecretBytes || fields[1].size() > kMaxSecretBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), "the secret of '", AbslView(fields[0]), "' must be ", kMinSecretBytes, "..",
            kMaxSecretBytes, " bytes (e.g. `openssl rand -hex 32`)"));
      }
      if (c.Find(fields[0]) != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "principal '", AbslView(fields[0]), "' listed twice"));
      }
      if (c.entries_.size() >= kMaxPrincipals) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "more than ", kMaxPrincipals, " principals"));
      }
      c.entries_.push_back({std::string(fields[0]), std::string(fields[1])});
    }
    if (c.entries_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(AbslView(origin), ": no 'NAME SECRET' line: an empty token file"));
    }
    if (c.Find(kClusterPrincipal) != nullptr) {
      c.self_ = static_cast<size_t>(c.Find(kClusterPrincipal) - c.entries_.data());
    } else if (c.entries_.size() == 1) {
      c.self_ = 0;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          AbslView(origin), ": several tenant entries and no 'cluster' one: a client's file names ",
          "the one principal it proves"));
    }
    return c;
  }

  // Reads and parses a token file. FAILED_PRECONDITION when group or others
  // may read it (chmod 600), NOT_FOUND / PERMISSION_DENIED when it cannot be
  // read.
  static absl::StatusOr<Credentials> LoadFile(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const int e = errno;
      const std::string why = absl::StrCat("auth token file ", path, ": ", std::strerror(e));
      return e == ENOENT ? absl::NotFoundError(why) : absl::PermissionDeniedError(why);
    }
    if ((st.st_mode & 077) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "auth token file ", path, " may be read by others (mode 0", (st.st_mode >> 6) & 7,
          (st.st_mode >> 3) & 7, st.st_mode & 7, "); chmod 600 it"));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::PermissionDeniedError(absl::StrCat("cannot read auth token file ", path));
    std::ostringstream text;
    text << in.rdbuf();
    return Parse(text.str(), path);
  }

  // The secret of `name`, or nullptr.
  const std::string* SecretOf(std::string_view name) const {
    const Entry* e = Find(name);
    return e == nullptr ? nullptr : &e->secret;
  }
  // The principal this process proves when it connects.
  const Entry& self() const { return entries_[self_]; }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  Credentials() = default;
  const Entry* Find(std::string_view name) const {
    for (const Entry& e : entries_) {
      if (e.name == name) return &e;
    }
    return nullptr;
  }

  std::vector<Entry> entries_;
  size_t self_ = 0;  // index in entries_ of the principal this process proves
};

// Loads `path` into a shared Credentials, or null for an empty path (no
// authentication configured).
inline absl::StatusOr<std::shared_ptr<const Credentials>> LoadCredentials(const std::string& path) {
  if (path.empty()) return std::shared_ptr<const Credentials>();
  auto c = Credentials::LoadFile(path);
  if (!c.ok()) return c.status();
  return std::make_shared<const Credentials>(*std::move(c));
}

// The token file named by MOONCAKE_AUTH_TOKEN_FILE, for code that has no
// flag of its own (the Python package, the transfer-engine and connector
// bindings): null when it is unset or empty; else LoadCredentials' errors,
// prefixed with the variable's name.
inline absl::StatusOr<std::shared_ptr<const Credentials>> CredentialsFromEnvironment() {
  const char* path = std::getenv("MOONCAKE_AUTH_TOKEN_FILE");
  if (path == nullptr || *path == '\0') return std::shared_ptr<const Credentials>();
  auto c = LoadCredentials(path);
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrCat("MOONCAKE_AUTH_TOKEN_FILE: ", c.status().message()));
  }
  return c;
}

inline Nonce NewNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    // RAND_bytes fails only without an entropy source; a predictable nonce
    // would make proofs replayable, so there is no fallback.
    std::abort();
  }
  return n;
}

// HMAC-SHA256(secret, transcript(protocol, role, principal, nonces)).
// `protocol` separates the RPC and transport handshakes ("rpc", "tcp");
// `role` is "client" or "server".
inline Proof ComputeProof(std::string_view secret, std::string_view protocol, std::string_view role,
                          std::string_view principal, const Nonce& client_nonce,
                          const Nonce& server_nonce) {
  std::string t = "mooncake-auth-v1";
  for (std::string_view field : {protocol, role, principal}) {
    const auto n = static_cast<uint32_t>(field.size());
    t.append(reinterpret_cast<const char*>(&n), sizeof(n));
    t.append(field);
  }
  t.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  t.append(reinterpret_cast<const char*>(server_nonce.data()), server_nonce.size());
  Proof out{};
  unsigned int len = 0;
  const unsigned char* r =
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(t.data()), t.size(), out.data(), &len);
  if (r == nullptr || len != out.size()) std::abort();  // only on a broken libcrypto
  return out;
}

// Constant-time comparison of a received proof (any length) with the expected one.
inline bool ProofMatches(std::string_view received, const Proof& expected) {
  if (received.size() != expected.size()) return false;
  return CRYPTO_memcmp(received.data(), expected.data(), expected.size()) == 0;
}

// Constant-time comparison of two secrets (HTTP bearer tokens): compares
// HMACs of both under a fixed key so the time does not depend on where they differ
// or on their lengths.
inline bool SecretMatches(std::string_view received, std::string_view expected) {
  static constexpr std::string_view kKey = "mooncake-bearer-compare";
  unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  HMAC(EVP_sha256(), kKey.data(), static_cast<int>(kKey.size()),
       reinterpret_cast<const unsigned char*>(received.data()), received.size(), a, &la);
  HMAC(EVP_sha256(), kKey.data(), static_cast<int>(kKey.size()),
       reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), b, &lb);
  return la == lb && CRYPTO_memcmp(a, b, la) == 0;
}

// The token of an HTTP "Authorization: Bearer <token>" header value (null
// header or another scheme: empty).
inline std::string_view BearerToken(const std::string* header) {
  constexpr std::string_view kBearer = "Bearer ";
  if (header == nullptr || header->size() <= kBearer.size() ||
      !std::string_view(*header).starts_with(kBearer)) {
    return {};
  }
  return std::string_view(*header).substr(kBearer.size());
}

// Whether `token` is the secret of `principal` in `c` (an empty token or an
// unknown principal: false), compared in constant time.
inline bool BearerMatches(std::string_view token, const Credentials& c,
                          std::string_view principal) {
  const std::string* secret = c.SecretOf(principal);
  return !token.empty() && secret != nullptr && SecretMatches(token, *secret);
}

// Whether `token` is the secret of any principal `c` lists; every entry is
// compared, so the time does not say which one matched.
inline bool BearerMatchesAny(std::string_view token, const Credentials& c) {
  bool any = false;
  for (const Credentials::Entry& e : c.entries()) any |= SecretMatches(token, e.secret);
  return !token.empty() && any;
}

// ---- The handshake's messages (the payloads both protocols carry) ----------

// HELLO: version (1) | principal length (1) | principal | client nonce.
inline constexpr uint8_t kHandshakeVersion = 1;

inline std::string EncodeHello(std::string_view principal, const Nonce& client_nonce) {
  std::string out;
  out.push_back(static_cast<char>(kHandshakeVersion));
  out.push_back(static_cast<char>(principal.size()));
  out.append(principal);
  out.append(reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size());
  return out;
}

struct Hello {
  std::string principal;
  Nonce client_nonce{};
};

inline absl::StatusOr<Hello> DecodeHello(std::string_view in) {
  if (in.size() < 2) return absl::InvalidArgumentError("auth HELLO too short");
  if (static_cast<uint8_t>(in[0]) != kHandshakeVersion) {
    return absl::UnimplementedError(
        absl::StrCat("auth handshake version ", static_cast<int>(static_cast<uint8_t>(in[0])),
                     " is not spoken here (", static_cast<int>(kHandshakeVersion), ")"));
  }
  const size_t n = static_cast<uint8_t>(in[1]);
  if (in.size() != 2 + n + kNonceBytes) {
    return absl::InvalidArgumentError("auth HELLO has the wrong length");
  }
  Hello h;
  h.principal = std::string(in.substr(2, n));
  if (absl::Status s = ValidatePrincipalName(h.principal); !s.ok()) return s;
  std::memcpy(h.client_nonce.data(), in.data() + 2 + n, kNonceBytes);
  return h;
}

inline std::string_view AsBytes(const std::array<uint8_t, 32>& a) {
  return {reinterpret_cast<const char*>(a.data()), a.size()};
}

inline absl::StatusOr<Nonce> DecodeNonce(std::string_view in) {
  if (in.size() != kNonceBytes)
    return absl::InvalidArgumentError("auth nonce has the wrong length");
  Nonce n{};
  std::memcpy(n.data(), in.data(), n.size());
  return n;
}

// The server's side of one handshake, fed the two client messages in turn.
class ServerHandshake {
 public:
  explicit ServerHandshake(std::shared_ptr<const Credentials> creds, std::string_view protocol)
      : creds_(std::move(creds)), protocol_(protocol) {}

  // HELLO in, CHALLENGE (the server nonce) out. UNAUTHENTICATED for an
  // unknown principal (the same answer as a wrong proof would get later:
  // which names exist is not revealed before a proof).
  absl::StatusOr<std::string> OnHello(std::string_view hello) {
    auto h = DecodeHello(hello);
    if (!h.ok()) return absl::UnauthenticatedError(h.status().message());
    hello_ = *std::move(h);
    server_nonce_ = NewNonce();
    have_hello_ = true;
    return std::string(AsBytes(server_nonce_));
  }

  // PROOF in, OK (the server's proof) out; the peer's principal on success.
  absl::StatusOr<std::string> OnProof(std::string_view proof, Principal* who) {
    if (!have_hello_) return absl::UnauthenticatedError("auth PROOF before HELLO");
    const std::string* secret = creds_->SecretOf(hello_.principal);
    const auto refuse = [&] {
      return absl::UnauthenticatedError(absl::StrCat(
          "authentication failed for '", hello_.principal,
          "': unknown principal or wrong secret (check --auth_token_file on both sides)"));
    };
    if (secret == nullptr) {
      // Same work as a known principal, then the same refusal.
      (void)ProofMatches(proof, ComputeProof("-", protocol_, "client", hello_.principal,
                                             hello_.client_nonce, server_nonce_));
      return refuse();
    }
    if (!ProofMatches(proof, ComputeProof(*secret, protocol_, "client", hello_.principal,
                                          hello_.client_nonce, server_nonce_))) {
      return refuse();
    }
    *who = PrincipalFromName(hello_.principal);
    return std::string(AsBytes(ComputeProof(*secret, protocol_, "server", hello_.principal,
                                            hello_.client_nonce, server_nonce_)));
  }

 private:
  std::shared_ptr<const Credentials> creds_;
  std::string protocol_;
  Hello hello_;
  Nonce server_nonce_{};
  bool have_hello_ = false;
};

// The client's side: Hello() first, then Proof(challenge), then Verify(ok).
class ClientHandshake {
 public:
  ClientHandshake(const Credentials& creds, std::string_view protocol)
      : name_(creds.self().name),
        secret_(creds.self().secret),
        protocol_(protocol),
        client_nonce_(NewNonce()) {}

  std::string Hello() const { return EncodeHello(name_, client_nonce_); }

  absl::StatusOr<std::string> Proof(std::string_view challenge) {
    auto n = DecodeNonce(challenge);
    if (!n.ok()) return absl::UnauthenticatedError(n.status().message());
    server_nonce_ = *n;
    return std::string(
        AsBytes(ComputeProof(secret_, protocol_, "client", name_, client_nonce_, server_nonce_)));
  }

  // UNAUTHENTICATED when the server's proof is wrong: it does not hold our
  // secret (not the cluster's server).
  absl::Status Verify(std::string_view server_proof) const {
    if (!ProofMatches(server_proof, ComputeProof(secret_, protocol_, "server", name_, client_nonce_,
                                                 server_nonce_))) {
      return absl::UnauthenticatedError(
          "the server's authentication proof is wrong: it does not hold this principal's "
          "secret");
    }
    return absl::OkStatus();
  }

  const std::string& principal() const { return name_; }

 private:
  std::string name_;
  std::string secret_;
  std::string protocol_;
  Nonce client_nonce_;
  Nonce server_nonce_{};
};

}  // namespace mooncake::auth

#endif  // MOONCAKE_BASE_AUTH_H_
