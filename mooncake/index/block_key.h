// Canonical block keys: one 128-bit key per full block of tokens, chained so
// that a key names the whole prefix up to and including its block.
//
// The byte layout is a spec (docs/block_key_spec.md, with test vectors) so
// that any engine in any language computes the same keys:
//
//   root  = XXH3-128(seed 0, "MCBK" | u32 version=1 | u32 block_tokens |
//                    u32 tp_size | u32 tp_rank | str model_id | str dtype |
//                    str lora_id | str salt)
//   key_i = XXH3-128(seed 0, u64 parent.low | u64 parent.high |
//                    u32 token[0] ... u32 token[block_tokens-1] |
//                    u64 extra[0] ... u64 extra[n-1])
//
// where every integer is little-endian, `str` is a u32 byte length followed by
// the bytes, parent is key_{i-1} (the root for block 0) and the optional
// per-block extra keys (multimodal content hashes, per-block adapters) follow
// the tokens. A partial trailing block has no key.
//
// Media blocks (multimodal inputs; docs/block_key_spec.md, "Media blocks"):
// an encoder's hidden states for one media input (an image) are an object of
// their own, keyed by a content hash of the raw media bytes salted with the
// encoder and its preprocessing, so a repeated image maps to the same key:
//
//   media = XXH3-128(seed 0, "MCMK" | u32 version=1 | str modality |
//                    str encoder_id | str preprocess | u64 media_bytes |
//                    media bytes)
//
// In the prompt a media item occupies `length` placeholder positions; every
// block that overlaps it carries the item's key (low, high) in its extras, in
// order of appearance (ComputeWithMedia), so the chain of everything after
// the item depends on the media key.
//
// Thread-safety: BlockKeyer is immutable after Create(); every method is const
// and may run concurrently.
#ifndef MOONCAKE_INDEX_BLOCK_KEY_H_
#define MOONCAKE_INDEX_BLOCK_KEY_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"

namespace mooncake::index_internal {

inline void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

inline void AppendField(std::string& out, const std::string& s) {
  AppendU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

}  // namespace mooncake::index_internal

namespace mooncake::index {

// A block key is a 128-bit XXH3 value; Hash128's (low, high) halves.
using BlockKey = Hash128;

inline constexpr uint32_t kBlockKeyVersion = 1;

// Everything that makes the same token ids produce different KV bytes.
struct KeyNamespace {
  std::string model_id;  // e.g. "meta-llama/Llama-3.1-8B-Instruct@<revision>"; required
  std::string dtype;     // KV cache dtype, e.g. "bf16", "fp8_e4m3"
  uint32_t tp_size = 1;  // tensor-parallel layout of the KV cache
  uint32_t tp_rank = 0;  // REQUIRES: tp_rank < tp_size
  std::string lora_id;   // adapter applied to the whole prompt; empty = none
  std::string salt;      // cache isolation (tenant, security domain); empty = none
};

// The exact bytes hashed into the root key (exposed for the spec's vectors).
inline absl::StatusOr<std::string> RootKeyMessage(const KeyNamespace& ns, uint32_t block_tokens) {
  if (ns.model_id.empty()) return absl::InvalidArgumentError("KeyNamespace.model_id is empty");
  if (block_tokens == 0) return absl::InvalidArgumentError("block_tokens must be positive");
  if (ns.tp_size == 0 || ns.tp_rank >= ns.tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp_rank ", ns.tp_rank, " is not below tp_size ", ns.tp_size));
  }
  for (const std::string* s : {&ns.model_id, &ns.dtype, &ns.lora_id, &ns.salt}) {
    if (s->size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError("KeyNamespace field longer than 4 GiB");
    }
  }
  std::string msg = "MCBK";
  index_internal::AppendU32(msg, kBlockKeyVersion);
  index_internal::AppendU32(msg, block_tokens);
  index_internal::AppendU32(msg, ns.tp_size);
  index_internal::AppendU32(msg, ns.tp_rank);
  index_internal::AppendField(msg, ns.model_id);
  index_internal::AppendField(msg, ns.dtype);
  index_internal::AppendField(msg, ns.lora_id);
  index_internal::AppendField(msg, ns.salt);
  return msg;
}

inline constexpr uint32_t kMediaKeyVersion = 1;

// Everything that makes the same media bytes produce different hidden states.
struct MediaNamespace {
  std::string modality;    // "image", "audio", "video"; required
  std::string encoder_id;  // encoder and projector weights, name and revision; required
  std::string preprocess;  // preprocessing parameters in one canonical text (size, mean, std)
};

// A media key names one media input's hidden states (a 128-bit XXH3 value).
using MediaKey = Hash128;

// The exact bytes hashed before the media bytes (exposed for the spec's vectors).
inline absl::StatusOr<std::string> MediaKeyHeader(const MediaNamespace& ns, uint64_t media_bytes) {
  if (ns.modality.empty()) return absl::InvalidArgumentError("MediaNamespace.modality is empty");
  if (ns.encoder_id.empty()) {
    return absl::InvalidArgumentError("MediaNamespace.encoder_id is empty");
  }
  for (const std::string* s : {&ns.modality, &ns.encoder_id, &ns.preprocess}) {
    if (s->size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError("MediaNamespace field longer than 4 GiB");
    }
  }
  std::string msg = "MCMK";
  index_internal::AppendU32(msg, kMediaKeyVersion);
  index_internal::AppendField(msg, ns.modality);
  index_internal::AppendField(msg, ns.encoder_id);
  index_internal::AppendField(msg, ns.preprocess);
  index_internal::AppendU32(msg, static_cast<uint32_t>(media_bytes));
  index_internal::AppendU32(msg, static_cast<uint32_t>(media_bytes >> 32));
  return msg;
}

// The key of one media input's hidden states: a content hash of its raw
// bytes (as received, before decoding or preprocessing) under `ns`. Streams
// the bytes, so a large input is not copied.
inline absl::StatusOr<MediaKey> ComputeMediaKey(const MediaNamespace& ns,
                                                std::span<const unsigned char> media) {
  if (media.empty()) return absl::InvalidArgumentError("media input is empty");
  absl::StatusOr<std::string> header = MediaKeyHeader(ns, media.size());
  if (!header.ok()) return header.status();
  StableHasher128 hasher;
  hasher.Update(*header);
  hasher.Update(media.data(), media.size());
  return hasher.Digest();
}

// Where one media item sits in a prompt: `length` placeholder positions from
// `offset`, whose hidden states are the object named `key`.
struct MediaPlacement {
  MediaKey key;
  size_t offset = 0;
  size_t length = 0;
};

// Computes key chains for one namespace and block size.
class BlockKeyer {
 public:
  static absl::StatusOr<BlockKeyer> Create(const KeyNamespace& ns, uint32_t block_tokens) {
    absl::StatusOr<std::string> msg = RootKeyMessage(ns, block_tokens);
    if (!msg.ok()) return msg.status();
    return BlockKeyer(StableHash128(*msg), block_tokens);
  }

  BlockKey root() const { return root_; }
  uint32_t block_tokens() const { return block_tokens_; }
  size_t NumFullBlocks(size_t num_tokens) const { return num_tokens / block_tokens_; }

  // The key of one block. REQUIRES: tokens.size() == block_tokens().
  BlockKey Next(const BlockKey& parent, std::span<const uint32_t> tokens,
                std::span<const uint64_t> extra = {}) const {
    MC_ASSERT(tokens.size() == block_tokens_, "Next() takes exactly one block of tokens");
    const size_t size = 16 + 4 * tokens.size() + 8 * extra.size();
    if (size <= kStackMessageBytes) {
      alignas(16) unsigned char buf[kStackMessageBytes];
      WriteMessage(buf, parent, tokens, extra);
      return StableHash128(buf, size);
    }
    StableHasher128 hasher;  // long blocks: stream instead of copying
    unsigned char head[16];
    StoreU64(head, parent.low);
    StoreU64(head + 8, parent.high);
    hasher.Update(head, sizeof(head));
    UpdateTokens(hasher, tokens);
    for (uint64_t e : extra) hasher.UpdateU64(e);
    return hasher.Digest();
  }

  // Writes the keys of every full block of `tokens`, chained from `parent`
  // (root() for a prompt's first block; the last key of an earlier call to
  // continue a sequence). Returns the number of keys written; trailing
  // tokens that do not fill a block get none.
  // REQUIRES: out.size() >= NumFullBlocks(tokens.size()).
  size_t Compute(std::span<const uint32_t> tokens, BlockKey parent, std::span<BlockKey> out) const {
    const size_t n = NumFullBlocks(tokens.size());
    MC_ASSERT(out.size() >= n, "output span too small for the key chain");
    for (size_t i = 0; i < n; ++i) {
      parent = Next(parent, tokens.subspan(i * block_tokens_, block_tokens_));
      out[i] = parent;
    }
    return n;
  }

  std::vector<BlockKey> Compute(std::span<const uint32_t> tokens) const {
    std::vector<BlockKey> keys(NumFullBlocks(tokens.size()));
    Compute(tokens, root_, keys);
    return keys;
  }

  // For token ids that arrive as signed or 64-bit integers (Python lists,
  // torch int64 tensors): every id must lie in [0, 2^32).
  template <typename T>
  requires std::is_integral_v<T> absl::StatusOr<std::vector<BlockKey>> ComputeChecked(
      std::span<const T> tokens)
  const {
    const size_t used = NumFullBlocks(tokens.size()) * block_tokens_;
    std::vector<uint32_t> ids(used);
    for (size_t i = 0; i < used; ++i) {
      const T t = tokens[i];
      if (t < 0 || static_cast<uint64_t>(t) > std::numeric_limits<uint32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", static_cast<int64_t>(t), " at position ", i, " is outside [0, 2^32)"));
      }
      ids[i] = static_cast<uint32_t>(t);
    }
    return Compute(std::span<const uint32_t>(ids));
  }

  // The keys of a prompt with media items in it. `tokens` holds the
  // engine's placeholder id at every media position; each block that
  // overlaps an item gets that item's key (low, high) as extras, items in
  // order of offset, so two prompts that differ only by an image share no
  // block from the image's first block on. Without media this equals
  // Compute(tokens). Items must be sorted by offset, non-empty,
  // non-overlapping and inside `tokens` (InvalidArgument otherwise).
  absl::StatusOr<std::vector<BlockKey>> ComputeWithMedia(
      std::span<const uint32_t> tokens, std::span<const MediaPlacement> media) const {
    size_t end = 0;
    for (size_t m = 0; m < media.size(); ++m) {
      const MediaPlacement& item = media[m];
      if (item.length == 0 || item.offset < end || item.offset > tokens.size() ||
          item.length > tokens.size() - item.offset) {
        return absl::InvalidArgumentError(
            absl::StrCat("media item ", m, " at [", item.offset, ", +", item.length,
                         ") is empty, overlaps the previous item or lies outside the ",
                         tokens.size(), " tokens"));
      }
      end = item.offset + item.length;
    }
    std::vector<BlockKey> keys(NumFullBlocks(tokens.size()));
    std::vector<uint64_t> extra;
    BlockKey parent = root_;
    size_t first_item = 0;  // the first item not wholly before the current block
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t begin = i * block_tokens_, stop = begin + block_tokens_;
      while (first_item < media.size() &&
             media[first_item].offset + media[first_item].length <= begin) {
        ++first_item;
      }
      extra.clear();
      for (size_t m = first_item; m < media.size() && media[m].offset < stop; ++m) {
        extra.push_back(media[m].key.low);
        extra.push_back(media[m].key.high);
      }
      MC_DASSERT(extra.size() <= 2 * media.size(), "an item's key added twice to one block");
      parent = Next(parent, tokens.subspan(begin, block_tokens_), extra);
      keys[i] = parent;
    }
    MC_ASSERT(first_item <= media.size(), "media cursor past the end");
    return keys;
  }

 private:
  static constexpr size_t kStackMessageBytes = 4096;

  BlockKeyer(BlockKey root, uint32_t block_tokens) : root_(root), block_tokens_(block_tokens) {}

  static void StoreU64(unsigned char* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
  }

  static void WriteMessage(unsigned char* buf, const BlockKey& parent,
                           std::span<const uint32_t> tokens, std::span<const uint64_t> extra) {
    StoreU64(buf, parent.low);
    StoreU64(buf + 8, parent.high);
    unsigned char* p = buf + 16;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p, tokens.data(), 4 * tokens.size());
      p += 4 * tokens.size();
    } else {
      for (uint32_t t : tokens) {
        for (int i = 0; i < 4; ++i) *p++ = static_cast<unsigned char>(t >> (8 * i));
      }
    }
    for (uint64_t e : extra) {
      StoreU64(p, e);
      p += 8;
    }
  }

  static void UpdateTokens(StableHasher128& hasher, std::span<const uint32_t> tokens) {
    if constexpr (std::endian::native == std::endian::little) {
      hasher.Update(tokens.data(), 4 * tokens.size());
    } else {
      for (uint32_t t : tokens) {
        unsigned char le[4];
        for (int i = 0; i < 4; ++i) le[i] = static_cast<unsigned char>(t >> (8 * i));
        hasher.Update(le, 4);
      }
    }
  }

  BlockKey root_;
  uint32_t block_tokens_;
};

}  // namespace mooncake::index

#endif  // MOONCAKE_INDEX_BLOCK_KEY_H_
