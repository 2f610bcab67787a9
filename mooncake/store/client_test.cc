#include "mooncake/store/client.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/base/hash.h"
#include "mooncake/base/mutex.h"
#include "mooncake/qos/shm_arbiter.h"
#include "mooncake/store/client/testing/counting_channel.h"
#include "mooncake/store/client/testing/fake_master.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_service.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "mooncake/store/rpc/tcp_server.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake::client {
namespace {

using store_testing::CountingChannel;
using store_testing::FakeMaster;
using store_testing::FakeMasterOptions;
using Channel = CountingChannel<rpc::InProcessChannel>;
using TestClient = Client<Channel>;
using TestWorker = worker::Worker<rpc::InProcessChannel>;

// Workers here heartbeat only by hand; the fake clock jumps over leases.
FakeMasterOptions NoExpiry(FakeMasterOptions o) {
  o.heartbeat_timeout_ms = uint64_t{1} << 40;
  return o;
}

// A master, `workers` workers and clients made on demand, all in process.
class Store {
 public:
  explicit Store(size_t workers = 2, FakeMasterOptions mo = {}, uint64_t segment_bytes = 1 << 20)
      : master_(NoExpiry(std::move(mo)), &clock_) {
    EXPECT_TRUE(master_.RegisterOn(&registry_).ok());
    inproc_ = std::make_unique<rpc::InProcessChannel>(&registry_);
    for (size_t i = 0; i < workers; ++i) {
      worker::WorkerOptions o;
      o.segment_bytes = segment_bytes;
      o.heartbeat_thread = false;
      auto w = TestWorker::Start(o, inproc_.get());
      EXPECT_TRUE(w.ok()) << w.status();
      workers_.push_back(std::move(*w));
    }
  }
  std::unique_ptr<TestClient> NewClient(ClientOptions o = {}) {
    channels_.push_back(std::make_unique<Channel>(inproc_.get()));
    o.clock = &clock_;
    auto c = TestClient::Create(o, channels_.back().get());
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  Channel& channel(size_t i) { return *channels_[i]; }
  FakeMaster& master() { return master_; }
  FakeClock& clock() { return clock_; }
  std::vector<std::unique_ptr<TestWorker>>& workers() { return workers_; }

 private:
  FakeClock clock_{1'000'000'000};
  FakeMaster master_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<rpc::InProcessChannel> inproc_;
  std::vector<std::unique_ptr<TestWorker>> workers_;
  std::vector<std::unique_ptr<Channel>> channels_;
};

// An abandoned worker's memfd stays mapped by SHM peers (by design, see
// shm_transport.h), so SHM keeps reading it; these tests watch the failure
// on the transports that see a worker go: local and TCP.
ClientOptions NoShm() {
  ClientOptions o;
  o.use_shm = false;
  return o;
}

std::string Value(size_t n, char seed) {
  std::string v(n, '\0');
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(seed + i * 31);
  return v;
}

TEST(Client, PutGetExistsRemove) {
  Store s;
  auto c = s.NewClient();
  const std::string v = Value(10'000, 'a');
  ASSERT_TRUE(c->Put("k", v).ok());
  EXPECT_EQ(*c->Get("k"), v);
  std::string buf(20'000, '\0');
  auto n = c->GetInto("k", buf.data(), buf.size());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(buf.substr(0, *n), v);
  EXPECT_TRUE(*c->Exists("k"));
  ASSERT_TRUE(c->Remove("k").ok());
  EXPECT_FALSE(*c->Exists("k"));
  EXPECT_EQ(c->Get("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->Remove("k").code(), absl::StatusCode::kNotFound);
}

TEST(Client, HotKeyFromTheCacheMakesNoMasterRpc) {
  Store s;
  auto c = s.NewClient();
  ASSERT_TRUE(c->Put("hot", Value(4096, 'h')).ok());
  ASSERT_TRUE(c->Get("hot").ok());  // fills the cache
  const uint64_t channel_before = s.channel(0).total();
  const uint64_t master_before = s.master().total_calls();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(*c->Get("hot"), Value(4096, 'h'));
  EXPECT_EQ(s.channel(0).total(), channel_before) << "no RPC left the client";
  EXPECT_EQ(s.master().total_calls(), master_before) << "none reached the master";
  EXPECT_EQ(c->stats().cache_hits, 100u);
  // Past the lease the next get asks again, and gets a new lease.
  s.clock().AdvanceMs(2'000);
  ASSERT_TRUE(c->Get("hot").ok());
  EXPECT_EQ(s.master().calls(rpc::GetReplicasMethod::kId), 2u);
  GetOptions bypass;
  bypass.bypass_cache = true;
  ASSERT_TRUE(c->Get("hot", bypass).ok());
  EXPECT_EQ(s.master().calls(rpc::GetReplicasMethod::kId), 3u);
}

TEST(Client, OwnRemoveAndPutAreSeenAtOnce) {
  Store s;
  auto c = s.NewClient();
  ASSERT_TRUE(c->Put("k", "one").ok());
  ASSERT_EQ(*c->Get("k"), "one");
  ASSERT_TRUE(c->Remove("k").ok());
  EXPECT_EQ(c->Get("k").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(c->Put("k", "two").ok());
  EXPECT_EQ(*c->Get("k"), "two");
}

// Another client's remove: the cached lease keeps the old space intact, so a
// cached get returns the old, whole value (never the new object's bytes);
// once the lease ends the removal shows.
TEST(Client, OtherClientsRemoveShowsWithinALeaseAndNeverMixesBytes) {
  Store s(1);
  auto a = s.NewClient();
  auto b = s.NewClient();
  ASSERT_TRUE(a->Put("k", Value(8192, 'x')).ok());
  ASSERT_EQ(*a->Get("k"), Value(8192, 'x'));
  ASSERT_TRUE(b->Remove("k").ok());
  ASSERT_TRUE(b->Put("k", Value(8192, 'y')).ok());
  ASSERT_TRUE(b->Put("filler", Value(8192, 'z')).ok());
  EXPECT_EQ(*a->Get("k"), Value(8192, 'x')) << "the cached version, whole";
  s.clock().AdvanceMs(2'000);
  EXPECT_EQ(*a->Get("k"), Value(8192, 'y'));
}

TEST(Client, LeasedObjectsAreNotEvictedAndEvictionShows) {
  Store s;
  auto c = s.NewClient();
  ASSERT_TRUE(c->Put("k", "v").ok());
  ASSERT_TRUE(c->Get("k").ok());
  EXPECT_EQ(s.master().Evict("k").code(), absl::StatusCode::kFailedPrecondition);
  s.clock().AdvanceMs(2'000);
  ASSERT_TRUE(s.master().Evict("k").ok());
  EXPECT_EQ(c->Get("k").status().code(), absl::StatusCode::kNotFound);
}

TEST(Client, DestroyingAClientReleasesItsLeases) {
  Store s;
  {
    auto c = s.NewClient();
    ASSERT_TRUE(c->Put("k", "v").ok());
    ASSERT_TRUE(c->Get("k").ok());
    EXPECT_EQ(s.master().live_leases(), 1u);
  }
  EXPECT_EQ(s.master().live_leases(), 0u);
  EXPECT_TRUE(s.master().Evict("k").ok());
}

TEST(Client, CorruptReplicaFallsBackAndAllCorruptIsDataLoss) {
  Store s(2);
  auto c = s.NewClient();
  PutOptions two;
  two.replica_count = 2;
  const std::string v = Value(1000, 'c');
  ASSERT_TRUE(c->Put("k", v, two).ok());
  // Corrupt the copy on worker 0 (offset 0 of its only segment).
  static_cast<char*>(s.workers()[0]->segments()[0].data)[10] ^= 1;
  EXPECT_EQ(*c->Get("k"), v);
  EXPECT_EQ(c->stats().checksum_mismatches, 1u);
  static_cast<char*>(s.workers()[1]->segments()[0].data)[10] ^= 1;
  GetOptions bypass;
  bypass.bypass_cache = true;
  EXPECT_EQ(c->Get("k", bypass).status().code(), absl::StatusCode::kDataLoss);
}

// Puts `v` as "k" with a replica on each of the two workers of `s`, reads
// it once (cached), then corrupts worker 0's copy: a read that tries worker
// 0 first falls back to worker 1 and counts a checksum mismatch.
void PutOnBothCorruptTheFirst(Store& s, TestClient& c, const std::string& v) {
  PutOptions two;
  two.replica_count = 2;
  ASSERT_TRUE(c.Put("k", v, two).ok());
  ASSERT_EQ(*c.Get("k"), v);
  static_cast<char*>(s.workers()[0]->segments()[0].data)[10] ^= 1;
}

TEST(Client, CachedReadsRotateOverTheReplicas) {
  Store s(2);
  auto c = s.NewClient(NoShm());
  const std::string v = Value(1000, 'r');
  ASSERT_NO_FATAL_FAILURE(PutOnBothCorruptTheFirst(s, *c, v));
  // One cached read in two starts on worker 0 and falls back to worker 1.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(*c->Get("k"), v) << i;
  EXPECT_EQ(c->stats().cache_hits, 10u);
  EXPECT_EQ(c->stats().checksum_mismatches, 5u);
}

TEST(Client, ReadsInFlightToAWorkerSteerCachedReadsToAnotherReplica) {
  Store s(2);
  auto c = s.NewClient(NoShm());
  const std::string v = Value(1000, 'f');
  ASSERT_NO_FATAL_FAILURE(PutOnBothCorruptTheFirst(s, *c, v));
  client::InFlightReads& flying = client::InFlightReads::Process();
  const std::string busy = s.workers()[0]->worker_id();
  const std::array<client::InFlightReads::Read, 1> elsewhere = {{{busy, 1 << 20}}};
  {
    // Another client of this process is reading 1 MiB from worker 0.
    const client::InFlightScope scope(&flying, elsewhere);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(*c->Get("k"), v) << i;
    EXPECT_EQ(c->stats().checksum_mismatches, 0u) << "every read went to worker 1";
    EXPECT_EQ(flying.Bytes(busy), uint64_t{1} << 20) << "the gets' own reads have settled";
  }
  EXPECT_EQ(flying.Bytes(busy), 0u);
  // Nothing in flight: worker 0, which this client read least lately, is
  // tried first again.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(*c->Get("k"), v) << i;
  EXPECT_GT(c->stats().checksum_mismatches, 0u);
  EXPECT_EQ(flying.size(), 0u);
}

TEST(Client, CachedReadReportsStopWhenTheMasterDoesNotKnowThem) {
  Store s(1);  // the fake master has no TouchObjects: UNIMPLEMENTED
  ClientOptions o = NoShm();
  o.cached_read_report_ms = 1;
  auto c = s.NewClient(o);
  ASSERT_TRUE(c->Put("k", "v").ok());
  ASSERT_TRUE(c->Get("k").ok());  // cached
  ASSERT_TRUE(c->Get("k").ok());  // a cached read, not due yet
  s.clock().AdvanceMs(2);
  ASSERT_TRUE(c->Get("k").ok());  // due: reported, refused
  EXPECT_EQ(s.channel(0).calls(rpc::TouchObjectsMethod::kId), 1u);
  for (int i = 0; i < 3; ++i) {
    s.clock().AdvanceMs(2);
    ASSERT_TRUE(c->Get("k").ok());
  }
  EXPECT_EQ(s.channel(0).calls(rpc::TouchObjectsMethod::kId), 1u) << "reporting turned off";
  EXPECT_EQ(c->stats().cache_hits, 5u);
}

TEST(Client, GetFallsBackWhenAWorkerIsGone) {
  Store s(2);
  auto c = s.NewClient(NoShm());
  PutOptions two;
  two.replica_count = 2;
  ASSERT_TRUE(c->Put("k", Value(5000, 'w'), two).ok());
  ASSERT_TRUE(c->Get("k").ok());  // cached: replicas on both workers
  s.workers()[0]->Abandon();      // gone without telling the master
  // Cached reads rotate over the replicas: one of two starts on worker 0.
  EXPECT_EQ(*c->Get("k"), Value(5000, 'w'));
  EXPECT_EQ(*c->Get("k"), Value(5000, 'w'));
  EXPECT_GE(c->stats().replica_fallbacks, 1u);
}

TEST(Client, PutWithEveryWorkerGoneFailsCleanly) {
  Store s(1);
  auto c = s.NewClient(NoShm());
  ASSERT_TRUE(c->Put("warm", "x").ok());  // the client knows the worker's segment
  s.workers()[0]->Abandon();
  const absl::Status st = c->Put("k", "v");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_FALSE(*c->Exists("k")) << "revoked, not half-visible";
  // Each round (ClientOptions::put_attempts) is revoked: nothing else fits.
  EXPECT_EQ(s.master().calls(rpc::PutRevokeMethod::kId), 3u);
}

TEST(Client, PutCommitsOnTheReplicasThatWereWritten) {
  Store s(2);
  auto c = s.NewClient(NoShm());
  PutOptions two;
  two.replica_count = 2;
  ASSERT_TRUE(c->Put("warm", "x", two).ok());
  s.workers()[1]->Abandon();
  ASSERT_TRUE(c->Put("k", Value(3000, 'p'), two).ok());
  EXPECT_EQ(*c->Get("k"), Value(3000, 'p'));
}

TEST(Client, BadInputGetsClearErrors) {
  FakeMasterOptions mo;
  mo.max_object_bytes = 1 << 16;
  mo.tenants = {{"", UINT64_MAX}, {"small", 1000}};
  Store s(1, mo);
  ClientOptions co;
  co.max_object_bytes = 1 << 18;
  auto c = s.NewClient(co);
  using absl::StatusCode;
  EXPECT_EQ(c->Put("", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put(std::string(rpc::kMaxKeyBytes + 1, 'k'), "v").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put(std::string("\0k", 2), "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put("k", "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put("k", std::string((1 << 18) + 1, 'v')).code(), StatusCode::kInvalidArgument)
      << "over the client's limit";
  EXPECT_EQ(c->Put("k", std::string((1 << 16) + 1, 'v')).code(), StatusCode::kInvalidArgument)
      << "over the master's limit";
  PutOptions unknown;
  unknown.tenant = "nobody";
  EXPECT_EQ(c->Put("k", "v", unknown).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Get("k", {.tenant = "nobody"}).status().code(), StatusCode::kInvalidArgument);
  PutOptions small;
  small.tenant = "small";
  EXPECT_EQ(c->Put("k", std::string(2000, 'v'), small).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c->Put("big", std::string(60'000, 'v')).code(), StatusCode::kOk);
  EXPECT_EQ(c->Put("big2", std::string(60'000, 'v')).code(), StatusCode::kOk);
  ASSERT_TRUE(c->Put("k", "v").ok());
  EXPECT_EQ(c->Put("k", "w").code(), StatusCode::kAlreadyExists);
  char tiny[0 + 1];
  EXPECT_EQ(c->GetInto("big", tiny, sizeof(tiny)).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->Get("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Exists("").status().code(), StatusCode::kInvalidArgument);
}

TEST(Client, NoSpaceIsResourceExhausted) {
  Store s(1, {}, 64 << 10);
  auto c = s.NewClient();
  ASSERT_TRUE(c->Put("a", std::string(40 << 10, 'a')).ok());
  EXPECT_EQ(c->Put("b", std::string(40 << 10, 'b')).code(), absl::StatusCode::kResourceExhausted);
}

TEST(Client, BatchForms) {
  Store s(2);
  auto c = s.NewClient();
  std::vector<std::string> keys, values;
  for (int i = 0; i < 50; ++i) {
    keys.push_back("key" + std::to_string(i));
    values.push_back(Value(100 + i * 37, static_cast<char>(i)));
  }
  std::vector<PutItem> items;
  for (int i = 0; i < 50; ++i) items.push_back({keys[i], values[i]});
  items.push_back({"", "bad"});
  auto put = c->BatchPut(items);
  ASSERT_EQ(put.size(), 51u);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(put[i].ok()) << put[i];
  EXPECT_EQ(put[50].code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string_view> views(keys.begin(), keys.end());
  views.push_back("missing");
  auto got = c->BatchGet(views);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(*got[i], values[i]);
  EXPECT_EQ(got[50].status().code(), absl::StatusCode::kNotFound);
  auto exists = c->BatchExists(views);
  ASSERT_TRUE(exists.ok());
  EXPECT_TRUE((*exists)[0]);
  EXPECT_FALSE((*exists)[50]);
  std::vector<std::string> bufs(50, std::string(4096, '\0'));
  std::vector<GetIntoItem> into;
  for (int i = 0; i < 50; ++i) into.push_back({keys[i], bufs[i].data(), bufs[i].size()});
  auto sizes = c->BatchGetInto(into);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(bufs[i].substr(0, *sizes[i]), values[i]);
  auto removed = c->BatchRemove(std::span(views).first(25));
  for (const auto& st : removed) EXPECT_TRUE(st.ok());
  got = c->BatchGet(views);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(got[30].ok());
}

TEST(Client, RegisteredBuffers) {
  Store s;
  auto c = s.NewClient();
  std::string region(1 << 16, 'r');
  EXPECT_EQ(c->RegisterBuffer(nullptr, 10).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(c->RegisterBuffer(region.data(), region.size()).ok());
  EXPECT_EQ(c->RegisterBuffer(region.data() + 100, 10).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(c->Put("k", std::string_view(region.data(), 1000)).ok());
  auto n = c->GetInto("k", region.data() + 4096, 8192);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(c->stats().registered_bytes_moved, 2000u);
  EXPECT_EQ(c->RegisteredBytesFrom(region.data()), region.size());
  EXPECT_EQ(c->RegisteredBytesFrom(region.data() + 100), region.size() - 100);
  EXPECT_FALSE(c->RegisteredBytesFrom(region.data() + region.size()).has_value());
  EXPECT_FALSE(c->RegisteredBytesFrom(region.data() - 1).has_value());
  EXPECT_EQ(c->UnregisterBuffer(region.data() + 1).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(c->UnregisterBuffer(region.data()).ok());
  EXPECT_FALSE(c->RegisteredBytesFrom(region.data()).has_value());
}

TEST(Client, EveryTransportAlone) {
  for (int which = 0; which < 3; ++which) {
    Store s(1);
    ClientOptions o;
    o.use_local = which == 0;
    o.use_shm = which == 1;
    o.use_tcp = which == 2;
    auto c = s.NewClient(o);
    const std::string v = Value(1 << 20, static_cast<char>(which));
    ASSERT_TRUE(c->Put("k", std::string_view(v).substr(0, 700'000)).ok()) << which;
    EXPECT_EQ(*c->Get("k"), v.substr(0, 700'000)) << which;
    const auto routes = c->router().route_stats();
    ASSERT_EQ(routes.size(), 1u);
    EXPECT_GT(routes[0].slices_ok, 0u) << routes[0].name;
  }
}

// ClientOptions::qos_link: every TCP slice takes a grant of the host's arbiter
// for the link, in the client's class, and gives it back.
TEST(Client, QosLinkGrantsEveryTcpSliceInTheClientsClass) {
  Store s(1);
  const std::string link = absl::StrCat("client_test.", std::random_device{}());
  ClientOptions bulk;
  bulk.use_local = false;
  bulk.use_shm = false;
  bulk.qos_link = link;
  bulk.qos_link_bytes_per_s = 10'000'000'000;
  auto writer = s.NewClient(bulk);
  const std::string v = Value(700'000, 'q');
  ASSERT_TRUE(writer->Put("k", v).ok());
  ClientOptions critical = bulk;
  critical.qos_class = 0;
  auto reader = s.NewClient(critical);
  EXPECT_EQ(*reader->Get("k"), v);
  auto arb = qos::ShmArbiter::Open(link, bulk.qos_link_bytes_per_s);
  ASSERT_TRUE(arb.ok()) << arb.status();
  const auto stats = (*arb)->Stats();
  EXPECT_GE(stats.classes[1].granted_bytes, v.size()) << "the bulk client's put";
  EXPECT_GE(stats.classes[0].granted_bytes, v.size()) << "the critical client's get";
  EXPECT_EQ(stats.classes[0].inflight_bytes + stats.classes[1].inflight_bytes, 0);
  EXPECT_GT(writer->router().route_stats()[0].slices_ok, 0u);

  const auto refused = [&](ClientOptions o) {
    o.clock = &s.clock();
    return TestClient::Create(o, &s.channel(0)).status();
  };
  ClientOptions bad = bulk;
  bad.qos_class = 2;
  EXPECT_NE(refused(bad).message().find("qos_class"), std::string::npos) << refused(bad);
  bad = bulk;
  bad.qos_link_bytes_per_s = 0;
  EXPECT_NE(refused(bad).message().find("qos_link_bytes_per_s"), std::string::npos) << refused(bad);
  bad = bulk;
  bad.qos_link = "no/slashes";
  EXPECT_EQ(refused(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = bulk;
  bad.qos_link_bytes_per_s = 1'000'000;  // the link exists at another capacity
  EXPECT_EQ(refused(bad).code(), absl::StatusCode::kFailedPrecondition) << refused(bad);
  ASSERT_TRUE(qos::ShmArbiter::Remove(link).ok());
}

// Each transport digests the chunks as they land (transport.h); a byte flipped
// in the worker's copy, in any chunk, is still caught, and clean values of
// every chunk shape read back.
TEST(Client, EveryTransportCatchesACorruptChunk) {
  for (int which = 0; which < 3; ++which) {
    Store s(1, {}, 4 << 20);
    ClientOptions o;
    o.use_local = which == 0;
    o.use_shm = which == 1;
    o.use_tcp = which == 2;
    o.cache_enabled = false;
    auto c = s.NewClient(o);
    const std::string v = Value(1'300'007, static_cast<char>(which + 1));
    ASSERT_TRUE(c->Put("k", v).ok()) << which;
    ASSERT_TRUE(c->Put("small", std::string_view(v).substr(0, 65536)).ok()) << which;
    EXPECT_EQ(*c->Get("k"), v) << which;
    EXPECT_EQ(*c->Get("small"), v.substr(0, 65536)) << which;
    char* seg = static_cast<char*>(s.workers()[0]->segments()[0].data);
    const size_t seg_bytes = s.workers()[0]->segments()[0].size_bytes;
    char* at = std::search(seg, seg + seg_bytes, v.begin(), v.end());
    ASSERT_NE(at, seg + seg_bytes) << which;
    for (size_t off : {size_t{5}, size_t{700'000}, v.size() - 1}) {  // first, a middle, last chunk
      at[off] ^= 0x10;
      auto got = c->Get("k");
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
          << which << " " << off << got.status();
      at[off] ^= 0x10;
    }
    EXPECT_EQ(*c->Get("k"), v) << which;
    EXPECT_EQ(c->stats().checksum_mismatches, 3u) << which;
  }
}

// Objects carry their checksum format: one an older client put (whole-value
// XXH3) reads back verified and still catches a flipped byte; a format this
// client does not know is a clear FAILED_PRECONDITION, never unverified bytes.
TEST(Client, ReadsEachChecksumFormatAsWritten) {
  Store s(1);
  auto c = s.NewClient();
  const auto put_as = [&](const std::string& key, const std::string& v, uint32_t format,
                          uint64_t checksum) {
    store::proto::PutStartRequest req;
    req.set_key(key);
    req.set_size_bytes(v.size());
    req.set_checksum(checksum);
    req.set_checksum_format(static_cast<store::proto::ChecksumFormat>(format));
    auto start = s.master().PutStart(req);
    ASSERT_TRUE(start.ok()) << start.status();
    char* seg = static_cast<char*>(s.workers()[0]->segments()[0].data);
    std::memcpy(seg + start->replicas(0).offset(), v.data(), v.size());
    store::proto::PutEndRequest end;
    end.set_key(key);
    end.set_put_id(start->put_id());
    ASSERT_TRUE(s.master().PutEnd(end).ok());
  };
  const std::string v = Value(300'000, 9);
  put_as("old", v, store::proto::CHECKSUM_XXH3_WHOLE, StableHash64(v.data(), v.size()));
  put_as("future", Value(300'000, 10), 7, 1234);
  EXPECT_EQ(*c->Get("old"), v);
  auto f = c->Get("future");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition) << f.status();
  char* seg = static_cast<char*>(s.workers()[0]->segments()[0].data);
  const size_t seg_bytes = s.workers()[0]->segments()[0].size_bytes;
  char* at = std::search(seg, seg + seg_bytes, v.begin(), v.end());
  ASSERT_NE(at, seg + seg_bytes);
  at[123'456] ^= 1;
  GetOptions bypass;
  bypass.bypass_cache = true;
  EXPECT_EQ(c->Get("old", bypass).status().code(), absl::StatusCode::kDataLoss);
}

TEST(Client, ConcurrentClientsAgreeWithAModel) {
  Store s(2);
  constexpr int kThreads = 4, kKeys = 8, kOps = 150;
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(s.NewClient());
  // Values are self-describing: key, writer and a serial, so a read can be
  // checked for tearing and for belonging to its key.
  auto make = [](int key, int writer, int serial) {
    std::string v = "k" + std::to_string(key) + "/w" + std::to_string(writer) + "/s" +
                    std::to_string(serial) + "/";
    return v + std::string(2000 + serial % 500, static_cast<char>('a' + key));
  };
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int op = 0; op < kOps; ++op) {
        const int key = (op * 7 + t) % kKeys;
        const std::string k = "key" + std::to_string(key);
        GetOptions g;
        g.bypass_cache = op % 3 == 0;
        switch (op % 4) {
          case 0:
            (void)clients[t]->Put(k, make(key, t, op));
            break;
          case 1:
            (void)clients[t]->Remove(k);
            break;
          default: {
            auto r = clients[t]->Get(k, g);
            if (r.ok()) {
              const std::string prefix = "k" + std::to_string(key) + "/";
              const size_t tail = r->rfind('/') + 1;
              const bool whole =
                  r->starts_with(prefix) &&
                  r->find_first_not_of(static_cast<char>('a' + key), tail) == std::string::npos;
              if (!whole) bad.fetch_add(1);
            } else if (!absl::IsNotFound(r.status())) {
              bad.fetch_add(1);
            }
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  // Quiesced: every key reads the same from every client through the master.
  for (int key = 0; key < kKeys; ++key) {
    const std::string k = "key" + std::to_string(key);
    GetOptions g;
    g.bypass_cache = true;
    auto first = clients[0]->Get(k, g);
    for (auto& c : clients) {
      auto r = c->Get(k, g);
      EXPECT_EQ(r.ok(), first.ok());
      if (r.ok() && first.ok()) {
        EXPECT_EQ(*r, *first);
      }
    }
    EXPECT_EQ(*clients[0]->Exists(k), first.ok());
  }
}

TEST(Client, OverTcpRpc) {
  FakeMaster master;
  rpc::ServiceRegistry registry;
  ASSERT_TRUE(master.RegisterOn(&registry).ok());
  rpc::RpcServer server(&registry, {});
  ASSERT_TRUE(server.Start().ok());
  auto wch = rpc::TcpChannel::Connect(server.address());
  ASSERT_TRUE(wch.ok());
  worker::WorkerOptions wo;
  wo.segment_bytes = 1 << 20;
  auto w = worker::Worker<rpc::TcpChannel>::Start(wo, wch->get());
  ASSERT_TRUE(w.ok()) << w.status();
  auto cch = rpc::TcpChannel::Connect(server.address());
  ASSERT_TRUE(cch.ok());
  auto c = Client<rpc::TcpChannel>::Create({}, cch->get());
  ASSERT_TRUE(c.ok());
  std::vector<PutItem> items;
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back("t" + std::to_string(i));
  for (int i = 0; i < 20; ++i) items.push_back({keys[i], keys[i]});
  for (const auto& st : (*c)->BatchPut(items)) ASSERT_TRUE(st.ok()) << st;
  std::vector<std::string_view> views(keys.begin(), keys.end());
  auto got = (*c)->BatchGet(views);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(*got[i], keys[i]);
}

TEST(Client, GetSizeAnswersWithoutReading) {
  Store s;
  auto c = s.NewClient();
  ASSERT_TRUE(c->Put("k", Value(12'345, 'a')).ok());
  const uint64_t reads = s.master().calls(rpc::GetReplicasMethod::kId);
  EXPECT_EQ(*c->GetSize("k"), 12'345u);
  EXPECT_EQ(s.master().calls(rpc::GetReplicasMethod::kId), reads) << "no read, no lease";
  EXPECT_EQ(s.master().live_leases(), 0u);
  EXPECT_EQ(c->GetSize("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->GetSize("").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(c->Get("k").ok());  // cached now: no RPC at all
  const uint64_t before = s.master().total_calls();
  EXPECT_EQ(*c->GetSize("k"), 12'345u);
  EXPECT_EQ(s.master().total_calls(), before);
}

// ---- Blocks and prefix queries, against the real master ----------------------

// master::Master<> behind MasterService, one worker, in process. The fake
// master knows user keys only; block keys and PrefixQuery are the real one's.
class RealStore {
 public:
  explicit RealStore(uint64_t segment_bytes = 4 << 20) {
    master::MasterOptions o;
    o.tenants.push_back({"known", uint64_t{1} << 40, 0});
    auto m = master::Master<>::Create(o, &clock_);  // the clock never moves: no expiry
    EXPECT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    service_ = std::make_unique<master::MasterService<master::Master<>>>(
        master_.get(), master::MasterServiceOptions{});
    EXPECT_TRUE(service_->Register(&registry_).ok());
    inproc_ = std::make_unique<rpc::InProcessChannel>(&registry_);
    worker::WorkerOptions wo;
    wo.segment_bytes = segment_bytes;
    wo.heartbeat_thread = false;
    auto w = TestWorker::Start(wo, inproc_.get());
    EXPECT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    channel_ = std::make_unique<Channel>(inproc_.get());
    auto c = TestClient::Create({}, channel_.get());
    EXPECT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  TestClient& client() { return *client_; }
  // Another worker of the same master.
  std::unique_ptr<TestWorker> AddWorker(worker::WorkerOptions wo) {
    wo.heartbeat_thread = false;
    auto w = TestWorker::Start(wo, inproc_.get());
    EXPECT_TRUE(w.ok()) << w.status();
    return std::move(*w);
  }
  // Another client of the same master (its own channel).
  std::unique_ptr<TestClient> NewClient(ClientOptions o = {}) {
    extra_channels_.push_back(std::make_unique<Channel>(inproc_.get()));
    auto c = TestClient::Create(o, extra_channels_.back().get());
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  master::Master<>& master() { return *master_; }
  TestWorker& worker() { return *worker_; }
  uint64_t prefix_queries() const { return channel_->calls(rpc::PrefixQueryMethod::kId); }
  // Calls of method `id` over every extra client's channel.
  uint64_t extra_calls(uint16_t id) const {
    uint64_t n = 0;
    for (const auto& ch : extra_channels_) n += ch->calls(id);
    return n;
  }
  uint64_t get_replicas() const { return channel_->calls(rpc::GetReplicasMethod::kId); }

 private:
  FakeClock clock_{1'000'000'000};
  std::unique_ptr<master::Master<>> master_;
  rpc::ServiceRegistry registry_;
  std::unique_ptr<master::MasterService<master::Master<>>> service_;
  std::unique_ptr<rpc::InProcessChannel> inproc_;
  std::unique_ptr<TestWorker> worker_;
  std::unique_ptr<Channel> channel_;
  std::vector<std::unique_ptr<Channel>> extra_channels_;
  std::unique_ptr<TestClient> client_;
};

// Distinct stand-ins for index::BlockKeyer keys (the store only compares them).
std::vector<Hash128> Chain(size_t n, uint64_t seed) {
  std::vector<Hash128> chain(n);
  for (size_t i = 0; i < n; ++i) chain[i] = StableHash128(&i, sizeof(i), seed);
  return chain;
}

// A read served from a client's cache reaches the master's eviction order
// (TouchObjects); without the report the master would evict it first.
TEST(ClientCachedReads, ReportedReadsKeepAnObjectInThePool) {
  for (const int64_t report_ms : {100, 0}) {
    SCOPED_TRACE(report_ms);
    RealStore s(4 << 20);
    ClientOptions o;
    o.cached_read_report_ms = report_ms;
    {
      auto c = s.NewClient(o);
      for (const char* key : {"a", "b", "c", "d"}) {
        ASSERT_TRUE(c->Put(key, Value(900 << 10, key[0])).ok()) << key;
      }
      for (const char* key : {"a", "b", "c", "d"}) ASSERT_TRUE(c->Get(key).ok()) << key;
      ASSERT_EQ(*c->Get("a"), Value(900 << 10, 'a'));  // from the cache
      EXPECT_EQ(c->stats().cache_hits, 1u);
    }  // closing: pending reports go out, then the leases are released
    EXPECT_EQ(s.extra_calls(rpc::TouchObjectsMethod::kId), report_ms > 0 ? 1u : 0u);
    ASSERT_TRUE(s.client().Put("e", Value(900 << 10, 'e')).ok());
    EXPECT_EQ(*s.client().Exists("a"), report_ms > 0) << "a was read last";
    if (report_ms > 0) {
      EXPECT_FALSE(*s.client().Exists("b")) << "b, then, was the oldest";
    }
  }
}

TEST(ClientBlocks, MatchPrefixCountsLeadingBlocksInOneRpc) {
  RealStore s;
  TestClient& c = s.client();
  const std::vector<Hash128> chain = Chain(8, 1);
  for (size_t i : {0, 1, 2, 3, 4, 6}) {
    ASSERT_TRUE(c.PutBlock(chain[i], Value(1000, static_cast<char>(i))).ok()) << i;
  }
  EXPECT_EQ(*c.MatchPrefix(chain), 5u) << "stops at the first miss, not at block 6";
  EXPECT_EQ(s.prefix_queries(), 1u);
  EXPECT_EQ(*c.MatchPrefix(std::span(chain).first(3)), 3u);
  EXPECT_EQ(*c.MatchPrefix(std::span(chain).subspan(5)), 0u);
  EXPECT_EQ(*c.GetBlock(chain[2]), Value(1000, 2));
  std::string buf(2000, '\0');
  auto n = c.GetBlockInto(chain[4], buf.data(), buf.size());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(buf.substr(0, *n), Value(1000, 4));
  EXPECT_EQ(c.GetBlock(chain[5]).status().code(), absl::StatusCode::kNotFound);
  // A block is an ordinary object under its BlockObjectKey.
  EXPECT_TRUE(*c.Exists(rpc::BlockObjectKey(chain[0])));
  EXPECT_EQ(*c.Get(rpc::BlockObjectKey(chain[1])), Value(1000, 1));
  ASSERT_TRUE(c.Remove(rpc::BlockObjectKey(chain[2])).ok());
  EXPECT_EQ(*c.MatchPrefix(chain), 2u);
  EXPECT_EQ(c.PutBlock(chain[0], "again").code(), absl::StatusCode::kAlreadyExists);
}

TEST(ClientBlocks, BatchPutAndGetBlocks) {
  RealStore s;
  TestClient& c = s.client();
  const std::vector<Hash128> chain = Chain(20, 2);
  std::vector<std::string> values;
  for (size_t i = 0; i < chain.size(); ++i) values.push_back(Value(500 + i, static_cast<char>(i)));
  const std::vector<std::string_view> views(values.begin(), values.end());
  for (const absl::Status& st :
       c.BatchPutBlocks(std::span(chain).first(15), std::span(views).first(15))) {
    ASSERT_TRUE(st.ok()) << st;
  }
  ASSERT_EQ(*c.MatchPrefix(chain), 15u);
  auto got = c.BatchGetBlocks(chain);
  ASSERT_EQ(got.size(), chain.size());
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(*got[i], values[i]) << i;
  for (size_t i = 15; i < chain.size(); ++i) {
    EXPECT_EQ(got[i].status().code(), absl::StatusCode::kNotFound) << i;
  }
  const auto mismatched = c.BatchPutBlocks(chain, std::span(views).first(3));
  ASSERT_EQ(mismatched.size(), chain.size());
  EXPECT_EQ(mismatched[0].code(), absl::StatusCode::kInvalidArgument);
}

// A chain over rpc::kMaxChainBlocks (which the master refuses in one call)
// goes in chunks, one RPC each, and stops at the chunk holding the first miss.
TEST(ClientBlocks, MatchPrefixChunksLongChains) {
  RealStore s(8 << 20);
  TestClient& c = s.client();
  const size_t n = rpc::kMaxChainBlocks + 6;
  const std::vector<Hash128> chain = Chain(n, 3);
  const std::vector<std::string_view> values(n, "v");
  for (size_t begin = 0; begin < n; begin += 4096) {
    const size_t len = std::min<size_t>(4096, n - begin);
    for (const absl::Status& st : c.BatchPutBlocks(std::span(chain).subspan(begin, len),
                                                   std::span(values).subspan(begin, len))) {
      ASSERT_TRUE(st.ok()) << st;
    }
  }
  EXPECT_EQ(*c.MatchPrefix(chain), n);
  EXPECT_EQ(s.prefix_queries(), 2u);
  std::vector<Hash128> early_miss = chain;
  early_miss[10] = Hash128{7, 7};
  EXPECT_EQ(*c.MatchPrefix(early_miss), 10u);
  EXPECT_EQ(s.prefix_queries(), 3u) << "the second chunk is never asked";
  std::vector<Hash128> late_miss = chain;
  late_miss[rpc::kMaxChainBlocks + 2] = Hash128{7, 7};
  EXPECT_EQ(*c.MatchPrefix(late_miss), rpc::kMaxChainBlocks + 2);
  EXPECT_EQ(s.prefix_queries(), 5u);
  std::vector<Hash128> exact(chain.begin(), chain.begin() + rpc::kMaxChainBlocks);
  EXPECT_EQ(*c.MatchPrefix(exact), rpc::kMaxChainBlocks);
  EXPECT_EQ(s.prefix_queries(), 6u) << "a chain of exactly the limit is one RPC";
}

TEST(ClientBlocks, GetPrefixIntoReadsTheCachedPrefixWithOneRpc) {
  RealStore s;
  TestClient& c = s.client();
  const std::vector<Hash128> chain = Chain(8, 5);
  for (size_t i : {0, 1, 2, 3, 4, 6}) {
    ASSERT_TRUE(c.PutBlock(chain[i], Value(1000 + i, static_cast<char>(i))).ok()) << i;
  }
  std::vector<std::string> bufs(chain.size(), std::string(2000, '\0'));
  std::vector<BlockBuffer> into;
  for (std::string& b : bufs) into.push_back({b.data(), b.size()});
  const uint64_t rpcs_before = c.stats().master_rpcs;
  auto n = c.GetPrefixInto(chain, into);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(bufs[i].substr(0, 1000 + i), Value(1000 + i, static_cast<char>(i))) << i;
  }
  EXPECT_EQ(bufs[6], std::string(2000, '\0')) << "nothing past the first miss";
  EXPECT_EQ(s.prefix_queries(), 1u);
  EXPECT_EQ(s.get_replicas(), 0u) << "the replicas came with the prefix query";
  EXPECT_EQ(c.stats().master_rpcs - rpcs_before, 2u) << "PrefixQuery + ReleaseLeases";
  EXPECT_EQ(s.master().Stats().leases, 0u) << "the read lease was handed back";

  // A cached block whose bytes are corrupt ends the usable prefix there.
  const std::string v2 = Value(1002, 2);
  char* seg = static_cast<char*>(s.worker().segments()[0].data);
  const size_t seg_bytes = s.worker().segments()[0].size_bytes;
  char* at = std::search(seg, seg + seg_bytes, v2.begin(), v2.end());
  ASSERT_NE(at, seg + seg_bytes);
  at[7] ^= 1;
  n = c.GetPrefixInto(chain, into);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);
  EXPECT_GE(c.stats().checksum_mismatches, 1u);
  at[7] ^= 1;

  // The caller's buffers: too small, too few, none.
  std::vector<BlockBuffer> small = into;
  small[1].capacity = 10;
  EXPECT_EQ(c.GetPrefixInto(chain, small).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(c.GetPrefixInto(chain, std::span(into).first(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.GetPrefixInto({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.GetPrefixInto(chain, into, {.tenant = "nobody"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.master().Stats().leases, 0u);
}

TEST(ClientBlocks, BadInputGetsClearErrors) {
  RealStore s;
  TestClient& c = s.client();
  const std::vector<Hash128> chain = Chain(4, 4);
  ASSERT_TRUE(c.PutBlock(chain[0], "x").ok());
  const auto empty = c.MatchPrefix({});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty chain"), std::string_view::npos);
  EXPECT_EQ(s.prefix_queries(), 0u) << "refused before any RPC";
  const auto unknown = c.MatchPrefix(chain, {.tenant = "nobody"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument) << unknown.status();
  EXPECT_NE(unknown.status().message().find("MatchPrefix"), std::string_view::npos);
  EXPECT_EQ(*c.MatchPrefix(chain, {.tenant = "known"}), 0u) << "another tenant's blocks";
  EXPECT_EQ(*c.MatchPrefix(chain), 1u);
  EXPECT_EQ(c.PutBlock(chain[1], "").code(), absl::StatusCode::kInvalidArgument);
  // Keys starting with 0x00 that are not block object keys stay refused.
  std::string bad = rpc::BlockObjectKey(chain[2]);
  bad[1] = 'x';
  const absl::Status st = c.Put(bad, "v");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block keys"), std::string_view::npos) << st;
  EXPECT_EQ(c.Put(rpc::BlockObjectKey(chain[2]).substr(0, 17), "v").code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Replace, pins and removal, against the real master -----------------------

TEST(ClientReplace, ReplaceOverwritesAndTheWritersCacheSeesTheNewVersion) {
  RealStore s;
  TestClient& c = s.client();
  ASSERT_TRUE(c.Put("k", Value(1000, 'a')).ok());
  ASSERT_EQ(*c.Get("k"), Value(1000, 'a'));  // cached
  EXPECT_EQ(c.Put("k", Value(2000, 'b')).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(c.Put("k", Value(2000, 'b'), {.replace = true}).ok());
  EXPECT_EQ(*c.Get("k"), Value(2000, 'b'));
  ASSERT_TRUE(c.Put("fresh", Value(10, 'c'), {.replace = true}).ok());
  EXPECT_EQ(*c.Get("fresh"), Value(10, 'c'));
}

TEST(ClientReplace, AnotherClientsCachedVersionStaysIntactUntilItReadsThrough) {
  RealStore s;
  TestClient& writer = s.client();
  auto reader = s.NewClient();
  ASSERT_TRUE(writer.Put("k", Value(4096, 'a')).ok());
  ASSERT_EQ(*reader->Get("k"), Value(4096, 'a'));  // cached with a lease
  ASSERT_TRUE(writer.Put("k", Value(4096, 'b'), {.replace = true}).ok());
  // The old version's space is held for the reader's lease: never other bytes.
  EXPECT_EQ(*reader->Get("k"), Value(4096, 'a'));
  EXPECT_EQ(*reader->Get("k", {.bypass_cache = true}), Value(4096, 'b'));
  EXPECT_EQ(s.master().Stats().objects, 1);
}

TEST(ClientReplace, KeepPinCarriesASoftPinAcrossAReplace) {
  RealStore s;
  TestClient& c = s.client();
  ASSERT_TRUE(c.Put("k", "v1", {.pin = store::proto::PIN_SOFT, .pin_ttl_ms = 60'000}).ok());
  ASSERT_TRUE(c.Put("k", "v2", {.replace = true, .keep_pin = true}).ok());
  EXPECT_EQ(c.Remove("k").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c.Remove("k", {.force = true}).ok());
  EXPECT_EQ(c.Put("h", "v", {.pin = store::proto::PIN_HARD, .pin_ttl_ms = 1}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientRemove, RefuseIfLeasedIsAbortedWhileAnotherClientHoldsALease) {
  RealStore s;
  TestClient& c = s.client();
  auto other = s.NewClient();
  ASSERT_TRUE(c.Put("k", "v").ok());
  ASSERT_TRUE(other->Get("k").ok());  // its cache keeps the lease
  const absl::Status refused = c.Remove("k", {.refuse_if_leased = true});
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted) << refused;
  EXPECT_NE(refused.message().find("has a live read lease"), std::string_view::npos);
  EXPECT_TRUE(*c.Exists("k"));
  EXPECT_TRUE(c.Remove("k", {.force = true, .refuse_if_leased = true}).ok());
  EXPECT_FALSE(*c.Exists("k"));
}

TEST(ClientRemove, RefuseIfLeasedIsNotRefusedByTheCallersOwnCachedLease) {
  RealStore s;
  TestClient& c = s.client();
  ASSERT_TRUE(c.Put("k", "v").ok());
  ASSERT_TRUE(c.Get("k").ok());
  ASSERT_EQ(c.cached_objects(), 1u);
  EXPECT_TRUE(c.Remove("k", {.refuse_if_leased = true}).ok());
  EXPECT_EQ(c.Get("k").status().code(), absl::StatusCode::kNotFound);
}

TEST(ClientPlacement, PreferredSegmentNamesPlaceTheFirstReplica) {
  RealStore s;
  worker::WorkerOptions wo;
  wo.segment_bytes = 1 << 20;
  wo.segment_name = "beta";
  auto beta = s.AddWorker(wo);
  const uint64_t beta_id = beta->segments()[0].master_segment_id;
  TestClient& c = s.client();
  for (int i = 0; i < 4; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(c.Put(key, Value(1000, 'a'), {.preferred_segment_names = {"gamma", "beta"}}).ok());
    store::proto::GetReplicasRequest g;
    g.set_key(key);
    auto r = s.master().GetReplicas(g);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->replicas(0).segment_id(), beta_id) << key;
    EXPECT_EQ(*c.Get(key), Value(1000, 'a'));
  }
}

TEST(ClientRemove, RemoveAllRemovesMatchingKeysAndClearsTheCache) {
  RealStore s;
  TestClient& c = s.client();
  for (const char* k : {"a/1", "a/2", "b/1"}) ASSERT_TRUE(c.Put(k, "v").ok()) << k;
  ASSERT_TRUE(c.Put("pinned", "v", {.pin = store::proto::PIN_HARD}).ok());
  ASSERT_TRUE(c.Put("theirs", "v", {.tenant = "known"}).ok());
  ASSERT_TRUE(c.Get("a/1").ok());  // cached: our own lease must not keep it
  auto some = c.RemoveAll({.key_regex = "a/[0-9]"});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(*some, 2u);
  EXPECT_EQ(c.cached_objects(), 0u);
  EXPECT_EQ(c.Get("a/1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c.RemoveAll({.key_regex = "(bad"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*c.RemoveAll({.force = false}), 1u) << "b/1; the pinned object stays";
  EXPECT_EQ(*c.RemoveAll(), 1u) << "force (the default) takes the pinned one";
  EXPECT_TRUE(*c.Exists("theirs", "known")) << "another tenant's";
}

TEST(ClientRemove, RemoveAllSkipsObjectsAnotherClientHoldsALeaseOn) {
  RealStore s;
  TestClient& c = s.client();
  auto reader = s.NewClient();
  ASSERT_TRUE(c.Put("k1", "v").ok());
  ASSERT_TRUE(c.Put("k2", "v").ok());
  ASSERT_TRUE(reader->Get("k1").ok());
  EXPECT_EQ(*c.RemoveAll(), 1u);
  EXPECT_TRUE(*c.Exists("k1"));
}

TEST(ClientReplace, GetSizeFollowsAReplace) {
  RealStore s;
  TestClient& c = s.client();
  ASSERT_TRUE(c.Put("k", Value(100, 'a')).ok());
  EXPECT_EQ(*c.GetSize("k"), 100u);
  ASSERT_TRUE(c.Put("k", Value(300, 'b'), {.replace = true}).ok());
  EXPECT_EQ(*c.GetSize("k"), 300u);
  EXPECT_EQ(c.GetSize("k", "known").status().code(), absl::StatusCode::kNotFound);
}

// A worker that dies without unmounting stays a placement candidate until
// the master expires it; a put that lands there goes again elsewhere, and
// the client leaves that segment out of its next puts.
TEST(ClientPlacement, PutAfterAWorkerDiesGoesToAnotherSegmentAndSkipsItAfterwards) {
  RealStore s;
  worker::WorkerOptions wo;
  wo.segment_bytes = 1 << 20;
  wo.segment_name = "doomed";
  auto doomed = s.AddWorker(wo);
  const uint64_t doomed_id = doomed->segments()[0].master_segment_id;
  auto c = s.NewClient(NoShm());
  const PutOptions to_doomed{.preferred_segment_names = {"doomed"}};
  ASSERT_TRUE(c->Put("warm", Value(100, 'w'), to_doomed).ok());  // it knows the segment
  doomed->Abandon();
  ASSERT_TRUE(c->Put("k1", Value(3000, 'a'), to_doomed).ok());
  EXPECT_EQ(s.extra_calls(rpc::PutRevokeMethod::kId), 1u) << "one failed round, then elsewhere";
  ASSERT_TRUE(c->Put("k2", Value(3000, 'b'), to_doomed).ok());
  EXPECT_EQ(s.extra_calls(rpc::PutRevokeMethod::kId), 1u) << "the dead segment is left out now";
  for (const char* key : {"k1", "k2"}) {
    store::proto::GetReplicasRequest g;
    g.set_key(key);
    auto r = s.master().GetReplicas(g);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->replicas(0).segment_id(), doomed_id) << key;
  }
  EXPECT_EQ(*c->Get("k1"), Value(3000, 'a'));
  EXPECT_EQ(*c->Get("k2"), Value(3000, 'b'));
}

TEST(Client, ReplicaTaskCallsCheckTheirArgumentsBeforeAnyRpc) {
  Store s(1);
  auto c = s.NewClient();
  const uint64_t before = s.channel(0).total();
  const std::vector<std::string> none;
  const std::vector<std::string> too_many(rpc::kMaxCopyTargets + 1, "seg");
  const std::vector<std::string> empty_name = {"a", ""};
  const std::vector<std::string> one = {"seg-0-g0"};
  EXPECT_TRUE(absl::IsInvalidArgument(c->CreateCopyTask("k", none).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c->CreateCopyTask("k", too_many).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c->CreateCopyTask("k", empty_name).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c->CreateCopyTask("", one).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c->CreateMoveTask("k", "", "b").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c->CreateMoveTask("k", "a", "").status()));
  EXPECT_EQ(s.channel(0).total(), before) << "no RPC left the client";
  // Valid calls reach the master, one RPC each (this fake does not implement them).
  EXPECT_FALSE(c->CreateCopyTask("k", one).ok());
  EXPECT_FALSE(c->CreateMoveTask("k", "a", "b").ok());
  EXPECT_FALSE(c->QueryTask(1).ok());
  EXPECT_EQ(s.channel(0).calls(rpc::CreateCopyTaskMethod::kId), 1u);
  EXPECT_EQ(s.channel(0).calls(rpc::CreateMoveTaskMethod::kId), 1u);
  EXPECT_EQ(s.channel(0).calls(rpc::QueryTaskMethod::kId), 1u);
}

}  // namespace
}  // namespace mooncake::client
