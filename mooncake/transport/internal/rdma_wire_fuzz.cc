// Fuzzes the RDMA control-message decoder: any bytes must decode or fail with
// a Status, never crash; whatever decodes must re-encode and decode the same.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mooncake/base/assert.h"
#include "mooncake/transport/internal/rdma_wire.h"

namespace mooncake {

std::vector<std::string> FuzzSeeds() {
  using transport_internal::RdmaMessage;
  using transport_internal::RdmaMsgType;
  std::vector<std::string> seeds;
  for (int t = 1; t <= transport_internal::kRdmaMsgTypeMax; ++t) {
    RdmaMessage m;
    m.type = static_cast<RdmaMsgType>(t);
    m.qp.mtu = 3;
    m.qp.qpn = 77;
    m.segment.id = 3;
    m.segment.length = 4096;
    m.segment.addr = 0x1000;
    if (t == 2) m.status = absl::UnavailableError("busy");
    if (t == 8) m.status = absl::UnauthenticatedError("wrong secret");
    if (t >= 5) m.auth = std::string(t == 5 ? 47 : 32, static_cast<char>('a' + t));
    const std::vector<uint8_t> f = transport_internal::EncodeRdmaMessage(m);
    seeds.emplace_back(f.begin(), f.end());
  }
  return seeds;
}

}  // namespace mooncake

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mooncake::transport_internal;
  auto m = DecodeRdmaMessage(std::span(data, size));
  if (!m.ok()) return 0;
  auto again = DecodeRdmaMessage(EncodeRdmaMessage(*m));
  MC_ASSERT(again.ok(), "a decoded message must re-encode to a decodable frame");
  MC_ASSERT(
      again->type == m->type && again->qp == m->qp && again->status.code() == m->status.code(),
      "round trip changed the message");
  return 0;
}
