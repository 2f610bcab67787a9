// ClientOptions::network_compression against the real master and a worker in
// process: every float dtype round trips through every read path, what the
// stored object is, kOff and kAuto, and corrupt or foreign stored values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/hash.h"
#include "mooncake/compress/synthetic_kv.h"
#include "mooncake/store/client.h"
#include "mooncake/store/client/network_codec.h"
#include "mooncake/store/client/testing/in_process_store.h"
#include "mooncake/store/rpc/object_key.h"

namespace mooncake::client {
namespace {

namespace proto = ::mooncake::store::proto;
using TestClient = client_testing::InProcessStore::TestClient;

// The real master and one worker (64 MiB) in process.
class Store : public client_testing::InProcessStore {
 public:
  Store() : InProcessStore(64 << 20) {}
  using InProcessStore::NewClient;
  std::unique_ptr<TestClient> NewClient(NetworkCompression mode, double link_bytes_per_s = 0) {
    ClientOptions o;
    o.network_compression = mode;
    o.network_link_bytes_per_s = link_bytes_per_s;
    return NewClient(o);
  }
  // The worker's memory holding `needle` (nullptr: nowhere).
  char* Find(std::string_view needle) {
    char* seg = static_cast<char*>(worker().segments()[0].data);
    char* end = seg + worker().segments()[0].size_bytes;
    char* at = std::search(seg, end, needle.begin(), needle.end());
    return at == end ? nullptr : at;
  }
};

proto::TensorMeta Tensor(proto::DType dtype, uint64_t bytes) {
  proto::TensorMeta t;
  t.set_model("m");
  t.set_dtype(dtype);
  const uint64_t elem = dtype == proto::DTYPE_BF16 || dtype == proto::DTYPE_FP16 ? 2 : 1;
  t.add_shape(bytes / elem / 64);
  t.add_shape(64);
  return t;
}

// An object's stored size (QueryObjects' info.size_bytes: the frame when it
// is compressed) and what a read returns (value_bytes).
struct Sizes {
  uint64_t stored = 0;
  uint64_t value = 0;
};
Sizes SizesOf(TestClient& c, std::string_view key) {
  auto listed = c.QueryObjects({.start_after = std::string(key.substr(0, key.size() - 1))});
  if (!listed.ok()) {
    ADD_FAILURE() << listed.status();
    return {};
  }
  for (const client::QueriedObject& o : listed->objects) {
    if (o.key == key) return {o.info.size_bytes(), o.value_bytes};
  }
  ADD_FAILURE() << key << " is not listed";
  return {};
}

TEST(ClientCompression, EveryFloatDTypeRoundTripsThroughEveryReadPath) {
  Store s;
  auto writer = s.NewClient(NetworkCompression::kAlways);
  auto reader = s.NewClient(NetworkCompression::kOff);  // reads decode whatever the option
  constexpr size_t kBytes = 1 << 20;
  for (const NetworkDTypePair& c : kNetworkDTypes) {
    SCOPED_TRACE(compress::DTypeName(c.dtype));
    const std::string name(compress::DTypeName(c.dtype));
    const std::string raw = compress::SyntheticKvString(kBytes, c.dtype);
    const proto::TensorMeta tensor = Tensor(c.proto, kBytes);
    const uint64_t puts_before = writer->stats().compressed_puts;
    ASSERT_TRUE(writer->Put(name, raw, {.tensor = &tensor}).ok());
    EXPECT_EQ(writer->stats().compressed_puts, puts_before + 1);
    const Sizes sizes = SizesOf(*reader, name);
    EXPECT_LT(sizes.stored, kBytes) << "the object is the compressed bytes";
    EXPECT_EQ(sizes.value, kBytes);
    EXPECT_EQ(*reader->GetSize(name), kBytes) << "GetSize: what a read returns";

    EXPECT_EQ(*reader->Get(name), raw);
    std::string buf(kBytes + 100, '\0');
    auto n = reader->GetInto(name, buf.data(), buf.size(), {.bypass_cache = true});
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, kBytes);
    EXPECT_EQ(buf.substr(0, kBytes), raw);
    auto object = reader->GetObject(name);
    ASSERT_TRUE(object.ok()) << object.status();
    EXPECT_EQ(object->value, raw);
    ASSERT_TRUE(object->tensor.has_value());
    EXPECT_EQ(object->tensor->codec(), 0u) << "describes the raw tensor the caller holds";
    EXPECT_EQ(object->tensor->dtype(), c.proto);

    // Room for the stored bytes but not the raw tensor: refused, named.
    std::string small(kBytes - 1, '\0');
    const absl::Status too_small = reader->GetInto(name, small.data(), small.size()).status();
    EXPECT_TRUE(absl::IsOutOfRange(too_small)) << too_small;
    EXPECT_NE(too_small.message().find("stored compressed"), std::string_view::npos) << too_small;

    // Block objects, prefix reads and the batch forms.
    const Hash128 block = StableHash128(name.data(), name.size(), 7);
    ASSERT_TRUE(writer->PutBlock(block, raw, {.tensor = &tensor}).ok());
    EXPECT_EQ(*reader->GetBlock(block), raw);
    std::string into(kBytes, '\0');
    const BlockBuffer bb{into.data(), into.size()};
    auto prefix = reader->GetPrefixInto(std::span<const Hash128>(&block, 1),
                                        std::span<const BlockBuffer>(&bb, 1));
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_EQ(*prefix, 1u);
    EXPECT_EQ(into, raw);
    const std::string block_key = rpc::BlockObjectKey(block);
    const std::vector<std::string_view> keys = {name, block_key};
    for (auto& got : reader->BatchGet(keys, {.bypass_cache = true})) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, raw);
    }
    std::string b0(kBytes, '\0'), b1(kBytes, '\0');
    const GetIntoItem items[] = {{name, b0.data(), b0.size()}, {block_key, b1.data(), b1.size()}};
    for (auto& got : reader->BatchGetInto(items)) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, kBytes);
    }
    EXPECT_EQ(b0, raw);
    EXPECT_EQ(b1, raw);
  }
  const ClientStats ws = writer->stats();
  EXPECT_EQ(ws.compressed_puts, 8u);
  EXPECT_GT(ws.compression_saved_bytes, 0u);
  EXPECT_EQ(ws.bytes_written, 8u * kBytes) << "counts the values, not the frames";
  EXPECT_GE(reader->stats().decompressed_gets, 8u * 4);
}

TEST(ClientCompression, OffStoresValuesAsGiven) {
  Store s;
  auto c = s.NewClient(NetworkCompression::kOff);
  const std::string raw = compress::SyntheticKvString(1 << 20, compress::DType::kBFloat16);
  const proto::TensorMeta tensor = Tensor(proto::DTYPE_BF16, raw.size());
  ASSERT_TRUE(c->Put("k", raw, {.tensor = &tensor}).ok());
  EXPECT_EQ(*c->GetSize("k"), raw.size());
  auto object = c->GetObject("k");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->value, raw);
  EXPECT_EQ(object->tensor->codec(), 0u);
  EXPECT_EQ(c->stats().compressed_puts, 0u);
  EXPECT_EQ(c->stats().decompressed_gets, 0u);
  EXPECT_NE(s.Find(raw.substr(0, 4096)), nullptr) << "the raw bytes are in the worker";
}

TEST(ClientCompression, AutoCompressesForASlowLinkOnly) {
  Store s;
  const std::string raw = compress::SyntheticKvString(1 << 20, compress::DType::kBFloat16);
  const proto::TensorMeta tensor = Tensor(proto::DTYPE_BF16, raw.size());
  auto slow = s.NewClient(NetworkCompression::kAuto, 125e6);  // 1 Gbit/s
  ASSERT_TRUE(slow->Put("slow", raw, {.tensor = &tensor}).ok());
  EXPECT_LT(SizesOf(*slow, "slow").stored, raw.size());
  EXPECT_EQ(*slow->GetSize("slow"), raw.size());
  auto fast = s.NewClient(NetworkCompression::kAuto, 25e9);
  ASSERT_TRUE(fast->Put("fast", raw, {.tensor = &tensor}).ok());
  EXPECT_EQ(SizesOf(*fast, "fast").stored, raw.size());
  // No bandwidth given: the client measures its own transfers. In process
  // they run at memory speed, far above what compressing could beat.
  auto measured = s.NewClient(NetworkCompression::kAuto);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(measured->Put(absl::StrCat("m", i), raw, {.tensor = &tensor}).ok());
  }
  EXPECT_GT(measured->stats().measured_link_bytes_per_s, 0u);
  EXPECT_EQ(measured->stats().compressed_puts, 0u);
  EXPECT_EQ(*measured->Get("m2"), raw);
}

TEST(ClientCompression, ValuesThatWouldNotShrinkOrAreNotFloatKvStayRaw) {
  Store s;
  auto c = s.NewClient(NetworkCompression::kAlways);
  std::string random(1 << 18, '\0');
  uint64_t x = 88172645463325252ull;
  for (char& b : random) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<char>(x);
  }
  const proto::TensorMeta bf16 = Tensor(proto::DTYPE_BF16, random.size());
  ASSERT_TRUE(c->Put("random", random, {.tensor = &bf16}).ok());
  EXPECT_EQ(*c->GetSize("random"), random.size());
  EXPECT_EQ(*c->Get("random"), random);
  const std::string kv = compress::SyntheticKvString(1 << 18, compress::DType::kBFloat16);
  ASSERT_TRUE(c->Put("untyped", kv).ok());  // no TensorMeta
  EXPECT_EQ(*c->GetSize("untyped"), kv.size());
  EXPECT_EQ(c->stats().compressed_puts, 0u);
}

TEST(ClientCompression, CorruptOrForeignStoredValuesAreClearErrors) {
  Store s;
  auto c = s.NewClient(NetworkCompression::kOff);
  const std::string raw = compress::SyntheticKvString(1 << 20, compress::DType::kBFloat16);
  // A writer that set codec itself over bytes that are no frame: its
  // checksum is right, the decode is what refuses it.
  proto::TensorMeta bogus = Tensor(proto::DTYPE_BF16, raw.size());
  bogus.set_codec(kNetworkCodecId);
  ASSERT_TRUE(c->Put("not-a-frame", raw.substr(0, 5000), {.tensor = &bogus}).ok());
  absl::Status st = c->Get("not-a-frame").status();
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("not a valid frame"), std::string_view::npos) << st;
  std::string buf(raw.size(), '\0');
  EXPECT_TRUE(absl::IsDataLoss(c->GetInto("not-a-frame", buf.data(), buf.size()).status()));

  proto::TensorMeta future = bogus;
  future.set_codec(9);
  ASSERT_TRUE(c->Put("future", raw.substr(0, 5000), {.tensor = &future}).ok());
  st = c->Get("future").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;

  // A frame whose bytes changed on the worker: the object checksum (over
  // the stored bytes) catches it; with checksums off, the frame's own does.
  auto w = s.NewClient(NetworkCompression::kAlways);
  const proto::TensorMeta tensor = Tensor(proto::DTYPE_BF16, raw.size());
  ASSERT_TRUE(w->Put("packed", raw, {.tensor = &tensor}).ok());
  const std::string frame = *CompressValue(raw, compress::DType::kBFloat16);
  char* at = s.Find(std::string_view(frame).substr(0, 256));
  ASSERT_NE(at, nullptr);
  at[frame.size() / 2] ^= 0x40;
  st = c->Get("packed").status();
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  ClientOptions unchecked;
  unchecked.verify_checksums = false;
  auto blind = s.NewClient(unchecked);
  st = blind->Get("packed").status();
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("failed to decode"), std::string_view::npos) << st;
}

}  // namespace
}  // namespace mooncake::client
