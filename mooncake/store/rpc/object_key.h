// Object keys: the one statement of which keys a request may name and of the
// block-object key layout. The master checks every request with it, the
// client checks before it calls, and both build block keys with it.
//
// An object key is 1..kMaxKeyBytes bytes. A key a user chooses must not start
// with byte 0x00: that byte starts the store's own keys. The only such keys a
// request may name are block object keys (docs/block_key_spec.md):
//
//   [0]      0x00
//   [1]      'b'
//   [2, 10)  block key low, little-endian
//   [10, 18) block key high, little-endian
//
// Stable: PrefixQuery looks blocks up under these keys, and a block put as an
// ordinary object under BlockObjectKey(k) is the block k.
//
// Thread-safety: pure functions. Complexity: O(key size).
#ifndef MOONCAKE_STORE_RPC_OBJECT_KEY_H_
#define MOONCAKE_STORE_RPC_OBJECT_KEY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"

namespace mooncake::rpc {

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kBlockObjectKeyBytes = 18;
// The bytes every block object key starts with.
inline constexpr std::string_view kBlockObjectKeyPrefix("\0b", 2);

// The low and high halves of `block` into an 18-byte block object key,
// in place (no allocation: PrefixQuery rewrites one key per block).
// REQUIRES: key->size() == kBlockObjectKeyBytes.
inline void WriteBlockObjectKey(const Hash128& block, std::string* key) {
  MC_DASSERT(key->size() == kBlockObjectKeyBytes, "a block object key is 18 bytes");
  key->replace(0, kBlockObjectKeyPrefix.size(), kBlockObjectKeyPrefix);
  for (size_t i = 0; i < 8; ++i) {
    (*key)[2 + i] = static_cast<char>(block.low >> (8 * i));
    (*key)[10 + i] = static_cast<char>(block.high >> (8 * i));
  }
}

// The object key of `block`.
inline std::string BlockObjectKey(const Hash128& block) {
  std::string key(kBlockObjectKeyBytes, '\0');
  WriteBlockObjectKey(block, &key);
  return key;
}

inline bool IsBlockObjectKey(std::string_view key) {
  return key.size() == kBlockObjectKeyBytes && key.starts_with(kBlockObjectKeyPrefix);
}

// The block `key` names; nullopt when it is not a block object key.
inline std::optional<Hash128> ParseBlockObjectKey(std::string_view key) {
  if (!IsBlockObjectKey(key)) return std::nullopt;
  Hash128 block{0, 0};
  for (size_t i = 0; i < 8; ++i) {
    block.low |= uint64_t{static_cast<uint8_t>(key[2 + i])} << (8 * i);
    block.high |= uint64_t{static_cast<uint8_t>(key[10 + i])} << (8 * i);
  }
  return block;
}

// Checks a key a user chose (not a block key). INVALID_ARGUMENT with the
// reason otherwise.
inline absl::Status ValidateUserKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty object key");
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("object key of ", key.size(), " bytes exceeds the limit of ", kMaxKeyBytes));
  }
  if (key[0] == '\0') {
    return absl::InvalidArgumentError(
        "object keys starting with byte 0x00 are reserved for block keys (rpc::BlockObjectKey)");
  }
  return absl::OkStatus();
}

// Checks a key any request may name: a user key (ValidateUserKey) or a
// well-formed block object key. INVALID_ARGUMENT with the reason otherwise.
inline absl::Status ValidateObjectKey(std::string_view key) {
  if (!key.empty() && key[0] == '\0') {
    if (IsBlockObjectKey(key)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "object keys starting with byte 0x00 are reserved for block keys (0x00 'b' + 16 bytes, "
        "rpc::BlockObjectKey; the client's PutBlock/GetBlock); got ",
        key.size(), " bytes"));
  }
  return ValidateUserKey(key);
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_OBJECT_KEY_H_
