// StoreConnector<ClientT>: the PD connector's store mode (the
// MooncakeStoreConnector shape). Instead of writing into one decode
// instance's memory, a prefill instance saves a request's KV into the store
// pool under canonical block keys; any decode instance, or a later prefill,
// loads the longest cached prefix into its own pages and computes only the
// rest (docs/connector.md, "Store mode").
//
//   auto sc = StoreConnector<Client>::Create(&client, layout, bases,
//                                            {.ns = {.model_id = "llama-3-8b", .dtype = "bf16"}});
//   (*sc)->Save(tokens, blocks);                        // prefill, after its forward pass
//   ASSIGN_OR_RETURN(uint64_t have, (*sc)->LoadPrefix(tokens, blocks, tokens.size() - 1));
//   // compute tokens [have, n) only
//
// Keys: index::BlockKeyer's chain over the tokens of each canonical block
// (options.block_tokens tokens, independent of the engine's page size), in
// options.ns (model, dtype, TP rank and size, LoRA, salt): one key names a
// whole prefix, and engines with different page sizes or memory orders share
// entries. Value of a block: for every layer, for every part (K, V), the
// block's token rows, each row this layout's heads x head_dim elements: the
// same bytes whatever the saving engine's layout.
//
// Loading is one prefix query and one batch read (Client::GetPrefixInto: one
// PrefixQuery RPC per rpc::kMaxChainBlocks blocks and one transport batch)
// into a staging buffer, then a scatter into the pages (the engine's memory
// order is arbitrary, so a block's rows are not contiguous in it).
//
// Thread-safety: calls may run concurrently for different requests (each
// call uses its own staging memory); the client must be thread-safe (it is).
#ifndef MOONCAKE_CONNECTOR_STORE_CONNECTOR_H_
#define MOONCAKE_CONNECTOR_STORE_CONNECTOR_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/index/block_key.h"
#include "mooncake/store/client/client_options.h"

namespace mooncake::connector {

struct StoreConnectorOptions {
  index::KeyNamespace ns;      // model_id required; tp_rank/tp_size: this layout's heads
  uint32_t block_tokens = 16;  // tokens per canonical block (key and value unit)
  uint64_t max_staging_bytes = 256 << 20;  // per call; larger requests go in rounds
  client::PutOptions put;
};

struct StoreSaveResult {
  size_t blocks = 0;          // full canonical blocks of the request
  size_t already_cached = 0;  // leading blocks the pool had (not written again)
  size_t saved = 0;           // blocks written now
};

template <typename ClientT>
class StoreConnector {
 public:
  // `bases[i]` holds region i of `layout` for the connector's lifetime.
  // Errors: INVALID_ARGUMENT (layout, bases, options).
  static absl::StatusOr<std::unique_ptr<StoreConnector>> Create(ClientT* client, KvLayout layout,
                                                                std::vector<std::byte*> bases,
                                                                StoreConnectorOptions options) {
    MC_ASSERT(client != nullptr, "a store connector needs a client");
    RETURN_IF_ERROR(layout.Validate());
    if (bases.size() != layout.NumRegions()) {
      return absl::InvalidArgumentError(absl::StrCat("StoreConnector: the layout has ",
                                                     layout.NumRegions(), " regions, got ",
                                                     bases.size(), " base addresses"));
    }
    ASSIGN_OR_RETURN(index::BlockKeyer keyer,
                     index::BlockKeyer::Create(options.ns, options.block_tokens));
    std::unique_ptr<StoreConnector> c(new StoreConnector(
        client, std::move(layout), std::move(bases), std::move(options), std::move(keyer)));
    if (c->block_bytes_ > c->options_.max_staging_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StoreConnector: one block is ", c->block_bytes_, " bytes, over max_staging_bytes"));
    }
    return c;
  }

  // Bytes of one canonical block's value.
  uint64_t block_bytes() const { return block_bytes_; }

  // The keys of the full canonical blocks of `tokens`.
  std::vector<Hash128> Keys(std::span<const uint32_t> tokens) const {
    std::vector<Hash128> keys(keyer_.NumFullBlocks(tokens.size()));
    keyer_.Compute(tokens, keyer_.root(), keys);
    return keys;
  }

  // Leading canonical blocks of `tokens` the pool holds (one PrefixQuery RPC
  // per rpc::kMaxChainBlocks blocks).
  absl::StatusOr<size_t> MatchPrefix(std::span<const uint32_t> tokens) {
    const std::vector<Hash128> keys = Keys(tokens);
    if (keys.empty()) return 0;
    return client_->MatchPrefix(keys);
  }

  // Saves the full canonical blocks of `tokens`, whose KV is in `blocks`
  // (token t in blocks[t / layout.block_size]). Blocks the pool already has
  // at the front of the chain are skipped; a block another writer stored
  // meanwhile (ALREADY_EXISTS) counts as saved. Errors: INVALID_ARGUMENT,
  // the client's.
  absl::StatusOr<StoreSaveResult> Save(std::span<const uint32_t> tokens,
                                       std::span<const uint64_t> blocks) {
    RETURN_IF_ERROR(CheckBlocks(tokens.size(), blocks));
    const std::vector<Hash128> keys = Keys(tokens);
    StoreSaveResult out{.blocks = keys.size()};
    if (keys.empty()) return out;
    ASSIGN_OR_RETURN(out.already_cached, client_->MatchPrefix(keys));
    const size_t per_round = std::max<uint64_t>(1, options_.max_staging_bytes / block_bytes_);
    std::vector<std::byte> staging;
    for (size_t first = out.already_cached; first < keys.size(); first += per_round) {
      const size_t n = std::min(per_round, keys.size() - first);
      staging.resize(n * block_bytes_);
      std::vector<std::string_view> values;
      for (size_t i = 0; i < n; ++i) {
        std::byte* value = staging.data() + i * block_bytes_;
        CopyBlock(first + i, blocks, value, /*to_value=*/true);
        values.emplace_back(reinterpret_cast<const char*>(value), block_bytes_);
      }
      const std::vector<absl::Status> put =
          client_->BatchPutBlocks(std::span(keys).subspan(first, n), values, options_.put);
      for (size_t i = 0; i < put.size(); ++i) {
        if (!put[i].ok() && !absl::IsAlreadyExists(put[i])) {
          return absl::Status(put[i].code(), absl::StrCat("StoreConnector: saving block ",
                                                          first + i, ": ", put[i].message()));
        }
      }
      out.saved += n;
    }
    return out;
  }

  // Loads the longest cached prefix of the first `max_tokens` tokens, whole
  // canonical blocks only, into `blocks`, and returns the tokens loaded (a
  // multiple of block_tokens). Bytes are checksum-verified by the client; a
  // block that cannot be read ends the prefix there.
  absl::StatusOr<uint64_t> LoadPrefix(std::span<const uint32_t> tokens,
                                      std::span<const uint64_t> blocks, uint64_t max_tokens) {
    max_tokens = std::min<uint64_t>(max_tokens, tokens.size());
    RETURN_IF_ERROR(CheckBlocks(max_tokens, blocks));
    std::vector<Hash128> keys = Keys(tokens.first(max_tokens));
    const size_t per_round = std::max<uint64_t>(1, options_.max_staging_bytes / block_bytes_);
    std::vector<std::byte> staging;
    size_t loaded = 0;
    while (loaded < keys.size()) {
      const size_t n = std::min(per_round, keys.size() - loaded);
      staging.resize(n * block_bytes_);
      std::vector<client::BlockBuffer> buffers(n);
      for (size_t i = 0; i < n; ++i) {
        buffers[i] = {staging.data() + i * block_bytes_, block_bytes_};
      }
      ASSIGN_OR_RETURN(const size_t got,
                       client_->GetPrefixInto(std::span(keys).subspan(loaded, n), buffers));
      for (size_t i = 0; i < got; ++i) {
        CopyBlock(loaded + i, blocks, staging.data() + i * block_bytes_, /*to_value=*/false);
      }
      loaded += got;
      if (got < n) break;
    }
    return static_cast<uint64_t>(loaded) * options_.block_tokens;
  }

 private:
  StoreConnector(ClientT* client, KvLayout layout, std::vector<std::byte*> bases,
                 StoreConnectorOptions options, index::BlockKeyer keyer)
      : client_(client),
        layout_(std::move(layout)),
        bases_(std::move(bases)),
        options_(std::move(options)),
        keyer_(std::move(keyer)),
        row_bytes_(uint64_t{layout_.num_kv_heads} * layout_.HeadBytes()),
        block_bytes_(uint64_t{layout_.num_layers} * layout_.num_parts * options_.block_tokens *
                     row_bytes_) {}

  absl::Status CheckBlocks(uint64_t num_tokens, std::span<const uint64_t> blocks) const {
    if (num_tokens > blocks.size() * uint64_t{layout_.block_size}) {
      return absl::InvalidArgumentError(absl::StrCat("StoreConnector: ", num_tokens, " tokens in ",
                                                     blocks.size(), " blocks of ",
                                                     layout_.block_size));
    }
    const uint64_t used = (num_tokens + layout_.block_size - 1) / layout_.block_size;
    for (uint64_t i = 0; i < used; ++i) {
      if (blocks[i] >= layout_.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("StoreConnector: block ", blocks[i],
                                                       " of a cache of ", layout_.num_blocks));
      }
    }
    return absl::OkStatus();
  }

  // Copies canonical block `index` between the pages and `value` (layer,
  // part, token row: this layout's heads). Rows are whole in every order but
  // the head-major one, where each head of a row is its own run.
  void CopyBlock(size_t index, std::span<const uint64_t> blocks, std::byte* value,
                 bool to_value) const {
    const bool rows_contiguous = layout_.order != KvOrder::kLayerFirstHeadMajor;
    const uint64_t head_bytes = layout_.HeadBytes();
    for (uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
      for (uint32_t part = 0; part < layout_.num_parts; ++part) {
        for (uint32_t r = 0; r < options_.block_tokens; ++r) {
          const uint64_t t = uint64_t{index} * options_.block_tokens + r;
          const uint64_t block = blocks[t / layout_.block_size];
          const uint32_t row = static_cast<uint32_t>(t % layout_.block_size);
          for (uint32_t h = 0; h < (rows_contiguous ? 1 : layout_.num_kv_heads); ++h) {
            const ByteRange at = layout_.ElementLocation(layer, part, block, row, h, 0);
            std::byte* page = bases_[at.region] + at.offset;
            const uint64_t len = rows_contiguous ? row_bytes_ : head_bytes;
            if (to_value) {
              std::memcpy(value, page, len);
            } else {
              std::memcpy(page, value, len);
            }
            value += len;
          }
        }
      }
    }
  }

  ClientT* const client_;
  const KvLayout layout_;
  const std::vector<std::byte*> bases_;
  const StoreConnectorOptions options_;
  const index::BlockKeyer keyer_;
  const uint64_t row_bytes_;    // one token's row of one (layer, part): every head held
  const uint64_t block_bytes_;  // one canonical block's value
};

}  // namespace mooncake::connector

#endif  // MOONCAKE_CONNECTOR_STORE_CONNECTOR_H_
