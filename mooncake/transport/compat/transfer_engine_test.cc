#include "mooncake/transport/compat/transfer_engine.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/auth.h"
#include "mooncake/store/node/metadata_server.h"

namespace mooncake::transport::compat {
namespace {

TransferEngineOptions Quiet() {
  TransferEngineOptions o;
  o.log_errors = false;
  o.transfer_timeout = absl::Seconds(5);
  return o;
}

uintptr_t Addr(std::vector<uint8_t>& v, size_t off = 0) {
  return reinterpret_cast<uintptr_t>(v.data() + off);
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 9));
  return v;
}

// Two engines in one process, P2PHANDSHAKE: `a` transfers, `b` owns `peer_mem`.
class P2PTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(a_.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0);
    ASSERT_EQ(b_.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0);
    ASSERT_GT(b_.GetRpcPort(), 0);
    b_name_ = absl::StrCat("127.0.0.1:", b_.GetRpcPort());
    EXPECT_EQ(b_.PeerName(), b_name_);
    ASSERT_EQ(b_.RegisterMemory(Addr(peer_mem_), peer_mem_.size()), 0);
  }

  TransferEngine a_{Quiet()};
  TransferEngine b_{Quiet()};
  std::string b_name_;
  std::vector<uint8_t> peer_mem_ = std::vector<uint8_t>(4 << 20, 0);
};

TEST_F(P2PTest, SyncWriteThenReadMovesEveryByte) {
  std::vector<uint8_t> src = Pattern(3 << 20, 7);
  ASSERT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(peer_mem_, 4096), src.size(),
                            TransferOpcode::kWrite),
            0);
  EXPECT_EQ(std::memcmp(peer_mem_.data() + 4096, src.data(), src.size()), 0);
  std::vector<uint8_t> back(src.size(), 0);
  ASSERT_EQ(a_.TransferSync(b_name_, Addr(back), Addr(peer_mem_, 4096), back.size(),
                            TransferOpcode::kRead),
            0);
  EXPECT_EQ(back, src);
}

TEST_F(P2PTest, BatchSyncAndAsyncWithStatus) {
  std::vector<uint8_t> src = Pattern(64 * 1024, 3);
  std::vector<uintptr_t> locals, remotes;
  std::vector<size_t> lengths;
  for (size_t i = 0; i < 16; ++i) {
    locals.push_back(Addr(src, i * 4096));
    remotes.push_back(Addr(peer_mem_, (15 - i) * 4096));  // reversed placement
    lengths.push_back(4096);
  }
  ASSERT_EQ(a_.BatchTransferSync(b_name_, locals, remotes, lengths, TransferOpcode::kWrite), 0);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(std::memcmp(peer_mem_.data() + (15 - i) * 4096, src.data() + i * 4096, 4096), 0);
  }
  std::vector<uint8_t> back(src.size(), 0);
  std::vector<uintptr_t> backs;
  for (size_t i = 0; i < 16; ++i) backs.push_back(Addr(back, i * 4096));
  const uint64_t id =
      a_.BatchTransferAsync(b_name_, backs, remotes, lengths, TransferOpcode::kRead);
  ASSERT_NE(id, 0u);
  const uint64_t ids[] = {id};
  EXPECT_EQ(a_.GetBatchTransferStatus(ids), 0);
  EXPECT_EQ(back, src);
  EXPECT_EQ(a_.GetBatchTransferStatus(ids), -1) << "an id is released once collected";

  const uint64_t w = a_.TransferSubmitWrite(b_name_, Addr(src), Addr(peer_mem_, 1 << 20), 8192);
  ASSERT_NE(w, 0u);
  int status = kStatusPending;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while ((status = a_.TransferCheckStatus(w)) == kStatusPending && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(status, kStatusCompleted);
  EXPECT_EQ(std::memcmp(peer_mem_.data() + (1 << 20), src.data(), 8192), 0);
}

TEST_F(P2PTest, WritesOutsideThePeersMemoryAreRefusedAndNotPerformed) {
  std::vector<uint8_t> src = Pattern(8192, 9);
  std::vector<uint8_t> tail(peer_mem_.size() + 8192, 0xAB);  // unregistered memory of b
  // Crosses the end of the registered buffer.
  EXPECT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(peer_mem_, peer_mem_.size() - 4096), 8192,
                            TransferOpcode::kWrite),
            -1);
  EXPECT_EQ(std::memcmp(peer_mem_.data() + peer_mem_.size() - 4096,
                        std::vector<uint8_t>(4096, 0).data(), 4096),
            0);
  // In no registered buffer at all.
  EXPECT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(tail), 4096, TransferOpcode::kWrite), -1);
  EXPECT_EQ(tail, std::vector<uint8_t>(tail.size(), 0xAB));
  EXPECT_EQ(a_.BatchTransferAsync(b_name_, std::vector<uintptr_t>{Addr(src)},
                                  std::vector<uintptr_t>{Addr(tail)}, std::vector<size_t>{16},
                                  TransferOpcode::kWrite),
            0u);
  // Bad arguments.
  EXPECT_EQ(a_.TransferSync(b_name_, 0, Addr(peer_mem_), 16, TransferOpcode::kWrite), -1);
  EXPECT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(peer_mem_), 0, TransferOpcode::kWrite), -1);
  EXPECT_EQ(
      a_.BatchTransferSync(b_name_, std::vector<uintptr_t>{Addr(src)}, std::vector<uintptr_t>{},
                           std::vector<size_t>{16}, TransferOpcode::kWrite),
      -1);
  // Still usable afterwards.
  EXPECT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(peer_mem_), 8192, TransferOpcode::kWrite), 0);
}

TEST_F(P2PTest, BufferRegisteredAfterTheHandshakeIsFound) {
  std::vector<uint8_t> src = Pattern(4096, 1);
  ASSERT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(peer_mem_), 4096, TransferOpcode::kWrite), 0);
  std::vector<uint8_t> later(1 << 20, 0);
  ASSERT_EQ(b_.RegisterMemory(Addr(later), later.size()), 0);
  ASSERT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(later, 777), 4096, TransferOpcode::kWrite), 0);
  EXPECT_EQ(std::memcmp(later.data() + 777, src.data(), 4096), 0);
  ASSERT_EQ(b_.UnregisterMemory(Addr(later)), 0);
  EXPECT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(later), 4096, TransferOpcode::kWrite), -1);
}

TEST_F(P2PTest, RegistrationCodesAreMooncakes) {
  EXPECT_EQ(b_.RegisterMemory(Addr(peer_mem_, 100), 10), kErrAddressOverlapped);
  EXPECT_EQ(b_.RegisterMemory(0, 10), kErrInvalidArgument);
  EXPECT_EQ(b_.RegisterMemory(Addr(peer_mem_), 0), kErrInvalidArgument);
  EXPECT_EQ(b_.UnregisterMemory(Addr(peer_mem_, 1)), kErrAddressNotRegistered);
  std::vector<uint8_t> x(8192), y(8192);
  const uintptr_t xs[] = {Addr(x), Addr(y)};
  const size_t ns[] = {x.size(), y.size()};
  EXPECT_EQ(b_.BatchRegisterMemory(xs, ns), 0);
  EXPECT_EQ(b_.BatchUnregisterMemory(xs), 0);
  const uintptr_t bad[] = {Addr(x), Addr(peer_mem_, 8)};
  EXPECT_EQ(b_.BatchRegisterMemory(bad, ns), kErrAddressOverlapped);
  EXPECT_EQ(b_.UnregisterMemory(Addr(x)), kErrAddressNotRegistered) << "rolled back";
}

TEST_F(P2PTest, FirstBufferAddressOfSelfAndPeer) {
  EXPECT_EQ(b_.GetFirstBufferAddress(b_name_), Addr(peer_mem_));
  EXPECT_EQ(a_.GetFirstBufferAddress(b_name_), Addr(peer_mem_));
  const std::string a_name = a_.PeerName();
  EXPECT_EQ(a_.GetFirstBufferAddress(a_name), 0u);
  const uintptr_t managed = a_.AllocateManagedBuffer(1 << 20);
  ASSERT_NE(managed, 0u);
  EXPECT_EQ(a_.GetFirstBufferAddress(a_name), managed);
  EXPECT_EQ(b_.GetFirstBufferAddress(a_name), managed);
  // b writes into a's managed buffer.
  std::vector<uint8_t> src = Pattern(65536, 4);
  ASSERT_EQ(b_.TransferSync(a_name, Addr(src), managed + 100, src.size(), TransferOpcode::kWrite),
            0);
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(managed + 100), src.data(), src.size()), 0);
  EXPECT_EQ(a_.FreeManagedBuffer(managed, 4096), kErrInvalidArgument);
  EXPECT_EQ(a_.FreeManagedBuffer(managed, 1 << 20), 0);
  EXPECT_EQ(a_.FreeManagedBuffer(managed, 1 << 20), kErrAddressNotRegistered);
  EXPECT_EQ(a_.GetFirstBufferAddress(a_name), 0u);
  EXPECT_EQ(a_.AllocateManagedBuffer(0), 0u);
}

TEST_F(P2PTest, UnknownAndDeadPeersFailFast) {
  std::vector<uint8_t> src = Pattern(4096, 2);
  EXPECT_NE(a_.SendProbe("127.0.0.1:1"), 0);
  EXPECT_NE(a_.SendProbe("no-port"), 0);
  EXPECT_EQ(a_.SendProbe(b_name_), 0);
  EXPECT_EQ(a_.TransferSubmitWrite("127.0.0.1:1", Addr(src), Addr(peer_mem_), 16), 0u);
  ASSERT_EQ(a_.TransferSync(b_name_, Addr(src), Addr(peer_mem_), 4096, TransferOpcode::kWrite), 0);
  auto dead = std::make_unique<TransferEngine>(Quiet());
  ASSERT_EQ(dead->Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0);
  std::vector<uint8_t> mem(65536);
  ASSERT_EQ(dead->RegisterMemory(Addr(mem), mem.size()), 0);
  const std::string dead_name = dead->PeerName();
  ASSERT_EQ(a_.TransferSync(dead_name, Addr(src), Addr(mem), 4096, TransferOpcode::kWrite), 0);
  dead.reset();
  const absl::Time start = absl::Now();
  EXPECT_EQ(a_.TransferSync(dead_name, Addr(src), Addr(mem), 4096, TransferOpcode::kWrite), -1);
  EXPECT_EQ(a_.TransferSync(dead_name, Addr(src), Addr(mem), 4096, TransferOpcode::kWrite), -1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_NE(a_.SendProbe(dead_name), 0);
}

TEST(TransferEngineTest, InitializeRefusesWhatItCannotDo) {
  TransferEngine e(Quiet());
  EXPECT_EQ(e.GetRpcPort(), 0);
  EXPECT_EQ(e.RegisterMemory(4096, 4096), -1) << "before initialize";
  EXPECT_EQ(e.TransferSync("127.0.0.1:1", 4096, 4096, 1, TransferOpcode::kWrite), -1);
  EXPECT_EQ(e.Initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", ""), -1);
  EXPECT_EQ(e.Initialize("127.0.0.1", "redis://127.0.0.1:1", "tcp", ""), -1);
  EXPECT_EQ(e.Initialize("127.0.0.1:x", "P2PHANDSHAKE", "tcp", ""), -1);
  EXPECT_EQ(e.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0) << "after failed attempts";
  EXPECT_EQ(e.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), -1) << "twice";
}

TEST(TransferEngineTest, P2PBindsTheNamedPortWhenFreeElseAnother) {
  int port = 0;
  {
    TransferEngine probe(Quiet());  // finds a port that is free once it closes
    ASSERT_EQ(probe.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0);
    port = probe.GetRpcPort();
  }
  TransferEngine e(Quiet());
  ASSERT_EQ(e.Initialize(absl::StrCat("127.0.0.1:", port), "P2PHANDSHAKE", "tcp", ""), 0);
  EXPECT_EQ(e.GetRpcPort(), port);
  TransferEngine f(Quiet());
  ASSERT_EQ(f.Initialize(absl::StrCat("127.0.0.1:", port), "P2PHANDSHAKE", "tcp", ""), 0);
  EXPECT_GT(f.GetRpcPort(), 0);
  EXPECT_NE(f.GetRpcPort(), port) << "a taken port falls back to a free one";
}

TEST(TransferEngineTest, HttpMetadataServerResolvesNamesAndForgetsClosedEngines) {
  auto server = node::MetadataServer::Start({.port = 0});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string url = absl::StrCat("http://", (*server)->address(), "/metadata");
  TransferEngine a(Quiet());
  auto b = std::make_unique<TransferEngine>(Quiet());
  // The port in a name is only a name here: the rpc port is any free one.
  ASSERT_EQ(a.Initialize("127.0.0.1:1", url, "tcp", ""), 0);
  ASSERT_EQ(b->Initialize("127.0.0.1:2", url, "tcp", ""), 0);
  auto meta = (*server)->store().Get("mooncake/rpc_meta/127.0.0.1:2");
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto decoded = DecodeRpcMeta(*meta);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->rpc_port, b->GetRpcPort());
  EXPECT_EQ(b->PeerName(), "127.0.0.1:2");
  std::vector<uint8_t> mem(1 << 20, 0);
  ASSERT_EQ(b->RegisterMemory(Addr(mem), mem.size()), 0);
  std::vector<uint8_t> src = Pattern(1 << 20, 5);
  ASSERT_EQ(a.TransferSync("127.0.0.1:2", Addr(src), Addr(mem), src.size(), TransferOpcode::kWrite),
            0);
  EXPECT_EQ(mem, src);
  EXPECT_EQ(a.GetFirstBufferAddress("127.0.0.1:2"), Addr(mem));
  EXPECT_EQ(a.SendProbe("127.0.0.1:3"), -1) << "not in the metadata server";
  b.reset();
  EXPECT_FALSE((*server)->store().Get("mooncake/rpc_meta/127.0.0.1:2").ok());
  EXPECT_EQ(a.SendProbe("127.0.0.1:2"), -1);
}

// A token file (auth_token_file, as MOONCAKE_AUTH_TOKEN_FILE sets it)
// guards all three of an engine's ports: the metadata server refuses an
// engine without a listed secret (initialize fails), and the handshake server
// and the transport refuse a peer without the token or with another
// cluster's, so its transfer fails and the memory is untouched.
TEST(TransferEngineTest, ATokenFileGuardsTheMetadataTheHandshakeAndTheTransport) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir, "/", name, ".", ::getpid());
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0600);
    return path;
  };
  const std::string ours = write("ours", "cluster 0123456789abcdef0123456789abcdef\n");
  const std::string theirs = write("theirs", "cluster fedcba9876543210fedcba9876543210\n");
  auto creds = auth::LoadCredentials(ours);
  ASSERT_TRUE(creds.ok()) << creds.status();
  auto server = node::MetadataServer::Start({.port = 0, .auth = *creds});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string url = absl::StrCat("http://", (*server)->address(), "/metadata");
  auto with = [](const std::string& file) {
    TransferEngineOptions o = Quiet();
    o.auth_token_file = file;
    return o;
  };

  TransferEngine a(with(ours)), b(with(ours));
  ASSERT_EQ(a.Initialize("127.0.0.1:1", url, "tcp", ""), 0);
  ASSERT_EQ(b.Initialize("127.0.0.1:2", url, "tcp", ""), 0);
  std::vector<uint8_t> mem(1 << 20, 0);
  ASSERT_EQ(b.RegisterMemory(Addr(mem), mem.size()), 0);
  std::vector<uint8_t> src = Pattern(1 << 20, 9);
  ASSERT_EQ(a.TransferSync("127.0.0.1:2", Addr(src), Addr(mem), src.size(), TransferOpcode::kWrite),
            0);
  EXPECT_EQ(mem, src);

  TransferEngine no_token(Quiet());
  EXPECT_EQ(no_token.Initialize("127.0.0.1:3", url, "tcp", ""), -1) << "metadata PUT refused";
  TransferEngine bad_file(with(dir + "/no-such-token-file"));
  EXPECT_EQ(bad_file.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), -1);

  const std::string b_rpc = absl::StrCat("127.0.0.1:", b.GetRpcPort());
  for (const std::string& file : {std::string(), theirs}) {
    TransferEngine c(with(file));
    ASSERT_EQ(c.Initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", ""), 0);
    std::vector<uint8_t> junk(4096, 0xEE);
    EXPECT_EQ(c.TransferSync(b_rpc, Addr(junk), Addr(mem), junk.size(), TransferOpcode::kWrite), -1)
        << "token file \"" << file << "\"";
    EXPECT_EQ(mem, src);
  }
}

}  // namespace
}  // namespace mooncake::transport::compat
