#include "mooncake/store/rpc/object_key.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace mooncake::rpc {
namespace {

std::string Hex(const std::string& bytes) { return absl::BytesToHexString(bytes); }

TEST(ObjectKeyTest, BlockObjectKeyBytes) {
  EXPECT_EQ(Hex(BlockObjectKey({0x0807060504030201ULL, 0x100F0E0D0C0B0A09ULL})),
            "0062"
            "0102030405060708"
            "090a0b0c0d0e0f10");
  // The root key of docs/block_key_spec.md (canonical hex, high half first):
  // 03c73d9bfdef376c142f061648fe4ae8.
  EXPECT_EQ(Hex(BlockObjectKey({0x142f061648fe4ae8ULL, 0x03c73d9bfdef376cULL})),
            "0062"
            "e84afe4816062f14"
            "6c37effd9b3dc703");
  EXPECT_EQ(Hex(BlockObjectKey({0, 0})), "0062" + std::string(32, '0'));
}

TEST(ObjectKeyTest, WriteBlockObjectKeyRewritesInPlace) {
  std::string key = BlockObjectKey({1, 2});
  const char* const data = key.data();
  WriteBlockObjectKey({~0ULL, 7}, &key);
  EXPECT_EQ(key.data(), data);  // no allocation
  EXPECT_EQ(key, BlockObjectKey({~0ULL, 7}));
  std::string zeros(kBlockObjectKeyBytes, '\0');
  WriteBlockObjectKey({3, 4}, &zeros);  // writes the prefix too
  EXPECT_EQ(zeros, BlockObjectKey({3, 4}));
}

TEST(ObjectKeyTest, ParseBlockObjectKeyInvertsBlockObjectKey) {
  for (const Hash128 h : {Hash128{0, 0}, Hash128{1, 2}, Hash128{~0ULL, ~0ULL},
                          Hash128{0x8000000000000000ULL, 0x80ULL}}) {
    const std::optional<Hash128> back = ParseBlockObjectKey(BlockObjectKey(h));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, h);
  }
  const std::string key = BlockObjectKey({1, 2});
  EXPECT_FALSE(ParseBlockObjectKey(key.substr(0, 17)).has_value());
  EXPECT_FALSE(ParseBlockObjectKey(key + "x").has_value());
  EXPECT_FALSE(ParseBlockObjectKey(std::string("\0r", 2) + key.substr(2)).has_value());
  EXPECT_FALSE(ParseBlockObjectKey("bbbbbbbbbbbbbbbbbb").has_value());
}

TEST(ObjectKeyTest, ValidateUserKey) {
  EXPECT_TRUE(ValidateUserKey("model/layer0/block7").ok());
  EXPECT_EQ(ValidateUserKey("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateUserKey(std::string(kMaxKeyBytes + 1, 'k')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateUserKey(std::string(kMaxKeyBytes, 'k')).ok());
  EXPECT_EQ(ValidateUserKey(BlockObjectKey({1, 2})).code(),  // block keys are not user keys
            absl::StatusCode::kInvalidArgument);
}

TEST(ObjectKeyTest, ValidateObjectKeyAcceptsUserAndBlockKeysOnly) {
  EXPECT_TRUE(ValidateObjectKey("user/key").ok());
  EXPECT_TRUE(ValidateObjectKey(BlockObjectKey({1, 2})).ok());
  EXPECT_TRUE(ValidateObjectKey(std::string(kMaxKeyBytes, 'a')).ok());
  EXPECT_EQ(ValidateObjectKey("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateObjectKey(std::string(kMaxKeyBytes + 1, 'a')).code(),
            absl::StatusCode::kInvalidArgument);
  // 0x00 first byte that is not a block key: wrong tag, length or both.
  for (const std::string& bad :
       {std::string("\0b", 2), std::string(18, '\0'), BlockObjectKey({1, 2}).substr(0, 17),
        BlockObjectKey({1, 2}) + "x", std::string("\0r", 2) + "user/key"}) {
    const absl::Status s = ValidateObjectKey(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Hex(bad);
    EXPECT_NE(s.message().find("reserved for block keys"), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace mooncake::rpc
