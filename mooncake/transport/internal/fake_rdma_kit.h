// The conformance kit's factory (transport_testing.h) for RdmaEngine over
// FakeVerbs: one fabric and one set of options, given by `Config`:
//
//   struct TwoPorts {
//     static std::shared_ptr<FakeFabric> Fabric();  // shared by every engine made
//     static RdmaOptions Options();
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(TwoPorts, TransportConformanceTest,
//                                  FakeRdmaKitFactory<TwoPorts>);
//
// Thread-safety: Make and Allocate as the kit calls them.
#ifndef MOONCAKE_TRANSPORT_INTERNAL_FAKE_RDMA_KIT_H_
#define MOONCAKE_TRANSPORT_INTERNAL_FAKE_RDMA_KIT_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/internal/fake_verbs.h"
#include "mooncake/transport/internal/rdma_engine.h"
#include "mooncake/transport/transport_testing.h"

namespace mooncake::transport_internal {

template <typename Config>
struct FakeRdmaKitFactory {
  using Transport = RdmaEngine<FakeVerbs>;
  static constexpr bool kCrossProcess = false;  // the fake fabric lives in one process
  static constexpr bool kUnregisterRevokes = true;
  static constexpr bool kMappingSurvivesOwner = false;
  static std::unique_ptr<Transport> Make() {
    auto t = Transport::Create(FakeVerbs(Config::Fabric()), Config::Options());
    MC_ASSERT(t.ok(), "fake RDMA transport must start");
    return std::move(*t);
  }
  static absl::StatusOr<transport::KitBuffer> Allocate(uint64_t length) {
    return transport::AllocateHeapKitBuffer(length);
  }
};

}  // namespace mooncake::transport_internal

#endif  // MOONCAKE_TRANSPORT_INTERNAL_FAKE_RDMA_KIT_H_
