// The PD connectors end to end over real transports: prefill and decode
// connectors with their own TCP (or SHM) transports and RPC servers on
// loopback, every moved byte checked against an element-by-element reference;
// layouts, page sizes and TP degrees that differ between the sides; the
// lifecycle's failure paths (a prefill process killed mid-transfer, timeouts,
// cancels, aborts, bad pulls).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/auth.h"
#include "mooncake/connector/decode_connector.h"
#include "mooncake/connector/kv_layout.h"
#include "mooncake/connector/prefill_connector.h"
#include "mooncake/transport/shm_transport.h"
#include "mooncake/transport/tcp_transport.h"

namespace mooncake::connector {
namespace {

using transport::ShmTransport;
using transport::TcpTransport;

KvLayout Layout(KvOrder order, uint32_t block_size, uint64_t num_blocks, uint32_t first_head = 0,
                uint32_t heads = 4) {
  return KvLayout{.order = order,
                  .dtype = KvDtype::kFloat16,
                  .num_layers = 4,
                  .num_parts = 2,
                  .block_size = block_size,
                  .num_kv_heads = heads,
                  .head_dim = 8,
                  .num_blocks = num_blocks,
                  .first_head = first_head,
                  .total_kv_heads = 4};
}

// One side's KV memory: a region per layout region.
struct Cache {
  KvLayout layout;
  std::vector<std::vector<std::byte>> regions;

  explicit Cache(KvLayout l, uint64_t seed = 0) : layout(l) {
    regions.assign(l.NumRegions(), std::vector<std::byte>(l.RegionBytes()));
    std::mt19937_64 rng(seed);
    for (auto& r : regions) {
      for (auto& b : r) b = static_cast<std::byte>(seed == 0 ? 0 : rng());
    }
  }
  std::vector<const std::byte*> ConstBases() const {
    std::vector<const std::byte*> v;
    for (const auto& r : regions) v.push_back(r.data());
    return v;
  }
  std::vector<std::byte*> Bases() {
    std::vector<std::byte*> v;
    for (auto& r : regions) v.push_back(r.data());
    return v;
  }
  const std::byte* Head(uint32_t layer, uint32_t part, uint64_t block, uint32_t row,
                        uint32_t global_head) const {
    const ByteRange at =
        layout.ElementLocation(layer, part, block, row, global_head - layout.first_head, 0);
    return regions[at.region].data() + at.offset;
  }
};

// Mismatched (token, layer, part, head) vectors between `src` and `dst` for
// the first `tokens` tokens and the heads both hold.
uint64_t Mismatches(const Cache& src, const std::vector<uint64_t>& src_blocks, const Cache& dst,
                    const std::vector<uint64_t>& dst_blocks, uint64_t tokens) {
  const HeadSlice both = Intersect(src.layout.Heads(), dst.layout.Heads());
  uint64_t bad = 0;
  for (uint64_t t = 0; t < tokens; ++t) {
    const uint64_t sb = src_blocks[t / src.layout.block_size];
    const uint64_t db = dst_blocks[t / dst.layout.block_size];
    for (uint32_t layer = 0; layer < src.layout.num_layers; ++layer) {
      for (uint32_t part = 0; part < 2; ++part) {
        for (uint32_t h = both.first_head; h < both.end(); ++h) {
          bad += std::memcmp(src.Head(layer, part, sb, t % src.layout.block_size, h),
                             dst.Head(layer, part, db, t % dst.layout.block_size, h),
                             src.layout.HeadBytes()) != 0;
        }
      }
    }
  }
  return bad;
}

std::vector<uint64_t> Shuffled(uint64_t count, uint64_t num_blocks, uint64_t seed) {
  std::vector<uint64_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  ids.resize(count);
  return ids;
}

std::vector<uint64_t> Consecutive(uint64_t first, uint64_t count) {
  std::vector<uint64_t> ids(count);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// Waits until the prefill connector hands `request_id` back; returns its status.
template <typename P>
absl::Status AwaitReleased(P& prefill, const std::string& request_id,
                           absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    for (ReleasedRequest& r : prefill.TakeReleased()) {
      if (r.request_id == request_id) return r.status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return absl::DeadlineExceededError("never released");
}

struct Side {
  std::unique_ptr<TcpTransport> transport;
  Side() {
    auto t = TcpTransport::Create({});
    MC_ASSERT(t.ok(), "tcp transport");
    transport = std::move(*t);
  }
};

// A full PD transfer: prefill ranks (one layout each) to decode ranks.
void RunTransfer(const std::vector<KvLayout>& src_layouts, const std::vector<KvLayout>& dst_layouts,
                 uint64_t tokens, bool shuffle, uint64_t* ranges_out = nullptr) {
  const std::string id = "req-1";
  std::vector<Side> prefill_sides(src_layouts.size()), decode_sides(dst_layouts.size());
  std::vector<std::unique_ptr<Cache>> src, dst;
  std::vector<std::unique_ptr<PrefillConnector<TcpTransport>>> pcs;
  std::vector<std::unique_ptr<DecodeConnector<TcpTransport>>> dcs;
  std::vector<std::string> sources;
  std::vector<std::vector<uint64_t>> src_blocks, dst_blocks;
  for (size_t i = 0; i < src_layouts.size(); ++i) {
    src.push_back(std::make_unique<Cache>(src_layouts[i], 7));  // same seed: same KV per rank
    const uint64_t n = (tokens + src_layouts[i].block_size - 1) / src_layouts[i].block_size;
    src_blocks.push_back(shuffle ? Shuffled(n, src_layouts[i].num_blocks, 11) : Consecutive(3, n));
    auto pc = PrefillConnector<TcpTransport>::Create(prefill_sides[i].transport.get(),
                                                     src_layouts[i], src[i]->ConstBases());
    ASSERT_TRUE(pc.ok()) << pc.status();
    sources.push_back((*pc)->rpc_address());
    pcs.push_back(std::move(*pc));
  }
  for (size_t i = 0; i < dst_layouts.size(); ++i) {
    dst.push_back(std::make_unique<Cache>(dst_layouts[i]));
    const uint64_t n = (tokens + dst_layouts[i].block_size - 1) / dst_layouts[i].block_size;
    dst_blocks.push_back(shuffle ? Shuffled(n, dst_layouts[i].num_blocks, 13 + i)
                                 : Consecutive(5, n));
    DecodeConnectorOptions o;
    o.tp_rank = static_cast<uint32_t>(i);
    o.tp_ranks = static_cast<uint32_t>(dst_layouts.size());
    auto dc = DecodeConnector<TcpTransport>::Create(decode_sides[i].transport.get(), dst_layouts[i],
                                                    dst[i]->Bases(), o);
    ASSERT_TRUE(dc.ok()) << dc.status();
    dcs.push_back(std::move(*dc));
  }
  // Decode pulls first (the usual order); the prefill adds and saves after.
  for (size_t i = 0; i < dcs.size(); ++i) {
    ASSERT_TRUE(dcs[i]->StartRequest(id, sources, dst_blocks[i], tokens).ok());
  }
  for (size_t i = 0; i < pcs.size(); ++i) {
    ASSERT_TRUE(pcs[i]->AddRequest(id, src_blocks[i], tokens).ok());
    for (uint32_t layer = 0; layer < src_layouts[i].num_layers; ++layer) {
      ASSERT_TRUE(pcs[i]->SaveLayer(id, layer).ok());
    }
  }
  for (size_t i = 0; i < dcs.size(); ++i) {
    for (uint32_t layer = 0; layer < dst_layouts[i].num_layers; ++layer) {
      ASSERT_TRUE(dcs[i]->WaitLayer(id, layer, absl::Seconds(20)).ok());
    }
    ASSERT_TRUE(dcs[i]->WaitAll(id, absl::Seconds(20)).ok());
    const EndResult end = dcs[i]->End(id);
    EXPECT_TRUE(end.status.ok()) << end.status;
    EXPECT_TRUE(end.reusable_now);
  }
  for (size_t i = 0; i < pcs.size(); ++i) {
    EXPECT_TRUE(AwaitReleased(*pcs[i], id).ok());
    EXPECT_EQ(pcs[i]->stats().blocks_held, 0u);
    EXPECT_EQ(pcs[i]->stats().requests_completed, 1u);
    if (ranges_out != nullptr) *ranges_out += pcs[i]->stats().ranges_sent;
  }
  // Every decode rank holds every head it shares with some prefill rank.
  for (size_t d = 0; d < dst.size(); ++d) {
    for (size_t s = 0; s < src.size(); ++s) {
      EXPECT_EQ(Mismatches(*src[s], src_blocks[s], *dst[d], dst_blocks[d], tokens), 0u)
          << "prefill rank " << s << " -> decode rank " << d;
    }
  }
}

TEST(PdConnectorTest, IdenticalLayoutsMoveEveryByteWithMergedRanges) {
  uint64_t ranges = 0;
  RunTransfer({Layout(KvOrder::kLayerFirst, 16, 64)}, {Layout(KvOrder::kLayerFirst, 16, 64)},
              /*tokens=*/500, /*shuffle=*/false, &ranges);
  // Consecutive blocks on both sides: one range per (layer, part).
  EXPECT_EQ(ranges, 4u * 2u);
}

TEST(PdConnectorTest, SglangPrefillToVllmDecodeWithOtherPageSizes) {
  RunTransfer({Layout(KvOrder::kPageFirst, 32, 32)}, {Layout(KvOrder::kLayerFirst, 16, 64)}, 700,
              /*shuffle=*/true);
  RunTransfer({Layout(KvOrder::kLayerFirst, 8, 128)}, {Layout(KvOrder::kPageFirst, 32, 40)}, 333,
              /*shuffle=*/true);
}

TEST(PdConnectorTest, PrefillTp2ToDecodeTp1GathersHeadSlices) {
  RunTransfer(
      {Layout(KvOrder::kLayerFirst, 16, 64, 0, 2), Layout(KvOrder::kLayerFirst, 16, 64, 2, 2)},
      {Layout(KvOrder::kPageFirst, 16, 64)}, 400, /*shuffle=*/true);
}

TEST(PdConnectorTest, PrefillTp1ToDecodeTp2ScattersHeadSlices) {
  RunTransfer({Layout(KvOrder::kLayerFirst, 16, 64)},
              {Layout(KvOrder::kLayerFirstHeadMajor, 32, 32, 0, 2),
               Layout(KvOrder::kLayerFirst, 16, 64, 2, 2)},
              450, /*shuffle=*/true);
}

TEST(PdConnectorTest, LayerWiseProgressIsVisiblePerLayer) {
  Side ps, ds;
  Cache src(Layout(KvOrder::kLayerFirst, 16, 32), 3), dst(Layout(KvOrder::kLayerFirst, 16, 32));
  auto pc =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases());
  auto dc = DecodeConnector<TcpTransport>::Create(ds.transport.get(), dst.layout, dst.Bases());
  ASSERT_TRUE(pc.ok() && dc.ok());
  const auto blocks = Consecutive(0, 4);
  ASSERT_TRUE((*pc)->AddRequest("r", blocks, 64).ok());  // prefill first this time
  ASSERT_TRUE((*dc)->StartRequest("r", {(*pc)->rpc_address()}, blocks, 64).ok());
  ASSERT_TRUE((*pc)->SaveLayer("r", 0).ok());
  EXPECT_TRUE((*dc)->WaitLayer("r", 0, absl::Seconds(10)).ok());
  // Layer 1 is not computed yet: waiting for it times out, and is bounded.
  const absl::Time t0 = absl::Now();
  EXPECT_EQ((*dc)->WaitLayer("r", 1, absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  for (uint32_t l = 1; l < 4; ++l) ASSERT_TRUE((*pc)->SaveLayer("r", l).ok());
  EXPECT_TRUE((*dc)->WaitAll("r", absl::Seconds(10)).ok());
  EXPECT_TRUE((*dc)->End("r").status.ok());
  EXPECT_TRUE(AwaitReleased(**pc, "r").ok());
}

TEST(PdConnectorTest, ShmTransportMovesTheSameBytes) {
  auto pt = ShmTransport::Create({});
  auto dt = ShmTransport::Create({});
  ASSERT_TRUE(pt.ok() && dt.ok());
  const KvLayout layout = Layout(KvOrder::kLayerFirst, 16, 32);
  Cache src(layout, 5);
  // SHM segments are memfd memory: the decode cache lives in SharedMemory.
  std::vector<transport::SharedMemory> shm;
  std::vector<std::byte*> bases;
  for (uint32_t i = 0; i < layout.NumRegions(); ++i) {
    auto m = transport::SharedMemory::Create(layout.RegionBytes());
    ASSERT_TRUE(m.ok()) << m.status();
    bases.push_back(static_cast<std::byte*>(m->data()));
    shm.push_back(std::move(*m));
  }
  auto pc = PrefillConnector<ShmTransport>::Create(pt->get(), layout, src.ConstBases());
  DecodeConnectorOptions o;
  o.location = transport::MemoryLocation::SharedMemory();
  auto dc = DecodeConnector<ShmTransport>::Create(dt->get(), layout, bases, o);
  ASSERT_TRUE(pc.ok()) << pc.status();
  ASSERT_TRUE(dc.ok()) << dc.status();
  const auto sb = Shuffled(8, 32, 1), db = Shuffled(8, 32, 2);
  ASSERT_TRUE((*dc)->StartRequest("s", {(*pc)->rpc_address()}, db, 120).ok());
  ASSERT_TRUE((*pc)->AddRequest("s", sb, 120).ok());
  for (uint32_t l = 0; l < 4; ++l) ASSERT_TRUE((*pc)->SaveLayer("s", l).ok());
  ASSERT_TRUE((*dc)->WaitAll("s", absl::Seconds(10)).ok());
  Cache dst(layout);
  for (uint32_t i = 0; i < layout.NumRegions(); ++i) {
    std::memcpy(dst.regions[i].data(), bases[i], layout.RegionBytes());
  }
  EXPECT_EQ(Mismatches(src, sb, dst, db, 120), 0u);
  EXPECT_TRUE((*dc)->End("s").reusable_now);
}

TEST(PdConnectorTest, UnpulledRequestIsReleasedAfterTheTimeout) {
  Side ps;
  Cache src(Layout(KvOrder::kLayerFirst, 16, 32), 3);
  PrefillConnectorOptions o;
  o.request_timeout_ms = 200;
  auto pc =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases(), o);
  ASSERT_TRUE(pc.ok());
  ASSERT_TRUE((*pc)->AddRequest("lost", Consecutive(0, 4), 50).ok());
  for (uint32_t l = 0; l < 4; ++l) ASSERT_TRUE((*pc)->SaveLayer("lost", l).ok());
  EXPECT_EQ((*pc)->stats().blocks_held, 4u);
  EXPECT_EQ(AwaitReleased(**pc, "lost").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*pc)->stats().blocks_held, 0u);
  EXPECT_EQ((*pc)->stats().requests_expired, 1u);
  // A pull that comes after the request ended is refused, not left waiting.
  Side ds;
  Cache dst(src.layout);
  auto dc = DecodeConnector<TcpTransport>::Create(ds.transport.get(), dst.layout, dst.Bases());
  ASSERT_TRUE(dc.ok());
  EXPECT_FALSE((*dc)->StartRequest("lost", {(*pc)->rpc_address()}, Consecutive(0, 4), 50).ok());
  EXPECT_EQ((*dc)->stats().requests_active, 0u);
}

// The timeout counts from the last saved layer: a prefill that computes
// longer than the timeout still sends every layer.
TEST(PdConnectorTest, ComputeLongerThanTheTimeoutDoesNotExpireTheRequest) {
  Side ps, ds;
  Cache src(Layout(KvOrder::kLayerFirst, 16, 32), 3), dst(Layout(KvOrder::kLayerFirst, 16, 32));
  PrefillConnectorOptions o;
  o.request_timeout_ms = 100;
  auto pc =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases(), o);
  auto dc = DecodeConnector<TcpTransport>::Create(ds.transport.get(), dst.layout, dst.Bases());
  ASSERT_TRUE(pc.ok() && dc.ok());
  const auto blocks = Consecutive(0, 4);
  ASSERT_TRUE((*pc)->AddRequest("slow", blocks, 64).ok());
  ASSERT_TRUE((*dc)->StartRequest("slow", {(*pc)->rpc_address()}, blocks, 64).ok());
  for (uint32_t l = 0; l < 4; ++l) {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));  // a layer's compute
    ASSERT_TRUE((*pc)->SaveLayer("slow", l).ok()) << "layer " << l;
  }
  EXPECT_TRUE((*dc)->WaitAll("slow", absl::Seconds(10)).ok());
  EXPECT_TRUE((*dc)->End("slow").status.ok());
  EXPECT_TRUE(AwaitReleased(**pc, "slow").ok());
  EXPECT_EQ((*pc)->stats().requests_expired, 0u);
  EXPECT_EQ(Mismatches(src, blocks, dst, blocks, 64), 0u);
}

TEST(PdConnectorTest, DecodeCancelReleasesPrefillBlocksAndAbortReachesDecode) {
  Side ps, ds;
  Cache src(Layout(KvOrder::kLayerFirst, 16, 32), 3), dst(Layout(KvOrder::kLayerFirst, 16, 32));
  auto pc =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases());
  auto dc = DecodeConnector<TcpTransport>::Create(ds.transport.get(), dst.layout, dst.Bases());
  ASSERT_TRUE(pc.ok() && dc.ok());
  const auto blocks = Consecutive(0, 4);
  // Cancel from the decode side: confirmed, so the blocks are reusable now.
  ASSERT_TRUE((*dc)->StartRequest("c", {(*pc)->rpc_address()}, blocks, 64).ok());
  ASSERT_TRUE((*pc)->AddRequest("c", blocks, 64).ok());
  ASSERT_TRUE((*pc)->SaveLayer("c", 0).ok());
  const EndResult end = (*dc)->End("c");
  EXPECT_FALSE(end.status.ok());
  EXPECT_TRUE(end.reusable_now);
  EXPECT_EQ(AwaitReleased(**pc, "c").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ((*pc)->stats().blocks_held, 0u);
  // Abort on the prefill side: the decode side hears it instead of waiting.
  ASSERT_TRUE((*dc)->StartRequest("a", {(*pc)->rpc_address()}, blocks, 64).ok());
  ASSERT_TRUE((*pc)->AddRequest("a", blocks, 64).ok());
  ASSERT_TRUE((*pc)->Abort("a", "out of memory").ok());
  const absl::Status s = (*dc)->WaitAll("a", absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_TRUE((*dc)->End("a").reusable_now);
  EXPECT_EQ(AwaitReleased(**pc, "a").code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*pc)->stats().requests_aborted, 1u);
}

TEST(PdConnectorTest, BadRequestsAreRefusedWithClearErrors) {
  Side ps, ds;
  Cache src(Layout(KvOrder::kLayerFirst, 16, 32), 3), dst(Layout(KvOrder::kLayerFirst, 16, 32));
  auto pc =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases());
  auto dc = DecodeConnector<TcpTransport>::Create(ds.transport.get(), dst.layout, dst.Bases());
  ASSERT_TRUE(pc.ok() && dc.ok());
  EXPECT_EQ((*pc)->AddRequest("x", {32}, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*pc)->AddRequest("x", {0}, 17).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*pc)->AddRequest("", {0}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*pc)->SaveLayer("nope", 0).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*pc)->AddRequest("x", {0}, 10).ok());
  EXPECT_EQ((*pc)->AddRequest("x", {0}, 10).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ((*pc)->SaveLayer("x", 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*dc)->WaitLayer("nope", 0, absl::Milliseconds(1)).code(), absl::StatusCode::kNotFound);
  // Nothing listens there: UNAVAILABLE at once, nothing held.
  EXPECT_FALSE((*dc)->StartRequest("y", {"127.0.0.1:1"}, {0}, 10).ok());
  EXPECT_EQ((*dc)->stats().requests_active, 0u);
  // A decode cache of another dtype cannot be converted: refused at the pull.
  KvLayout other = dst.layout;
  other.dtype = KvDtype::kBFloat16;
  Side os;
  Cache odst(other);
  auto odc = DecodeConnector<TcpTransport>::Create(os.transport.get(), other, odst.Bases());
  ASSERT_TRUE(odc.ok());
  const absl::Status s = (*odc)->StartRequest("x", {(*pc)->rpc_address()}, {0}, 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// With a token file on both sides (the RPC servers, the calls and the
// transport), a transfer moves every byte; a decode side without the token,
// or with another cluster's, is refused at its pull (UNAUTHENTICATED) and
// nothing reaches its cache; the prefill side still holds the request.
TEST(PdConnectorTest, AuthenticatedConnectorsServeOnlyPeersWithTheToken) {
  auto creds = [](const char* secret) {
    auto c = auth::Credentials::Parse(absl::StrCat("cluster ", secret, "\n"), "test");
    MC_ASSERT(c.ok(), "test credentials");
    return std::make_shared<const auth::Credentials>(*std::move(c));
  };
  const auto ours = creds("0123456789abcdef0123456789abcdef");
  const auto theirs = creds("fedcba9876543210fedcba9876543210");
  auto transport_with = [](std::shared_ptr<const auth::Credentials> c) {
    TcpTransport::Options o;
    o.auth = std::move(c);
    auto t = TcpTransport::Create(o);
    MC_ASSERT(t.ok(), "tcp transport");
    return std::move(*t);
  };
  const KvLayout layout = Layout(KvOrder::kLayerFirst, 16, 64);
  const uint64_t tokens = 100;
  Cache src(layout, 7);
  auto pt = transport_with(ours);
  PrefillConnectorOptions po;
  po.auth = ours;
  auto pc = PrefillConnector<TcpTransport>::Create(pt.get(), layout, src.ConstBases(), po);
  ASSERT_TRUE(pc.ok()) << pc.status();
  const std::vector<std::string> sources = {(*pc)->rpc_address()};
  const std::vector<uint64_t> src_blocks = Consecutive(3, 7), dst_blocks = Consecutive(5, 7);

  // A decode side on `dst` with `c`, and the transport it needs (declared first).
  struct Decode {
    std::unique_ptr<TcpTransport> transport;
    std::unique_ptr<DecodeConnector<TcpTransport>> connector;
  };
  auto decode_with = [&](std::shared_ptr<const auth::Credentials> c, Cache& dst) {
    Decode d{transport_with(c), nullptr};
    DecodeConnectorOptions o;
    o.auth = std::move(c);
    auto dc = DecodeConnector<TcpTransport>::Create(d.transport.get(), layout, dst.Bases(), o);
    MC_ASSERT(dc.ok(), "decode connector");
    d.connector = std::move(*dc);
    return d;
  };

  for (const auto& wrong : {std::shared_ptr<const auth::Credentials>(), theirs}) {
    Cache dst(layout);
    Decode d = decode_with(wrong, dst);
    const absl::Status s = d.connector->StartRequest("req-x", sources, dst_blocks, tokens);
    EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
    const uint64_t heads = layout.Heads().end() - layout.Heads().first_head;
    EXPECT_EQ(Mismatches(src, src_blocks, dst, dst_blocks, tokens),
              tokens * layout.num_layers * 2 * heads)  // every head of K and V still unset
        << "bytes reached an unauthenticated decode";
  }
  EXPECT_EQ((*pc)->stats().pulls_waiting, 0u);

  Cache dst(layout);
  Decode d = decode_with(ours, dst);
  const std::unique_ptr<DecodeConnector<TcpTransport>>& dc = d.connector;
  ASSERT_TRUE(dc->StartRequest("req-1", sources, dst_blocks, tokens).ok());
  ASSERT_TRUE((*pc)->AddRequest("req-1", src_blocks, tokens).ok());
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    ASSERT_TRUE((*pc)->SaveLayer("req-1", layer).ok());
  }
  ASSERT_TRUE(dc->WaitAll("req-1", absl::Seconds(20)).ok());
  EXPECT_TRUE(dc->End("req-1").status.ok());
  EXPECT_EQ(Mismatches(src, src_blocks, dst, dst_blocks, tokens), 0u);
}

// Create failing half way (memory the transport refuses, a port in use)
// returns the error and cleans up what it had set up.
TEST(PdConnectorTest, CreateThatFailsHalfWayReturnsItsError) {
  auto shm = ShmTransport::Create({});
  ASSERT_TRUE(shm.ok());
  Cache heap(Layout(KvOrder::kLayerFirst, 16, 8));  // not memfd memory: SHM refuses it
  DecodeConnectorOptions d;
  d.location = transport::MemoryLocation::SharedMemory();
  auto dc = DecodeConnector<ShmTransport>::Create(shm->get(), heap.layout, heap.Bases(), d);
  EXPECT_FALSE(dc.ok());
  Side ps;
  Cache src(Layout(KvOrder::kLayerFirst, 16, 8), 1);
  auto first =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases());
  ASSERT_TRUE(first.ok());
  PrefillConnectorOptions o;
  const std::string address = (*first)->rpc_address();
  o.rpc_port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  auto second =
      PrefillConnector<TcpTransport>::Create(ps.transport.get(), src.layout, src.ConstBases(), o);
  EXPECT_FALSE(second.ok());
}

// A prefill process killed with SIGKILL after its first layer: the decode
// side's wait for the next layer ends with UNAVAILABLE within the probe time,
// and End says the blocks are not reusable until the source's timeout.
TEST(PdConnectorTest, KilledPrefillProcessFailsTheWaitInsteadOfHanging) {
  int to_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  const KvLayout layout = Layout(KvOrder::kLayerFirst, 16, 32);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_parent[0]);
    Side ps;
    Cache src(layout, 3);
    auto pc = PrefillConnector<TcpTransport>::Create(ps.transport.get(), layout, src.ConstBases());
    if (!pc.ok()) _exit(2);
    const std::string address = (*pc)->rpc_address() + "\n";
    (void)!::write(to_parent[1], address.data(), address.size());
    // Adds the request once pulled, saves layer 0 only, then hangs until killed.
    while ((*pc)->AddRequest("k", Consecutive(0, 4), 64).ok() == false) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    (void)(*pc)->SaveLayer("k", 0);
    for (;;) ::pause();
  }
  ::close(to_parent[1]);
  std::string address;
  char c;
  while (::read(to_parent[0], &c, 1) == 1 && c != '\n') address += c;
  ::close(to_parent[0]);
  ASSERT_FALSE(address.empty());
  Side ds;
  Cache dst(layout);
  auto dc = DecodeConnector<TcpTransport>::Create(ds.transport.get(), layout, dst.Bases());
  ASSERT_TRUE(dc.ok());
  ASSERT_TRUE((*dc)->StartRequest("k", {address}, Consecutive(0, 4), 64).ok());
  EXPECT_TRUE((*dc)->WaitLayer("k", 0, absl::Seconds(10)).ok());
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  const absl::Time t0 = absl::Now();
  const absl::Status s = (*dc)->WaitLayer("k", 1, absl::Seconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  const EndResult end = (*dc)->End("k");
  EXPECT_FALSE(end.reusable_now);
  EXPECT_GT(end.reusable_after, absl::Now());
  EXPECT_EQ((*dc)->stats().cancels_unconfirmed, 1u);
}

}  // namespace
}  // namespace mooncake::connector
