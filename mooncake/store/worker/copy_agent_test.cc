#include "mooncake/store/worker/copy_agent.h"

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/value_checksum.h"
#include "mooncake/qos/shm_arbiter.h"
#include "mooncake/store/client/testing/fake_master.h"
#include "mooncake/store/rpc/inproc_channel.h"
#include "mooncake/store/rpc/master_methods.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/worker/worker.h"

namespace mooncake::worker {
namespace {

namespace proto = ::mooncake::store::proto;
using store_testing::FakeMaster;

// The master's side of CopySync and drains, as far as these tests need it:
// tasks queued per worker id, results collected by task id; DrainStatus
// answers RUNNING `running_polls` times, then `final_state`.
class FakeCopyMaster {
 public:
  absl::Status RegisterOn(rpc::ServiceRegistry* registry) {
    RETURN_IF_ERROR(registry->Register<rpc::CopySyncMethod>(
        [this](const proto::CopySyncRequest& r) { return CopySync(r); }));
    RETURN_IF_ERROR(registry->Register<rpc::DrainWorkerMethod>(
        [this](const proto::DrainWorkerRequest& r) -> absl::StatusOr<proto::DrainWorkerResponse> {
          MutexLock lock(&mu_);
          drain_requests_.push_back(r);
          proto::DrainWorkerResponse out;
          out.mutable_status()->set_state(proto::DRAIN_RUNNING);
          out.mutable_status()->set_objects_total(3);
          out.mutable_status()->set_deadline_ms(r.deadline_ms());
          return out;
        }));
    return registry->Register<rpc::DrainStatusMethod>(
        [this](const proto::DrainStatusRequest&) -> absl::StatusOr<proto::DrainStatusResponse> {
          MutexLock lock(&mu_);
          ++status_polls_;
          proto::DrainStatusResponse out;
          proto::DrainStatus* s = out.mutable_status();
          s->set_objects_total(3);
          if (status_polls_ <= running_polls_) {
            s->set_state(proto::DRAIN_RUNNING);
          } else {
            s->set_state(final_state_);
            s->set_objects_moved(2);
            s->set_objects_dropped(1);
            s->set_bytes_moved(4096);
          }
          return out;
        });
  }

  void Queue(const std::string& worker_id, proto::CopyTask t) {
    MutexLock lock(&mu_);
    tasks_[worker_id].push_back(std::move(t));
  }

  // The result reported for `task_id`, waiting up to `timeout` for it.
  std::optional<proto::CopyTaskResult> WaitResult(uint64_t task_id,
                                                  absl::Duration timeout = absl::Seconds(20)) {
    MutexLock lock(&mu_);
    auto has = [&] { return results_.contains(task_id); };
    mu_.AwaitWithTimeout(Condition(&has), timeout);
    if (!has()) return std::nullopt;
    return results_[task_id];
  }

  void SetDrain(int running_polls, proto::DrainState final_state) {
    MutexLock lock(&mu_);
    running_polls_ = running_polls;
    final_state_ = final_state;
  }
  std::vector<proto::DrainWorkerRequest> drain_requests() {
    MutexLock lock(&mu_);
    return drain_requests_;
  }

 private:
  absl::StatusOr<proto::CopySyncResponse> CopySync(const proto::CopySyncRequest& r) {
    MutexLock lock(&mu_);
    for (const proto::CopyTaskResult& x : r.results()) results_[x.task_id()] = x;
    std::deque<proto::CopyTask>& q = tasks_[r.worker_id()];
    // A short long poll: the handler runs on the caller's thread in process.
    mu_.AwaitWithTimeout(Condition(
                             +[](std::deque<proto::CopyTask>* d) { return !d->empty(); }, &q),
                         std::min(absl::Milliseconds(r.wait_ms()), absl::Milliseconds(50)));
    proto::CopySyncResponse out;
    while (!q.empty() && out.tasks_size() < static_cast<int>(r.max_tasks())) {
      *out.add_tasks() = q.front();
      q.pop_front();
    }
    return out;
  }

  Mutex mu_;
  std::map<std::string, std::deque<proto::CopyTask>> tasks_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, proto::CopyTaskResult> results_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::DrainWorkerRequest> drain_requests_ ABSL_GUARDED_BY(mu_);
  int status_polls_ ABSL_GUARDED_BY(mu_) = 0;
  int running_polls_ ABSL_GUARDED_BY(mu_) = 0;
  proto::DrainState final_state_ ABSL_GUARDED_BY(mu_) = proto::DRAIN_DONE;
};

using TestWorker = Worker<rpc::InProcessChannel>;

struct Env {
  // `qos_link` set: both workers copy over TCP only, taking grants from it.
  explicit Env(std::string qos_link = "") : master(Options()), qos_link(std::move(qos_link)) {
    EXPECT_TRUE(master.RegisterOn(&registry).ok());
    EXPECT_TRUE(copy.RegisterOn(&registry).ok());
    channel = std::make_unique<rpc::InProcessChannel>(&registry);
    a = StartWorker("a");
    b = StartWorker("b");
  }
  static store_testing::FakeMasterOptions Options() {
    store_testing::FakeMasterOptions o;
    o.heartbeat_timeout_ms = 600'000;  // the tests send no heartbeats
    return o;
  }
  std::unique_ptr<TestWorker> StartWorker(const std::string& name) {
    WorkerOptions o;
    o.segment_name = name;
    o.segment_bytes = 1 << 20;
    o.heartbeat_thread = false;
    o.copy_agent_options.poll_wait_ms = 200;
    o.copy_agent_options.transfer_timeout_ms = 5'000;
    if (!qos_link.empty()) {
      o.serve_local = o.serve_shm = false;
      o.qos_link = qos_link;
      o.qos_link_bytes_per_s = 10'000'000'000;
    }
    auto w = TestWorker::Start(o, channel.get());
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }

  FakeMaster master;
  std::string qos_link;
  FakeCopyMaster copy;
  rpc::ServiceRegistry registry;
  std::unique_ptr<rpc::InProcessChannel> channel;
  std::unique_ptr<TestWorker> a, b;
};

// Fills [off, off + len) of `w`'s first segment with a pattern; returns its bytes.
std::vector<uint8_t> Fill(TestWorker& w, uint64_t off, uint64_t len, uint8_t seed) {
  std::vector<uint8_t> v(len);
  for (uint64_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  std::memcpy(static_cast<uint8_t*>(w.segments()[0].data) + off, v.data(), len);
  return v;
}

std::vector<uint8_t> Read(TestWorker& w, uint64_t off, uint64_t len) {
  const auto* p = static_cast<const uint8_t*>(w.segments()[0].data) + off;
  return std::vector<uint8_t>(p, p + len);
}

proto::CopyTask Task(uint64_t id, TestWorker& src, uint64_t src_off, TestWorker& dst,
                     uint64_t dst_off, const std::vector<uint8_t>& value) {
  proto::CopyTask t;
  t.set_task_id(id);
  t.set_key("k" + std::to_string(id));
  t.set_version(id);
  t.set_src_segment_id(src.segments()[0].master_segment_id);
  t.set_src_offset(src_off);
  t.set_length(value.size());
  t.set_dst_segment_id(dst.segments()[0].master_segment_id);
  t.set_dst_router_endpoint(dst.router_endpoint());
  t.set_dst_router_segment_id(dst.segments()[0].router_segment_id);
  t.set_dst_offset(dst_off);
  t.set_checksum(ValueChecksum(value.data(), value.size()));
  t.set_checksum_format(static_cast<proto::ChecksumFormat>(kChecksumChunked));
  return t;
}

TEST(CopyAgent, CopiesVerifiedBytesIntoAnotherWorkersSegment) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  ASSERT_NE(env.b, nullptr);
  // Spans several 64 KiB digest chunks, and one value in the older format.
  const std::vector<uint8_t> v1 = Fill(*env.a, 4096, 200'000, 1);
  const std::vector<uint8_t> v2 = Fill(*env.a, 300'000, 777, 2);
  proto::CopyTask t2 = Task(2, *env.a, 300'000, *env.b, 600'000, v2);
  t2.set_checksum(FastStableHash64(v2.data(), v2.size()));
  t2.set_checksum_format(static_cast<proto::ChecksumFormat>(kChecksumWholeXxh3));
  env.copy.Queue(env.a->worker_id(), Task(1, *env.a, 4096, *env.b, 8192, v1));
  env.copy.Queue(env.a->worker_id(), t2);

  for (uint64_t id : {1, 2}) {
    auto r = env.copy.WaitResult(id);
    ASSERT_TRUE(r.has_value()) << "task " << id << " never reported";
    EXPECT_EQ(r->code(), 0u) << r->message();
  }
  EXPECT_EQ(Read(*env.b, 8192, v1.size()), v1);
  EXPECT_EQ(Read(*env.b, 600'000, v2.size()), v2);
  const CopyAgentStats st = env.a->copy_agent()->stats();
  EXPECT_EQ(st.tasks_done, 2u);
  EXPECT_EQ(st.tasks_failed, 0u);
  EXPECT_EQ(st.bytes_copied, v1.size() + v2.size());

  // The cached destination handle serves a later task too.
  const std::vector<uint8_t> v3 = Fill(*env.a, 500'000, 1000, 3);
  env.copy.Queue(env.a->worker_id(), Task(3, *env.a, 500'000, *env.b, 0, v3));
  auto r3 = env.copy.WaitResult(3);
  ASSERT_TRUE(r3.has_value());
  EXPECT_EQ(r3->code(), 0u) << r3->message();
  EXPECT_EQ(Read(*env.b, 0, v3.size()), v3);
}

// WorkerOptions::qos_link: copies between workers take bulk grants from the
// host's link arbiter, and give them back.
TEST(CopyAgent, CopiesTakeBulkGrantsFromTheLinkArbiter) {
  const std::string link = absl::StrCat("copy_agent_test.", std::random_device{}());
  {
    Env env(link);
    ASSERT_NE(env.a, nullptr);
    ASSERT_NE(env.b, nullptr);
    const std::vector<uint8_t> v = Fill(*env.a, 0, 300'000, 5);
    env.copy.Queue(env.a->worker_id(), Task(1, *env.a, 0, *env.b, 4096, v));
    auto r = env.copy.WaitResult(1);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->code(), 0u) << r->message();
    EXPECT_EQ(Read(*env.b, 4096, v.size()), v);
    auto arb = qos::ShmArbiter::Open(link, 10'000'000'000);
    ASSERT_TRUE(arb.ok()) << arb.status();
    const auto stats = (*arb)->Stats();
    EXPECT_GE(stats.classes[1].granted_bytes, v.size());
    EXPECT_EQ(stats.classes[0].granted_bytes, 0u);
    EXPECT_EQ(stats.classes[1].inflight_bytes, 0);
  }
  // A link without its rate is refused at start.
  {
    WorkerOptions o;
    o.segment_bytes = 1 << 20;
    o.heartbeat_thread = false;
    o.qos_link = link;
    store_testing::FakeMaster m(Env::Options());
    rpc::ServiceRegistry registry;
    ASSERT_TRUE(m.RegisterOn(&registry).ok());
    rpc::InProcessChannel ch(&registry);
    EXPECT_EQ(TestWorker::Start(o, &ch).status().code(), absl::StatusCode::kInvalidArgument);
  }
  ASSERT_TRUE(qos::ShmArbiter::Remove(link).ok());
}

TEST(CopyAgent, ChecksumMismatchIsDataLossAndWritesNothing) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  ASSERT_NE(env.b, nullptr);
  const std::vector<uint8_t> v = Fill(*env.a, 0, 70'000, 9);
  proto::CopyTask t = Task(7, *env.a, 0, *env.b, 4096, v);
  t.set_checksum(t.checksum() ^ 1);
  env.copy.Queue(env.a->worker_id(), t);
  auto r = env.copy.WaitResult(7);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code(), static_cast<uint32_t>(absl::StatusCode::kDataLoss)) << r->message();
  EXPECT_EQ(Read(*env.b, 4096, v.size()), std::vector<uint8_t>(v.size(), 0));
  EXPECT_EQ(env.a->copy_agent()->stats().tasks_failed, 1u);
  EXPECT_EQ(env.a->copy_agent()->stats().bytes_copied, 0u);
}

TEST(CopyAgent, UnknownSourceSegmentIsNotFound) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  ASSERT_NE(env.b, nullptr);
  const std::vector<uint8_t> v = Fill(*env.a, 0, 100, 4);
  proto::CopyTask t = Task(8, *env.a, 0, *env.b, 0, v);
  t.set_src_segment_id(987'654);
  env.copy.Queue(env.a->worker_id(), t);
  auto r = env.copy.WaitResult(8);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code(), static_cast<uint32_t>(absl::StatusCode::kNotFound)) << r->message();
}

TEST(CopyAgent, RangePastTheSegmentIsOutOfRange) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  ASSERT_NE(env.b, nullptr);
  const std::vector<uint8_t> v = Fill(*env.a, 0, 100, 4);
  env.copy.Queue(env.a->worker_id(), Task(9, *env.a, 0, *env.b, (1 << 20) - 50, v));
  auto r = env.copy.WaitResult(9);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code(), static_cast<uint32_t>(absl::StatusCode::kOutOfRange)) << r->message();
}

TEST(CopyAgent, DeadDestinationFailsInsteadOfHanging) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  ASSERT_NE(env.b, nullptr);
  const std::vector<uint8_t> v = Fill(*env.a, 0, 5000, 5);
  env.b->Abandon();  // stops serving its segments, as a crash would
  env.copy.Queue(env.a->worker_id(), Task(10, *env.a, 0, *env.b, 0, v));
  proto::CopyTask gone = Task(11, *env.a, 0, *env.b, 0, v);
  gone.set_dst_router_endpoint("not-a-router-endpoint");
  env.copy.Queue(env.a->worker_id(), gone);
  const absl::Time start = absl::Now();
  for (uint64_t id : {10, 11}) {
    auto r = env.copy.WaitResult(id);
    ASSERT_TRUE(r.has_value()) << "task " << id << " hung";
    EXPECT_NE(r->code(), 0u);
    EXPECT_FALSE(r->message().empty());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_EQ(env.a->copy_agent()->stats().tasks_failed, 2u);
}

TEST(CopyAgent, StopReturnsPromptly) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  absl::SleepFor(absl::Milliseconds(300));  // a long poll is in flight or about to be
  const absl::Time start = absl::Now();
  EXPECT_TRUE(env.a->Shutdown().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_GT(env.a->copy_agent()->stats().polls, 0u);
}

TEST(WorkerDrain, PollsUntilTheDrainEnds) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  env.copy.SetDrain(/*running_polls=*/2, proto::DRAIN_DONE);
  auto s = env.a->Drain(absl::Seconds(10), 1 << 20);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state(), proto::DRAIN_DONE);
  EXPECT_EQ(s->objects_moved(), 2u);
  EXPECT_EQ(s->bytes_moved(), 4096u);
  auto asked = env.copy.drain_requests();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].worker_id(), env.a->worker_id());
  EXPECT_EQ(asked[0].deadline_ms(), 10'000u);
  EXPECT_EQ(asked[0].bandwidth_bytes_per_sec(), uint64_t{1} << 20);
  // Still mounted: the caller shuts down.
  EXPECT_NE(env.a->segments()[0].master_segment_id, 0u);
}

TEST(WorkerDrain, GivesUpAfterTheDeadlineAndGrace) {
  Env env;
  ASSERT_NE(env.a, nullptr);
  env.copy.SetDrain(/*running_polls=*/1'000'000, proto::DRAIN_DONE);
  const absl::Time start = absl::Now();
  auto s = env.a->Drain(absl::Milliseconds(100), 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->state(), proto::DRAIN_RUNNING);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100) + kDrainGrace);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(env.a->Drain(absl::ZeroDuration(), 0).ok());
}

}  // namespace
}  // namespace mooncake::worker
