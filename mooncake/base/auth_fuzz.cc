// Feeds arbitrary bytes to the parsers of base/auth.h: the handshake messages a
// server reads from an unauthenticated peer (HELLO, then PROOF) and the token
// file parser. Every outcome must be a Status, never a crash; a HELLO that
// decodes re-encodes to the same bytes; a made-up proof is never accepted.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  auth::Nonce n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint8_t>(i * 7);
  const std::string hello = auth::EncodeHello("tenant:alice", n);
  return {
      std::string(1, '\0') + hello + std::string(32, 'p'),
      std::string(1, '\0') + auth::EncodeHello("cluster", n) + std::string(31, 'p'),
      std::string(1, '\1') + "cluster 0123456789abcdef0123456789abcdef\n# c\ntenant:a " +
          std::string(16, 'x') + "\n",
      std::string(1, '\1') + "tenant:a b c\n\r\n\t",
  };
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake;
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 1) {
    auto c = auth::Credentials::Parse(in, "fuzz");
    if (c.ok()) {
      MC_ASSERT(!c->entries().empty(), "parsed a file with no entry");
      MC_ASSERT(c->SecretOf(c->self().name) != nullptr, "self is not an entry");
    }
    return 0;
  }
  static const auto creds = std::make_shared<const auth::Credentials>(*auth::Credentials::Parse(
      "cluster 0123456789abcdef0123456789abcdef\ntenant:alice aaaaaaaaaaaaaaaaaaaaaaaa\n", "f"));
  // The HELLO is as long as its own length byte says (when there is one).
  const size_t hello_len =
      in.size() >= 2 ? std::min(in.size(), 2 + static_cast<uint8_t>(in[1]) + auth::kNonceBytes)
                     : in.size();
  const std::string_view hello = in.substr(0, hello_len);
  const std::string_view proof = in.substr(hello_len);
  if (auto h = auth::DecodeHello(hello); h.ok()) {
    MC_ASSERT(auth::EncodeHello(h->principal, h->client_nonce) == hello, "HELLO round trip");
  }
  auth::ServerHandshake server(creds, "rpc");
  auto challenge = server.OnHello(hello);
  auth::Principal who;
  auto ok = server.OnProof(proof, &who);
  // The server's nonce is fresh and random: no input can hold the proof for it.
  MC_ASSERT(!ok.ok(), "a proof written before the challenge was accepted");
  (void)challenge;
  (void)auth::DecodeNonce(proof);
  return 0;
}
