#include "mooncake/store/rpc/channel.h"

#include <set>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "mooncake/store/rpc/echo_testing.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/testdata/echo.pb.h"

namespace mooncake::rpc {
namespace {

// --- RpcMethod: one broken type per requirement. ---

struct NoId {
  static constexpr std::string_view kName = "NoId";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};
struct ZeroId {
  static constexpr uint16_t kId = 0;
  static constexpr std::string_view kName = "ZeroId";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};
struct NoName {
  static constexpr uint16_t kId = 5;
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};
struct NotProtobufRequest {
  static constexpr uint16_t kId = 5;
  static constexpr std::string_view kName = "NotProtobuf";
  using Request = std::string;
  using Response = echo::EchoResponse;
};
struct NoResponse {
  static constexpr uint16_t kId = 5;
  static constexpr std::string_view kName = "NoResponse";
  using Request = echo::EchoRequest;
};

static_assert(RpcMethod<EchoMethod>);
static_assert(RpcMethod<GetReplicasMethod>);
static_assert(!RpcMethod<NoId>);
static_assert(!RpcMethod<ZeroId>);
static_assert(!RpcMethod<NoName>);
static_assert(!RpcMethod<NotProtobufRequest>);
static_assert(!RpcMethod<NoResponse>);

// --- RpcChannel: one broken type per requirement. ---

struct NoCallRaw {
  uint32_t max_payload_bytes() const { return 1; }
};
struct CallRawReturnsStatus {
  absl::Status CallRaw(uint16_t, std::string_view, std::string_view, CallOptions, RawDone) {
    return absl::OkStatus();
  }
  uint32_t max_payload_bytes() const { return 1; }
};
struct NoMaxPayload {
  void CallRaw(uint16_t, std::string_view, std::string_view, CallOptions, RawDone) {}
};
struct MutableMaxPayload {
  void CallRaw(uint16_t, std::string_view, std::string_view, CallOptions, RawDone) {}
  uint32_t max_payload_bytes() { return 1; }  // not const
};

static_assert(RpcChannel<TcpChannel>);
static_assert(RpcChannel<InProcessChannel>);
static_assert(!RpcChannel<NoCallRaw>);
static_assert(!RpcChannel<CallRawReturnsStatus>);
static_assert(!RpcChannel<NoMaxPayload>);
static_assert(!RpcChannel<MutableMaxPayload>);

TEST(ChannelTest, MasterMethodIdsAreDistinctAndNamed) {
  const std::pair<uint16_t, std::string_view> methods[] = {
      {MountSegmentMethod::kId, MountSegmentMethod::kName},
      {UnmountSegmentMethod::kId, UnmountSegmentMethod::kName},
      {HeartbeatMethod::kId, HeartbeatMethod::kName},
      {PutStartMethod::kId, PutStartMethod::kName},
      {PutEndMethod::kId, PutEndMethod::kName},
      {PutRevokeMethod::kId, PutRevokeMethod::kName},
      {GetReplicasMethod::kId, GetReplicasMethod::kName},
      {ReleaseLeasesMethod::kId, ReleaseLeasesMethod::kName},
      {RemoveMethod::kId, RemoveMethod::kName},
      {ExistsMethod::kId, ExistsMethod::kName},
      {BatchExistsMethod::kId, BatchExistsMethod::kName},
      {PrefixQueryMethod::kId, PrefixQueryMethod::kName},
  };
  std::set<uint16_t> ids;
  std::set<std::string_view> names;
  for (const auto& [id, name] : methods) {
    EXPECT_TRUE(ids.insert(id).second) << id;
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_FALSE(name.empty());
  }
  EXPECT_EQ(ids.size(), 12u);
}

}  // namespace
}  // namespace mooncake::rpc
