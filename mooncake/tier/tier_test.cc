#include "mooncake/tier/tier.h"

#include <optional>
#include <span>
#include <string_view>

#include "gtest/gtest.h"

namespace mooncake::tier {
namespace {

// A minimal model: everything the concept asks for, nothing else.
struct Complete {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  bool Contains(std::string_view) const { return false; }
  void ForEach(ObjectVisitor) const {}
  TierStats stats() const { return {}; }
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(Tier<Complete>);

// One broken type per requirement.
struct NoWrite {
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  bool Contains(std::string_view) const { return false; }
  void ForEach(ObjectVisitor) const {}
  TierStats stats() const { return {}; }
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(!Tier<NoWrite>);

struct SyncRead : Complete {  // returns a value instead of completing through a callback
  absl::StatusOr<ReadResult> Read(std::string_view, std::span<std::byte>) { return ReadResult{}; }
};
static_assert(!Tier<SyncRead>);

struct NoRemove {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  bool Contains(std::string_view) const { return false; }
  void ForEach(ObjectVisitor) const {}
  TierStats stats() const { return {}; }
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(!Tier<NoRemove>);

struct MutableLookup {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) { return std::nullopt; }  // not const
  bool Contains(std::string_view) const { return false; }
  void ForEach(ObjectVisitor) const {}
  TierStats stats() const { return {}; }
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(!Tier<MutableLookup>);

struct ContainsReturnsInt {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  int Contains(std::string_view) const { return 0; }
  void ForEach(ObjectVisitor) const {}
  TierStats stats() const { return {}; }
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(!Tier<ContainsReturnsInt>);

struct NoForEach {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  bool Contains(std::string_view) const { return false; }
  TierStats stats() const { return {}; }
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(!Tier<NoForEach>);

struct NoStats {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  bool Contains(std::string_view) const { return false; }
  void ForEach(ObjectVisitor) const {}
  uint64_t capacity_bytes() const { return 0; }
};
static_assert(!Tier<NoStats>);

struct NoCapacity {
  void Write(std::string_view, std::span<const std::byte>, const ObjectMeta&, WriteDone) {}
  void Read(std::string_view, std::span<std::byte>, ReadDone) {}
  void Remove(std::string_view, WriteDone) {}
  std::optional<ObjectInfo> Lookup(std::string_view) const { return std::nullopt; }
  bool Contains(std::string_view) const { return false; }
  void ForEach(ObjectVisitor) const {}
  TierStats stats() const { return {}; }
};
static_assert(!Tier<NoCapacity>);

TEST(TierTest, CompressionNamesRoundTripAndOthersAreRefused) {
  for (Compression c : {Compression::kNever, Compression::kAlways, Compression::kAuto}) {
    EXPECT_EQ(ParseCompression(CompressionName(c)), c);
  }
  EXPECT_EQ(CompressionName(Compression::kAlways), "always");
  for (std::string_view bad : {"", "zstd", "Always", "auto "}) {
    EXPECT_FALSE(ParseCompression(bad).has_value()) << bad;
  }
}

TEST(TierTest, ObjectMetaComparesByValue) {
  EXPECT_EQ((ObjectMeta{compress::DType::kBFloat16, 3}),
            (ObjectMeta{compress::DType::kBFloat16, 3}));
  EXPECT_NE((ObjectMeta{compress::DType::kBFloat16, 3}), (ObjectMeta{compress::DType::kBytes, 3}));
}

}  // namespace
}  // namespace mooncake::tier
