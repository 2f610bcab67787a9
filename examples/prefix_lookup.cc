// prefix_lookup: block keys for a prompt, and the longest cached prefix in a
// store, in one round trip.
//
// 1. index::BlockKeyer turns token ids into one 128-bit key per full block of
//    16 tokens. Keys chain (a key hashes its parent's key and its block's
//    tokens), so a key names the whole prefix up to its block, and every
//    engine computes the same keys (docs/block_key_spec.md).
// 2. A store runs in this process: master, one worker, one client
//    (in_process_store.h; over TCP only the channel changes).
// 3. "Prefill" of prompt A publishes the KV bytes of its first 8 blocks with
//    Client::BatchPutBlocks: each block is an object under
//    rpc::BlockObjectKey(block key).
// 4. Prompt B shares A's 100-token system prompt, then differs. One
//    Client::MatchPrefix call says how many of B's leading blocks are cached
//    (what a scheduler asks before it plans prefill); Client::GetPrefixInto
//    then loads those blocks straight into the engine's KV buffer, with one
//    master RPC for the whole prefix, and prefill runs only for the rest.
//
//   bazel run //examples:prefix_lookup
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "examples/in_process_store.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/index/block_key.h"
#include "mooncake/store/client.h"

namespace {

using mooncake::Hash128;
using mooncake::index::BlockKeyer;

constexpr uint32_t kBlockTokens = 16;
// KV bytes of one block: 16 tokens x (K, V) x 4 KV heads x 64 dims x bf16.
constexpr size_t kBlockBytes = kBlockTokens * 2 * 4 * 64 * 2;

// Token ids `first`, `first` + 1, ... (a tokenizer's output in an engine).
std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<uint32_t>(i);
  return t;
}

std::vector<uint32_t> Concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Stand-in for the KV bytes the attention layers wrote for a block.
std::string KvBytes(const Hash128& key) {
  std::string kv(kBlockBytes, '\0');
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<char>((key.low >> (i % 64)) ^ i);
  return kv;
}

absl::Status Run() {
  ASSIGN_OR_RETURN(
      BlockKeyer keyer,
      BlockKeyer::Create({.model_id = "example/llama-3-8b", .dtype = "bf16"}, kBlockTokens));
  const std::vector<uint32_t> system_prompt = Tokens(1, 100);
  const std::vector<uint32_t> prompt_a = Concat(system_prompt, Tokens(5000, 60));
  const std::vector<uint32_t> prompt_b = Concat(system_prompt, Tokens(9000, 50));
  const std::vector<Hash128> keys_a = keyer.Compute(prompt_a);
  const std::vector<Hash128> keys_b = keyer.Compute(prompt_b);

  mooncake::examples::InProcessStore<>::Options options;
  options.worker.segment_bytes = 8 << 20;
  ASSIGN_OR_RETURN(auto store, mooncake::examples::InProcessStore<>::Start(std::move(options)));
  auto& client = store->client();

  // Prefill of A wrote KV for its first 8 blocks and publishes them.
  const size_t published = 8;
  std::vector<std::string> kv_a;
  for (size_t i = 0; i < published; ++i) kv_a.push_back(KvBytes(keys_a[i]));
  const std::vector<std::string_view> values(kv_a.begin(), kv_a.end());
  for (const absl::Status& s : client.BatchPutBlocks(std::span(keys_a).first(published), values)) {
    RETURN_IF_ERROR(s);
  }
  std::printf("prompt A: %zu tokens, %zu full blocks, %zu published\n", prompt_a.size(),
              keys_a.size(), published);

  ASSIGN_OR_RETURN(const size_t matched_a, client.MatchPrefix(keys_a));
  std::printf("prompt A: %zu of %zu blocks cached\n", matched_a, keys_a.size());

  // B: how much prefill can be skipped? One RPC for the whole chain.
  ASSIGN_OR_RETURN(const size_t matched, client.MatchPrefix(keys_b));
  const size_t cached_tokens = matched * kBlockTokens;
  std::printf(
      "prompt B: %zu tokens, %zu full blocks, %zu cached (%zu tokens); prefill computes %zu\n",
      prompt_b.size(), keys_b.size(), matched, cached_tokens, prompt_b.size() - cached_tokens);

  // Load the cached blocks into the engine's KV buffer: GetPrefixInto takes
  // the replicas from its prefix query (one RPC, one lease) and reads every
  // block in one transport batch, checksums verified.
  std::string kv_buffer(keys_b.size() * kBlockBytes, '\0');
  std::vector<mooncake::client::BlockBuffer> slots;
  for (size_t i = 0; i < keys_b.size(); ++i) {
    slots.push_back({kv_buffer.data() + i * kBlockBytes, kBlockBytes});
  }
  const uint64_t rpcs_before = client.stats().master_rpcs;
  ASSIGN_OR_RETURN(const size_t loaded, client.GetPrefixInto(keys_b, slots));
  const uint64_t load_rpcs = client.stats().master_rpcs - rpcs_before;
  if (loaded != matched) {
    return absl::UnavailableError(absl::StrCat("loaded ", loaded, " of ", matched, " blocks"));
  }
  for (size_t i = 0; i < loaded; ++i) {
    if (std::memcmp(kv_buffer.data() + i * kBlockBytes, KvBytes(keys_b[i]).data(), kBlockBytes)) {
      return absl::DataLossError(absl::StrCat("block ", i, " came back with other bytes"));
    }
  }
  std::printf(
      "fetched and verified %zu blocks (%zu KiB) into the KV buffer with %llu master RPCs "
      "(PrefixQuery, ReleaseLeases)\n",
      loaded, loaded * kBlockBytes / 1024, static_cast<unsigned long long>(load_rpcs));
  return absl::OkStatus();
}

}  // namespace

int main() {
  const absl::Status s = Run();
  if (!s.ok()) {
    std::fprintf(stderr, "prefix_lookup: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
