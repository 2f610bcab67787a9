// Preemption demo (docs/elasticity.md): a store of one master and two
// workers, each its own tools/mooncake_store process on loopback, holds
// objects that a client keeps reading. A new worker joins; then worker 1 gets
// a cloud's spot notice (POST /preempt?deadline_ms=N on its HTTP port). Its
// replicas move to the other workers, the new one taking most (placement
// picks the least loaded), within the deadline, and the worker unmounts. The
// demo prints the timeline (notice, drain start, bytes moved, done, first
// read served by the new worker) and checks that no read failed or returned
// wrong bytes.
//
//   bazel run -c opt //examples/preemption:preemption_demo -- --objects=400
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/store/client.h"
#include "mooncake/store/rpc/call.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/tcp_channel.h"
#include "tools/bench/child_process.h"
#include "tools/bench/servers.h"
#include "tools/bench/text_query.h"

ABSL_FLAG(std::string, store_binary, "", "tools/mooncake_store; empty: the one in the runfiles");
ABSL_FLAG(int32_t, objects, 200, "objects put before the notice");
ABSL_FLAG(int32_t, value_kib, 256, "bytes of each object, in KiB");
ABSL_FLAG(int64_t, deadline_ms, 10'000, "the notice's deadline (ms)");
ABSL_FLAG(std::string, dir, "", "where logs go; empty: a new directory under TEST_TMPDIR or /tmp");

namespace mooncake::examples {
namespace {

namespace proto = ::mooncake::store::proto;

using Node = bench::StoreNode;

absl::StatusOr<Node> Start(const std::string& binary, const std::string& dir,
                           const std::string& name, std::vector<std::string> flags) {
  return bench::StartStoreNode({.binary = binary,
                                .flags = std::move(flags),
                                .ready_file = absl::StrCat(dir, "/", name, ".ready"),
                                .log = absl::StrCat(dir, "/", name, ".log"),
                                .name = name});
}

// The worker ids the master's /metrics lists (one series per live worker).
std::set<std::string> WorkerIds(const std::string& master_http) {
  std::set<std::string> out;
  absl::StatusOr<std::string> text = bench::HttpGet(master_http, "/metrics");
  if (!text.ok()) return out;
  constexpr std::string_view kSeries = "mooncake_master_worker_used_bytes{worker=\"";
  for (size_t at = text->find(kSeries); at != std::string::npos; at = text->find(kSeries, at + 1)) {
    const size_t begin = at + kSeries.size();
    out.insert(text->substr(begin, text->find('"', begin) - begin));
  }
  return out;
}

// The one worker id that appears once `start` has run.
absl::StatusOr<std::string> StartWorker(const std::string& binary, const std::string& dir,
                                        const std::string& name, const Node& master,
                                        std::vector<Node>& nodes) {
  const std::set<std::string> before = WorkerIds(master.http);
  ASSIGN_OR_RETURN(Node n, Start(binary, dir, name,
                                 {"--role=worker", absl::StrCat("--master=", master.rpc),
                                  "--segment_bytes=64M", "--reserve_memory=false"}));
  nodes.push_back(std::move(n));
  for (const absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
    for (const std::string& id : WorkerIds(master.http)) {
      if (!before.contains(id)) return id;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(name, " never showed in the master's metrics"));
}

std::string Value(int i, size_t bytes) {
  std::string v(bytes, '\0');
  for (size_t j = 0; j < bytes; ++j) v[j] = static_cast<char>((i * 131 + j * 7) & 0xff);
  return v;
}

// What the reader saw.
struct Reads {
  std::atomic<uint64_t> ok{0}, failed{0}, wrong{0};
  std::atomic<int64_t> first_new_ms{-1};  // first read served by the new worker, since the notice
};

int Run() {
  absl::StatusOr<std::string> binary = bench::FindStoreBinary(absl::GetFlag(FLAGS_store_binary));
  if (!binary.ok()) {
    std::fprintf(stderr, "%s\n", binary.status().ToString().c_str());
    return 2;
  }
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/preemption.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) return 2;
    dir = pattern;
  }
  const int objects = absl::GetFlag(FLAGS_objects);
  const size_t bytes = static_cast<size_t>(absl::GetFlag(FLAGS_value_kib)) << 10;
  auto fail = [](std::string_view what, const absl::Status& s) {
    std::fprintf(stderr, "preemption_demo: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
                 s.ToString().c_str());
    return 1;
  };

  absl::StatusOr<Node> master =
      Start(*binary, dir, "master", {"--role=master", "--listen=127.0.0.1:0"});
  if (!master.ok()) return fail("master", master.status());
  std::vector<Node> workers;
  absl::StatusOr<std::string> w1 = StartWorker(*binary, dir, "worker1", *master, workers);
  if (!w1.ok()) return fail("worker 1", w1.status());
  absl::StatusOr<std::string> w2 = StartWorker(*binary, dir, "worker2", *master, workers);
  if (!w2.ok()) return fail("worker 2", w2.status());

  absl::StatusOr<std::unique_ptr<rpc::TcpChannel>> channel = rpc::TcpChannel::Connect(master->rpc);
  if (!channel.ok()) return fail("channel", channel.status());
  client::ClientOptions co;
  co.use_local = false;
  co.use_shm = false;        // over TCP, from the workers' transports
  co.cache_enabled = false;  // every read asks the master where the object is now
  absl::StatusOr<std::unique_ptr<client::Client<rpc::TcpChannel>>> client =
      client::Client<rpc::TcpChannel>::Create(co, channel->get());
  if (!client.ok()) return fail("client", client.status());
  for (int i = 0; i < objects; ++i) {
    if (absl::Status s = (*client)->Put(absl::StrCat("obj", i), Value(i, bytes)); !s.ok()) {
      return fail("put", s);
    }
  }
  absl::StatusOr<std::string> w3 = StartWorker(*binary, dir, "new_worker", *master, workers);
  if (!w3.ok()) return fail("new worker", w3.status());
  std::printf("1 master, workers 1 and 2 holding %d objects of %zu KiB; a new worker joined\n",
              objects, bytes >> 10);

  // Where each object is (a GetReplicas of our own, its lease released).
  auto where = [&](const std::string& key) -> std::optional<std::string> {
    proto::GetReplicasRequest req;
    req.set_key(key);
    auto r = rpc::Call<rpc::GetReplicasMethod>(**channel, req, {});
    if (!r.ok() || r->replicas().empty()) return std::nullopt;
    proto::ReleaseLeasesRequest rel;
    rel.add_lease_ids(r->lease().lease_id());
    rpc::Call<rpc::ReleaseLeasesMethod>(**channel, rel, {}).IgnoreError();
    return r->replicas(0).worker_id();
  };
  int on_w1 = 0;
  for (int i = 0; i < objects; ++i) on_w1 += where(absl::StrCat("obj", i)) == *w1 ? 1 : 0;

  Reads reads;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> notice_ns{0};
  std::thread reader([&] {
    std::vector<char> buf(bytes);
    for (int i = 0; !stop.load(); i = (i + 1) % objects) {
      const std::string key = absl::StrCat("obj", i);
      const std::optional<std::string> w = where(key);
      absl::StatusOr<size_t> n = (*client)->GetInto(key, buf.data(), buf.size());
      if (!n.ok()) {
        ++reads.failed;
        continue;
      }
      if (std::string_view(buf.data(), *n) != Value(i, bytes)) {
        ++reads.wrong;
        continue;
      }
      ++reads.ok;
      const int64_t t0 = notice_ns.load();
      if (t0 != 0 && w == *w3 && reads.first_new_ms.load() < 0) {
        reads.first_new_ms = (absl::GetCurrentTimeNanos() - t0) / 1'000'000;
      }
    }
  });
  absl::SleepFor(absl::Milliseconds(300));  // reads before the notice

  notice_ns = absl::GetCurrentTimeNanos();
  absl::StatusOr<std::string> answer =
      bench::HttpCall("POST", workers[0].http,
                      absl::StrCat("/preempt?deadline_ms=", absl::GetFlag(FLAGS_deadline_ms)),
                      static_cast<int>(absl::GetFlag(FLAGS_deadline_ms)) + 10'000);
  const int64_t answered_ms = (absl::GetCurrentTimeNanos() - notice_ns.load()) / 1'000'000;
  for (const absl::Time until = absl::Now() + absl::Seconds(5);
       reads.first_new_ms.load() < 0 && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  stop = true;
  reader.join();
  if (!answer.ok()) return fail("POST /preempt", answer.status());

  std::map<std::string, int> now_on;
  for (int i = 0; i < objects; ++i) {
    std::optional<std::string> w = where(absl::StrCat("obj", i));
    ++now_on[!w.has_value() ? "lost"
             : *w == *w3    ? "new worker"
             : *w == *w2    ? "worker 2"
                            : "worker 1"];
  }
  auto field = [&](std::string_view name) -> std::string {
    const std::string key = absl::StrCat("\"", AbslView(name), "\":");
    const size_t at = answer->find(key);
    if (at == std::string::npos) return "?";
    const size_t begin = at + key.size();
    std::string v = answer->substr(begin, answer->find_first_of(",}", begin) - begin);
    if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
    return v;
  };
  std::printf("timeline (ms after the notice):\n");
  std::printf("  %6d  notice: POST /preempt?deadline_ms=%lld to worker 1 (%d of its objects)\n", 0,
              static_cast<long long>(absl::GetFlag(FLAGS_deadline_ms)), on_w1);
  std::printf("  %6s  drain started\n", field("drain_start_ms").c_str());
  std::printf("  %6s  drain %s: %s objects moved, %s bytes, %s left\n",
              field("drain_done_ms").c_str(), field("state").c_str(),
              field("objects_moved").c_str(), field("bytes_moved").c_str(),
              field("objects_left").c_str());
  std::printf("  %6s  worker 1 unmounted: it may go (answered at %lld)\n", field("done_ms").c_str(),
              static_cast<long long>(answered_ms));
  std::printf("  %6lld  first read served by the new worker\n",
              static_cast<long long>(reads.first_new_ms.load()));
  std::printf("objects now: new worker %d, worker 2 %d, worker 1 %d, lost %d\n",
              now_on["new worker"], now_on["worker 2"], now_on["worker 1"], now_on["lost"]);
  std::printf("reads: %llu ok, %llu failed, %llu wrong\n",
              static_cast<unsigned long long>(reads.ok.load()),
              static_cast<unsigned long long>(reads.failed.load()),
              static_cast<unsigned long long>(reads.wrong.load()));
  client->reset();
  for (Node& n : workers) ::kill(n.process.pid(), SIGKILL);
  ::kill(master->process.pid(), SIGKILL);
  const bool ok = reads.failed == 0 && reads.wrong == 0 && now_on["lost"] == 0 &&
                  now_on["worker 1"] == 0 && reads.first_new_ms.load() >= 0;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace mooncake::examples

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mooncake::examples::Run();
}
