// The store as separate processes on 127.0.0.1: a real master
// (MasterService over TCP), workers and load clients are store_node
// processes; this test process is a client too and checks what they did.
// Every wait has a deadline; processes left over are killed at teardown.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/hash.h"
#include "mooncake/store/client.h"
#include "mooncake/store/client/testing/counting_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"

namespace mooncake {
namespace {

std::string g_node;  // path of store_node (argv[1])

using TcpClient = client::Client<rpc::TcpChannel>;

class Cluster {
 public:
  explicit Cluster(uint64_t max_object_bytes = 1 << 20) {
    dir_ = ::testing::TempDir() + "/cluster." + std::to_string(::getpid()) + "." +
           std::to_string(counter_++);
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    EXPECT_FALSE(ec) << dir_ << ": " << ec.message();
    master_pid_ = Spawn({"master", dir_ + "/master", std::to_string(max_object_bytes)});
    master_ = ReadFile(dir_ + "/master");
  }
  ~Cluster() {
    for (pid_t p : pids_) ::kill(p, SIGKILL);
    for (pid_t p : pids_) ::waitpid(p, nullptr, 0);
  }

  pid_t Spawn(std::vector<std::string> args) {
    args.insert(args.begin(), g_node);
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    pids_.push_back(pid);
    return pid;
  }
  // Starts a worker and waits until it mounted; returns its pid.
  pid_t AddWorker(uint64_t segment_bytes) {
    const std::string file = dir_ + "/worker" + std::to_string(workers_++);
    const pid_t pid = Spawn({"worker", master_, std::to_string(segment_bytes), file});
    EXPECT_FALSE(ReadFile(file).empty());
    return pid;
  }
  // Exit code of `pid`, or -1 if it did not exit by the deadline.
  static int Wait(pid_t pid, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    int status = 0;
    while (absl::Now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return -1;
  }
  std::unique_ptr<TcpClient> NewClient(client::ClientOptions o = {}) {
    auto ch = rpc::TcpChannel::Connect(master_);
    EXPECT_TRUE(ch.ok()) << ch.status();
    channels_.push_back(std::move(*ch));
    auto c = TcpClient::Create(o, channels_.back().get());
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  const std::string& master() const { return master_; }

 private:
  static std::string ReadFile(const std::string& path) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      std::ifstream in(path);
      std::stringstream ss;
      if (in) {
        ss << in.rdbuf();
        if (!ss.str().empty()) return ss.str();
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << "no " << path << " within 20 s";
    return "";
  }

  static inline int counter_ = 0;
  std::string dir_;
  std::string master_;
  pid_t master_pid_ = 0;
  int workers_ = 0;
  std::vector<pid_t> pids_;
  std::vector<std::unique_ptr<rpc::TcpChannel>> channels_;
};

std::string Value(size_t n, uint64_t seed) {
  std::string v(n, '\0');
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((seed * 131 + i * 7) >> 3);
  return v;
}

client::ClientOptions TcpOnly() {
  client::ClientOptions o;
  o.use_local = o.use_shm = false;
  return o;
}

TEST(StoreProcesses, ConcurrentClientsAgreeWithAModel) {
  Cluster c;
  c.AddWorker(8 << 20);
  c.AddWorker(8 << 20);
  std::vector<pid_t> loads;
  for (int i = 0; i < 3; ++i) {
    loads.push_back(c.Spawn({"load", c.master(), std::to_string(i), "300", "6"}));
  }
  for (pid_t p : loads) EXPECT_EQ(Cluster::Wait(p, absl::Seconds(60)), 0) << "torn/foreign read";
  // Quiesced: every client sees the same thing through the master.
  auto a = c.NewClient();
  auto b = c.NewClient(TcpOnly());
  for (int key = 0; key < 6; ++key) {
    const std::string k = "key" + std::to_string(key);
    auto ra = a->Get(k);
    auto rb = b->Get(k);
    ASSERT_EQ(ra.ok(), rb.ok()) << k;
    if (ra.ok()) {
      EXPECT_EQ(*ra, *rb);
    }
    EXPECT_EQ(*a->Exists(k), ra.ok());
  }
}

TEST(StoreProcesses, HotKeyFromTheCacheMakesNoMasterRpc) {
  Cluster c;
  c.AddWorker(4 << 20);
  auto ch = rpc::TcpChannel::Connect(c.master());
  ASSERT_TRUE(ch.ok());
  store_testing::CountingChannel<rpc::TcpChannel> counting(ch->get());
  auto cl = client::Client<store_testing::CountingChannel<rpc::TcpChannel>>::Create({}, &counting);
  ASSERT_TRUE(cl.ok());
  ASSERT_TRUE((*cl)->Put("hot", Value(64 << 10, 1)).ok());
  ASSERT_TRUE((*cl)->Get("hot").ok());
  const uint64_t before = counting.total();
  const uint64_t reports_before = counting.calls(rpc::TouchObjectsMethod::kId);
  int hits = 0;
  // Gets inside the lease (1 s, less the margin) make no RPC of their own;
  // the reports of cached reads are one call per cached_read_report_ms
  // (100 ms), however many reads they carry.
  const absl::Time start = absl::Now();
  const absl::Time until = start + absl::Milliseconds(300);
  while (absl::Now() < until) {
    ASSERT_EQ(*(*cl)->Get("hot"), Value(64 << 10, 1));
    ++hits;
  }
  const uint64_t reports = counting.calls(rpc::TouchObjectsMethod::kId) - reports_before;
  EXPECT_EQ(counting.total() - reports, before) << hits << " cached gets";
  EXPECT_LE(reports, static_cast<uint64_t>(absl::ToInt64Milliseconds(absl::Now() - start) / 100));
  EXPECT_GT(hits, 10);
}

TEST(StoreProcesses, EvictionUnderPressureNeverReturnsWrongBytes) {
  Cluster c;
  c.AddWorker(2 << 20);
  auto cl = c.NewClient();
  int ok = 0;
  for (int i = 0; i < 200; ++i) {  // 200 x 64 KiB = 12.5 MiB into 2 MiB
    const absl::Status s = cl->Put("e" + std::to_string(i), Value(64 << 10, i));
    ok += s.ok();
    EXPECT_TRUE(s.ok() || absl::IsResourceExhausted(s)) << s;
  }
  EXPECT_GT(ok, 150) << "eviction makes room";
  int found = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = cl->Get("e" + std::to_string(i), {.bypass_cache = true});
    if (r.ok()) {
      ++found;
      EXPECT_EQ(*r, Value(64 << 10, i));
    } else {
      EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
    }
  }
  EXPECT_GT(found, 0);
  EXPECT_LT(found, 200) << "something was evicted";
}

TEST(StoreProcesses, WorkerKilledMidPutAndMidGet) {
  Cluster c;
  const pid_t victim = c.AddWorker(16 << 20);
  c.AddWorker(16 << 20);
  auto cl = c.NewClient(TcpOnly());
  auto shm = c.NewClient();
  client::PutOptions two;
  two.replica_count = 2;
  std::vector<int> committed;
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ::kill(victim, SIGKILL);
  });
  // At most 200 x 32 KiB per worker: well under the eviction watermark, so
  // every committed object must stay readable.
  const absl::Time end = absl::Now() + absl::Seconds(2);
  for (int i = 0; i < 200 && absl::Now() < end; ++i) {
    const std::string k = "p" + std::to_string(i);
    const absl::Status s = cl->Put(k, Value(32 << 10, i), two);
    if (s.ok()) committed.push_back(i);
    EXPECT_TRUE(s.ok() || absl::IsUnavailable(s) || absl::IsResourceExhausted(s) ||
                absl::IsDeadlineExceeded(s) || absl::IsNotFound(s) ||
                absl::IsFailedPrecondition(s) || absl::IsAborted(s))
        << s;
    for (auto* reader : {cl.get(), shm.get()}) {
      auto r = reader->Get(k);
      if (r.ok()) {
        EXPECT_EQ(*r, Value(32 << 10, i)) << "never corrupt";
      }
    }
  }
  killer.join();
  ASSERT_GT(committed.size(), 2u);
  // After the master dropped the dead worker: every committed object reads
  // whole from the survivor (replica_count 2 put one copy on each).
  absl::SleepFor(absl::Seconds(1));
  for (int i : committed) {
    auto r = cl->Get("p" + std::to_string(i), {.bypass_cache = true});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_EQ(*r, Value(32 << 10, i));
  }
}

TEST(StoreProcesses, ClientThatDiesHoldingALease) {
  Cluster c;
  c.AddWorker(1 << 20);
  auto cl = c.NewClient();
  ASSERT_TRUE(cl->Put("big", Value(700 << 10, 9)).ok());
  EXPECT_EQ(Cluster::Wait(c.Spawn({"lease", c.master(), "big"}), absl::Seconds(20)), 0);
  ASSERT_TRUE(cl->Remove("big").ok());
  // The dead client's lease keeps the space until it ends (1 s)...
  EXPECT_TRUE(absl::IsResourceExhausted(cl->Put("next", Value(700 << 10, 10))));
  // ...then it is reused.
  absl::Status s;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    absl::SleepFor(absl::Milliseconds(100));
    s = cl->Put("next", Value(700 << 10, 10));
  } while (!s.ok() && absl::Now() < deadline);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*cl->Get("next"), Value(700 << 10, 10));
}

TEST(StoreProcesses, BadInputGetsClearErrors) {
  Cluster c(64 << 10);
  c.AddWorker(1 << 20);
  auto cl = c.NewClient();
  using absl::StatusCode;
  EXPECT_EQ(cl->Put("", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cl->Put(std::string(rpc::kMaxKeyBytes + 1, 'k'), "v").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cl->Put("k", std::string((64 << 10) + 1, 'v')).code(), StatusCode::kInvalidArgument)
      << "over the master's max_object_bytes";
  client::PutOptions unknown;
  unknown.tenant = "nobody";
  EXPECT_EQ(cl->Put("k", "v", unknown).code(), StatusCode::kInvalidArgument);
  client::PutOptions known;
  known.tenant = "known";
  EXPECT_TRUE(cl->Put("k", "v", known).ok());
  EXPECT_EQ(cl->Get("k").status().code(), StatusCode::kNotFound) << "another tenant's key";
  EXPECT_EQ(*cl->Get("k", {.tenant = "known"}), "v");
}

TEST(StoreProcesses, GracefulWorkerShutdownUnmounts) {
  Cluster c;
  const pid_t w = c.AddWorker(1 << 20);
  auto cl = c.NewClient();
  ASSERT_TRUE(cl->Put("k", "v").ok());
  ::kill(w, SIGTERM);
  EXPECT_EQ(Cluster::Wait(w, absl::Seconds(20)), 0);
  EXPECT_FALSE(*cl->Exists("k")) << "its replicas were dropped at once";
  const absl::Status s = cl->Put("k2", "v");
  EXPECT_TRUE(absl::IsResourceExhausted(s) || absl::IsUnavailable(s)) << "no segment left: " << s;
}

}  // namespace
}  // namespace mooncake

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: store_process_test <path of store_node>\n");
    return 64;
  }
  mooncake::g_node = argv[1];
  return RUN_ALL_TESTS();
}
