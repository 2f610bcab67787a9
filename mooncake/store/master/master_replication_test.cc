// The master's copies between workers (internal/replication_path.h): copy
// and move tasks, drain, re-replication and hot replicas. Scripted workers
// answer CopySync by hand; time is a FakeClock.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mooncake/base/clock.h"
#include "mooncake/store/master/master.h"
#include "mooncake/store/master/master_testing.h"
#include "mooncake/store/rpc/master_methods.h"

namespace mooncake::master {
namespace {

namespace proto = ::mooncake::store::proto;
using testing_internal::EndReq;
using testing_internal::GetReq;
using testing_internal::MountReq;
using testing_internal::PutReq;

constexpr uint64_t kObject = 4096;
constexpr uint64_t kSegment = 16 * kObject;

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MasterConformance);

class MasterReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override { Make({}); }

  // Drains are unpaced unless a test asks (the clock only moves by hand).
  void Make(MasterOptions o, int workers = 3, uint64_t drain_bandwidth = 0, double drain_pace = 0) {
    o.shard_count = 4;
    o.replication.drain_bandwidth = drain_bandwidth;
    o.replication.drain_pace = drain_pace;
    o.placement = PlacementStrategy::kLeastLoaded;
    auto m = Master<>::Create(o, &clock_);
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
    segments_.clear();
    for (int i = 0; i < workers; ++i) Mount(absl::StrCat("w", i), absl::StrCat("seg", i));
  }

  // A master whose drains are paced (drain_pace 0.5, no floor, batches of 4)
  // with 8 objects on w0's segment.
  void MakePacedWithEightOnW0(uint64_t drain_bandwidth) {
    MasterOptions o;
    o.replication.drain_min_bandwidth = 1;
    o.replication.max_in_flight_per_worker = 4;
    Make(o, 3, drain_bandwidth, /*drain_pace=*/0.5);
    for (int i = 0; i < 8; ++i) Put(absl::StrCat("k", i), "seg0");
  }

  uint64_t Mount(const std::string& worker, const std::string& name) {
    proto::MountSegmentRequest req = MountReq(worker, name, kSegment);
    req.mutable_segment()->mutable_endpoint()->set_router_endpoint("router://" + worker);
    req.mutable_segment()->mutable_endpoint()->set_router_segment_id(7);
    auto r = master_->MountSegment(req);
    EXPECT_TRUE(r.ok()) << r.status();
    segments_[worker] = r.ok() ? r->segment_id() : 0;
    return segments_[worker];
  }

  // Puts `key` with its first replica on `on` (a segment name).
  uint64_t Put(const std::string& key, const std::string& on, uint32_t replicas = 1) {
    proto::PutStartRequest req = PutReq(key, kObject, replicas);
    req.mutable_options()->add_preferred_segment_names(on);
    auto start = master_->PutStart(req);
    EXPECT_TRUE(start.ok()) << start.status();
    if (!start.ok()) return 0;
    auto end = master_->PutEnd(EndReq(key, start->put_id()));
    EXPECT_TRUE(end.ok()) << end.status();
    return end.ok() ? end->object().version() : 0;
  }

  // The workers (ids) of `key`'s readable replicas; a read, with its lease released.
  std::set<std::string> ReplicaWorkers(const std::string& key) {
    auto r = master_->GetReplicas(GetReq(key));
    if (!r.ok()) return {};
    std::set<std::string> out;
    for (const proto::Replica& rep : r->replicas()) out.insert(rep.worker_id());
    Release(r->lease().lease_id());
    return out;
  }

  void Release(uint64_t lease) {
    proto::ReleaseLeasesRequest rel;
    rel.add_lease_ids(lease);
    ASSERT_TRUE(master_->ReleaseLeases(rel).ok());
  }

  std::vector<proto::CopyTask> Sync(const std::string& worker,
                                    const std::vector<std::pair<uint64_t, absl::Status>>& results) {
    proto::CopySyncRequest req;
    req.set_worker_id(worker);
    req.set_max_tasks(64);
    for (const auto& [id, st] : results) {
      proto::CopyTaskResult* r = req.add_results();
      r->set_task_id(id);
      r->set_code(static_cast<uint32_t>(st.code()));
      r->set_message(std::string(st.message()));
    }
    auto resp = master_->CopySync(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return {};
    return {resp->tasks().begin(), resp->tasks().end()};
  }

  // Runs every task `worker` has, answering `st`; returns how many ran.
  size_t RunAll(const std::string& worker, absl::Status st = absl::OkStatus()) {
    size_t n = 0;
    std::vector<proto::CopyTask> tasks = Sync(worker, {});
    while (!tasks.empty()) {
      std::vector<std::pair<uint64_t, absl::Status>> res;
      for (const proto::CopyTask& t : tasks) res.emplace_back(t.task_id(), st);
      n += tasks.size();
      tasks = Sync(worker, res);
    }
    return n;
  }

  proto::QueryTaskResponse Query(uint64_t id) {
    proto::QueryTaskRequest q;
    q.set_task_id(id);
    auto r = master_->QueryTask(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : proto::QueryTaskResponse();
  }

  proto::DrainStatus Drain(const std::string& worker, uint64_t deadline_ms = 60'000) {
    proto::DrainWorkerRequest req;
    req.set_worker_id(worker);
    req.set_deadline_ms(deadline_ms);
    req.set_bandwidth_bytes_per_sec(0);
    auto r = master_->DrainWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->status() : proto::DrainStatus();
  }

  // Drains `worker`, running its copies until none is left; its final status.
  proto::DrainStatus DrainToTheEnd(const std::string& worker) {
    Drain(worker);
    while (RunAll(worker) > 0) master_->Tick();
    master_->Tick();
    return DrainState(worker);
  }

  proto::DrainStatus DrainState(const std::string& worker) {
    proto::DrainStatusRequest req;
    req.set_worker_id(worker);
    auto r = master_->DrainStatus(req);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->status() : proto::DrainStatus();
  }

  void Heartbeat(const std::string& worker) {
    proto::HeartbeatRequest h;
    h.set_worker_id(worker);
    h.set_sequence(++seq_);
    ASSERT_TRUE(master_->Heartbeat(h).ok());
  }

  FakeClock clock_{1'000'000'000};
  std::unique_ptr<Master<>> master_;
  std::map<std::string, uint64_t> segments_;
  uint64_t seq_ = 0;
};

TEST_F(MasterReplicationTest, CopyTaskAddsAReplicaVisibleOnlyOnceCopied) {
  Put("k", "seg0");
  proto::CreateCopyTaskRequest req;
  req.set_key("k");
  req.add_targets("seg2");
  auto created = master_->CreateCopyTask(req);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(Query(created->task_id()).status(), proto::REPLICA_TASK_PENDING);
  EXPECT_EQ(ReplicaWorkers("k"), std::set<std::string>({"w0"}));

  std::vector<proto::CopyTask> tasks = Sync("w0", {});
  ASSERT_EQ(tasks.size(), 1u);
  const proto::CopyTask& t = tasks[0];
  EXPECT_EQ(t.key(), "k");
  EXPECT_EQ(t.src_segment_id(), segments_["w0"]);
  EXPECT_EQ(t.dst_segment_id(), segments_["w2"]);
  EXPECT_EQ(t.dst_router_endpoint(), "router://w2");
  EXPECT_EQ(t.dst_router_segment_id(), 7u);
  EXPECT_EQ(t.length(), kObject);
  EXPECT_EQ(t.checksum(), 0x1234u);
  EXPECT_EQ(Query(created->task_id()).status(), proto::REPLICA_TASK_PROCESSING);
  EXPECT_EQ(ReplicaWorkers("k"), std::set<std::string>({"w0"}));  // copying: not readable
  EXPECT_EQ(master_->Stats().used_bytes, 2 * kObject);

  EXPECT_TRUE(Sync("w0", {{t.task_id(), absl::OkStatus()}}).empty());
  const proto::QueryTaskResponse q = Query(created->task_id());
  EXPECT_EQ(q.status(), proto::REPLICA_TASK_SUCCESS);
  EXPECT_EQ(q.type(), proto::REPLICA_COPY);
  EXPECT_EQ(q.assigned_worker(), "w0");
  EXPECT_GT(q.created_at_ms_epoch(), 0);
  EXPECT_EQ(ReplicaWorkers("k"), std::set<std::string>({"w0", "w2"}));
}

TEST_F(MasterReplicationTest, AFailedCopyFreesItsRangeAndFailsTheTask) {
  Put("k", "seg0");
  proto::CreateCopyTaskRequest req;
  req.set_key("k");
  req.add_targets("seg1");
  auto created = master_->CreateCopyTask(req);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(RunAll("w0", absl::DataLossError("source bytes do not match the checksum")), 1u);
  const proto::QueryTaskResponse q = Query(created->task_id());
  EXPECT_EQ(q.status(), proto::REPLICA_TASK_FAILED);
  EXPECT_EQ(q.message(), "source bytes do not match the checksum");
  EXPECT_EQ(master_->Stats().used_bytes, kObject);
  EXPECT_EQ(ReplicaWorkers("k"), std::set<std::string>({"w0"}));
}

TEST_F(MasterReplicationTest, CopyTaskInputErrors) {
  Put("k", "seg0");
  proto::CreateCopyTaskRequest req;
  req.set_key("k");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->CreateCopyTask(req).status()));  // no target
  req.add_targets("");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->CreateCopyTask(req).status()));
  req.clear_targets();
  req.add_targets("seg1");
  req.set_key("missing");
  EXPECT_TRUE(absl::IsNotFound(master_->CreateCopyTask(req).status()));
  // A target that holds the replica already, or does not exist: the task fails.
  req.set_key("k");
  req.set_targets(0, "seg0");
  auto same = master_->CreateCopyTask(req);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(Query(same->task_id()).status(), proto::REPLICA_TASK_FAILED);
  req.set_targets(0, "nowhere");
  auto none = master_->CreateCopyTask(req);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(Query(none->task_id()).status(), proto::REPLICA_TASK_FAILED);
  proto::QueryTaskRequest q;
  q.set_task_id(999'999);
  EXPECT_TRUE(absl::IsNotFound(master_->QueryTask(q).status()));
}

TEST_F(MasterReplicationTest, MoveDropsTheSourceAfterTheCopyAndWaitsForItsLeases) {
  MasterOptions o;
  o.default_lease_ms = 100;
  o.max_lease_ms = 100;
  Make(o);
  Put("k", "seg0");
  auto leased = master_->GetReplicas(GetReq("k"));  // a reader holds the source
  ASSERT_TRUE(leased.ok());
  proto::CreateMoveTaskRequest req;
  req.set_key("k");
  req.set_source("seg0");
  req.set_target("seg1");
  auto created = master_->CreateMoveTask(req);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(RunAll("w0"), 1u);
  EXPECT_EQ(Query(created->task_id()).status(), proto::REPLICA_TASK_SUCCESS);
  EXPECT_EQ(Query(created->task_id()).type(), proto::REPLICA_MOVE);
  EXPECT_EQ(ReplicaWorkers("k"), std::set<std::string>({"w1"}));
  // The old range is kept while the first reader's lease lives.
  EXPECT_EQ(master_->Stats().used_bytes, 2 * kObject);
  clock_.AdvanceMs(200);
  master_->Tick();
  EXPECT_EQ(master_->Stats().used_bytes, kObject);

  req.set_source("seg0");  // no replica there any more
  EXPECT_TRUE(absl::IsNotFound(master_->CreateMoveTask(req).status()));
  req.set_source("seg1");
  req.set_target("seg1");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->CreateMoveTask(req).status()));
}

TEST_F(MasterReplicationTest, ACopyOfAnObjectRemovedOrReplacedMeanwhileIsNotCommitted) {
  Put("k", "seg0");
  proto::CreateCopyTaskRequest req;
  req.set_key("k");
  req.add_targets("seg1");
  auto created = master_->CreateCopyTask(req);
  ASSERT_TRUE(created.ok());
  std::vector<proto::CopyTask> tasks = Sync("w0", {});
  ASSERT_EQ(tasks.size(), 1u);
  proto::RemoveRequest rm;
  rm.set_key("k");
  ASSERT_TRUE(master_->Remove(rm).ok());
  Put("k", "seg2");  // a new version elsewhere
  Sync("w0", {{tasks[0].task_id(), absl::OkStatus()}});
  EXPECT_EQ(Query(created->task_id()).status(), proto::REPLICA_TASK_FAILED);
  EXPECT_EQ(ReplicaWorkers("k"), std::set<std::string>({"w2"}));
  EXPECT_EQ(master_->Stats().used_bytes, kObject);  // the copy's range went back
}

TEST_F(MasterReplicationTest, TimedOutCopiesQuarantineOnlyRangesAWorkerMayStillWrite) {
  MasterOptions o;
  o.replication.task_timeout_ms = 100;
  Make(o);
  Put("a", "seg0");
  Put("b", "seg0");
  for (const char* key : {"a", "b"}) {
    proto::CreateCopyTaskRequest req;
    req.set_key(key);
    req.add_targets("seg1");
    ASSERT_TRUE(master_->CreateCopyTask(req).ok());
  }
  proto::CopySyncRequest take_one;
  take_one.set_worker_id("w0");
  take_one.set_max_tasks(1);
  ASSERT_EQ(master_->CopySync(take_one)->tasks_size(), 1);  // one issued, one untaken
  master_->Tick();
  clock_.AdvanceMs(200);
  EXPECT_EQ(master_->Tick().copy_tasks_timed_out, 2u);
  // Two objects, plus the issued copy's range quarantined.
  EXPECT_EQ(master_->Stats().used_bytes, 3 * kObject);
  EXPECT_EQ(master_->Stats().copy_tasks, 0u);
}

TEST_F(MasterReplicationTest, DrainMovesEveryObjectHottestFirstAndPlacesNothingNewThere) {
  for (int i = 0; i < 6; ++i) Put(absl::StrCat("k", i), "seg0");
  for (int r = 0; r < 5; ++r) ReplicaWorkers("k4");  // the hottest
  for (int r = 0; r < 2; ++r) ReplicaWorkers("k1");
  const proto::DrainStatus started = Drain("w0");
  EXPECT_EQ(started.state(), proto::DRAIN_RUNNING);
  EXPECT_EQ(started.objects_total(), 6u);
  // No new put lands on a draining worker, even one that asks for it.
  Put("new", "seg0");
  EXPECT_EQ(ReplicaWorkers("new").count("w0"), 0u);

  std::vector<proto::CopyTask> first = Sync("w0", {});
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first[0].key(), "k4");
  if (first.size() > 1) {
    EXPECT_EQ(first[1].key(), "k1");
  }
  std::vector<std::pair<uint64_t, absl::Status>> done;
  for (const auto& t : first) done.emplace_back(t.task_id(), absl::OkStatus());
  std::vector<proto::CopyTask> more = Sync("w0", done);
  while (!more.empty()) {
    done.clear();
    for (const auto& t : more) done.emplace_back(t.task_id(), absl::OkStatus());
    more = Sync("w0", done);
    master_->Tick();
    more = Sync("w0", {});
  }
  master_->Tick();
  const proto::DrainStatus end = DrainState("w0");
  EXPECT_EQ(end.state(), proto::DRAIN_DONE);
  EXPECT_EQ(end.objects_moved(), 6u);
  EXPECT_EQ(end.bytes_moved(), 6 * kObject);
  EXPECT_EQ(end.objects_left(), 0u);
  for (int i = 0; i < 6; ++i) {
    const std::set<std::string> w = ReplicaWorkers(absl::StrCat("k", i));
    EXPECT_EQ(w.size(), 1u);
    EXPECT_EQ(w.count("w0"), 0u) << i;
  }
}

TEST_F(MasterReplicationTest, DrainIsPacedByItsBandwidth) {
  Make({}, 3, /*drain_bandwidth=*/kObject);  // one object a second
  for (int i = 0; i < 3; ++i) Put(absl::StrCat("k", i), "seg0");
  Drain("w0");
  EXPECT_EQ(RunAll("w0"), 1u);  // the first goes at once
  master_->Tick();
  EXPECT_EQ(RunAll("w0"), 0u);
  clock_.AdvanceMs(500);
  master_->Tick();
  EXPECT_EQ(RunAll("w0"), 0u);
  clock_.AdvanceMs(600);
  Heartbeat("w0");
  master_->Tick();
  EXPECT_EQ(RunAll("w0"), 1u);
  EXPECT_EQ(DrainState("w0").objects_moved(), 2u);
}

// With no bandwidth asked, a drain spreads its copies to end by drain_pace of
// its deadline, a batch of max_in_flight_per_worker at a time, and goes as
// fast as drain_bandwidth allows once behind.
TEST_F(MasterReplicationTest, DrainIsPacedOverItsDeadline) {
  MakePacedWithEightOnW0(/*drain_bandwidth=*/256 * kObject);
  Drain("w0", /*deadline_ms=*/16'000);  // paced to end at 8 s: about one object a second
  EXPECT_EQ(RunAll("w0"), 4u);          // the first batch goes at once
  master_->Tick();
  EXPECT_EQ(RunAll("w0"), 0u);
  for (int s = 1; s <= 3; ++s) {
    clock_.AdvanceMs(1'100);
    for (const char* w : {"w0", "w1", "w2"}) Heartbeat(w);
    master_->Tick();
    EXPECT_EQ(RunAll("w0"), 0u) << "the batch's 4 objects are paid for at about 4 s";
  }
  EXPECT_EQ(DrainState("w0").objects_moved(), 4u);
  EXPECT_EQ(DrainState("w0").state(), proto::DRAIN_RUNNING);
  // Past the pace's end (8 s) the rest goes at drain_bandwidth.
  clock_.AdvanceMs(5'000);
  for (const char* w : {"w0", "w1", "w2"}) Heartbeat(w);
  for (int round = 0; round < 4 && DrainState("w0").state() == proto::DRAIN_RUNNING; ++round) {
    master_->Tick();
    RunAll("w0");
  }
  master_->Tick();
  const proto::DrainStatus end = DrainState("w0");
  EXPECT_EQ(end.state(), proto::DRAIN_DONE);
  EXPECT_EQ(end.objects_moved(), 8u) << end.DebugString();
}

// Behind its pace, a paced drain refills each slot at once: one slow copy
// does not hold the others back.
TEST_F(MasterReplicationTest, ABehindPacedDrainDoesNotWaitForItsSlowestCopy) {
  MakePacedWithEightOnW0(/*drain_bandwidth=*/256 * kObject);
  Drain("w0", /*deadline_ms=*/16'000);
  std::vector<proto::CopyTask> batch = Sync("w0", {});
  ASSERT_EQ(batch.size(), 4u);
  clock_.AdvanceMs(9'000);  // past the pace's end (8 s)
  for (const char* w : {"w0", "w1", "w2"}) Heartbeat(w);
  master_->Tick();
  std::vector<std::pair<uint64_t, absl::Status>> done;
  for (size_t i = 0; i + 1 < batch.size(); ++i)
    done.emplace_back(batch[i].task_id(), absl::OkStatus());
  // Three done, one still running: the three slots take new copies now.
  EXPECT_EQ(Sync("w0", done).size(), 3u);
}

// A spot notice (urgent) is never paced.
TEST_F(MasterReplicationTest, AnUrgentDrainIsNotPaced) {
  MakePacedWithEightOnW0(/*drain_bandwidth=*/0);
  proto::DrainWorkerRequest req;
  req.set_worker_id("w0");
  req.set_deadline_ms(16'000);
  req.set_urgent(true);
  ASSERT_TRUE(master_->DrainWorker(req).ok());
  size_t moved = 0;
  for (int round = 0; round < 4; ++round) {
    moved += RunAll("w0");
    master_->Tick();
  }
  EXPECT_EQ(moved, 8u);  // no clock moved: no pacing held any back
  EXPECT_EQ(DrainState("w0").state(), proto::DRAIN_DONE);
}

TEST_F(MasterReplicationTest, DrainIntoAFullWorkerEvictsItsColdestObjects) {
  Make({}, /*workers=*/2);
  for (int i = 0; i < 16; ++i) Put(absl::StrCat("cold", i), "seg1");  // w1 is full
  for (int i = 0; i < 4; ++i) {
    Put(absl::StrCat("hot", i), "seg0");
    ReplicaWorkers(absl::StrCat("hot", i));
  }
  const proto::DrainStatus st = DrainToTheEnd("w0");
  EXPECT_EQ(st.state(), proto::DRAIN_DONE);
  EXPECT_EQ(st.objects_moved(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ReplicaWorkers(absl::StrCat("hot", i)), std::set<std::string>({"w1"}));
  }
  EXPECT_EQ(master_->Stats().objects, 16);  // four cold ones made room
}

TEST_F(MasterReplicationTest, DrainIntoAFullPoolKeepsThePoolsHottestObjects) {
  Make({}, /*workers=*/2);
  // Each commit a millisecond after the last: the drain ranks by time.
  for (int i = 0; i < 4; ++i) {
    Put(absl::StrCat("old", i), "seg0");  // the coldest
    clock_.AdvanceMs(1);
  }
  for (int i = 0; i < 16; ++i) {
    Put(absl::StrCat("warm", i), "seg1");  // w1 is full
    clock_.AdvanceMs(1);
  }
  for (int i = 0; i < 2; ++i) {
    Put(absl::StrCat("hot", i), "seg0");
    ReplicaWorkers(absl::StrCat("hot", i));
  }
  const proto::DrainStatus st = DrainToTheEnd("w0");
  EXPECT_EQ(st.state(), proto::DRAIN_DONE);
  EXPECT_EQ(st.objects_total(), 6u);
  EXPECT_EQ(st.objects_moved(), 2u);
  EXPECT_EQ(st.objects_dropped(), 4u) << "colder than what w1 holds";
  EXPECT_EQ(st.objects_left(), 0u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ReplicaWorkers(absl::StrCat("hot", i)), std::set<std::string>({"w1"}));
    EXPECT_TRUE(ReplicaWorkers(absl::StrCat("warm", i)).empty()) << "the coldest on w1 made room";
  }
  for (int i = 2; i < 16; ++i) {
    EXPECT_EQ(ReplicaWorkers(absl::StrCat("warm", i)), std::set<std::string>({"w1"})) << i;
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(ReplicaWorkers(absl::StrCat("old", i)).empty()) << "evicted, not moved: " << i;
  }
}

TEST_F(MasterReplicationTest, ADrainCopiesAnObjectUnderAReadLeaseHoweverOld) {
  Make({}, /*workers=*/2);
  for (int i = 0; i < 2; ++i) {
    Put(absl::StrCat("old", i), "seg0");
    clock_.AdvanceMs(1);
  }
  // old0's last read is older than every warm object's commit, but a client
  // still holds its lease (it reads old0 from its metadata cache).
  auto leased = master_->GetReplicas(GetReq("old0"));
  ASSERT_TRUE(leased.ok()) << leased.status();
  for (int i = 0; i < 16; ++i) {
    clock_.AdvanceMs(1);
    Put(absl::StrCat("warm", i), "seg1");  // w1 is full
  }
  const proto::DrainStatus st = DrainToTheEnd("w0");
  EXPECT_EQ(st.state(), proto::DRAIN_DONE);
  EXPECT_EQ(st.objects_moved(), 1u);
  EXPECT_EQ(st.objects_dropped(), 1u);
  Release(leased->lease().lease_id());
  EXPECT_EQ(ReplicaWorkers("old0"), std::set<std::string>({"w1"}));
  EXPECT_TRUE(ReplicaWorkers("old1").empty());
}

TEST_F(MasterReplicationTest, DrainDropsReplicasThatExistElsewhereWithoutCopying) {
  Put("two", "seg0", /*replicas=*/1);
  proto::CreateCopyTaskRequest req;  // a second replica beyond the put's count
  req.set_key("two");
  req.add_targets("seg1");
  ASSERT_TRUE(master_->CreateCopyTask(req).ok());
  ASSERT_EQ(RunAll("w0"), 1u);
  const proto::DrainStatus st = Drain("w0");
  EXPECT_EQ(st.state(), proto::DRAIN_DONE);
  EXPECT_EQ(st.objects_dropped(), 1u);
  EXPECT_EQ(st.objects_moved(), 0u);
  EXPECT_EQ(ReplicaWorkers("two"), std::set<std::string>({"w1"}));
}

TEST_F(MasterReplicationTest, DrainReportsWhatDidNotFitByTheDeadline) {
  for (int i = 0; i < 3; ++i) Put(absl::StrCat("k", i), "seg0");
  EXPECT_EQ(Drain("w0", /*deadline_ms=*/100).state(), proto::DRAIN_RUNNING);
  clock_.AdvanceMs(200);  // the worker never ran its copies
  master_->Tick();
  const proto::DrainStatus st = DrainState("w0");
  EXPECT_EQ(st.state(), proto::DRAIN_DEADLINE);
  EXPECT_EQ(st.objects_left(), 3u);
  // Still readable where they were.
  EXPECT_EQ(ReplicaWorkers("k0"), std::set<std::string>({"w0"}));
  // Errors: an unknown worker, a zero deadline.
  proto::DrainWorkerRequest bad;
  bad.set_worker_id("ghost");
  bad.set_deadline_ms(10);
  EXPECT_TRUE(absl::IsNotFound(master_->DrainWorker(bad).status()));
  bad.set_worker_id("w1");
  bad.set_deadline_ms(0);
  EXPECT_TRUE(absl::IsInvalidArgument(master_->DrainWorker(bad).status()));
}

TEST_F(MasterReplicationTest, CancelledDrainTakesPutsAgain) {
  Put("k", "seg0");
  Drain("w0");
  proto::DrainWorkerRequest cancel;
  cancel.set_worker_id("w0");
  cancel.set_cancel(true);
  auto r = master_->DrainWorker(cancel);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().state(), proto::DRAIN_CANCELLED);
  Put("after", "seg0");
  EXPECT_EQ(ReplicaWorkers("after"), std::set<std::string>({"w0"}));
}

TEST_F(MasterReplicationTest, ALostReplicaIsCopiedBackToThePutsCount) {
  for (int i = 0; i < 4; ++i) Put(absl::StrCat("k", i), "seg0", /*replicas=*/2);
  Put("single", "seg0", /*replicas=*/1);
  // w0 goes silent; the others heartbeat.
  for (int step = 0; step < 7; ++step) {
    clock_.AdvanceMs(1'000);
    Heartbeat("w1");
    Heartbeat("w2");
    master_->Tick();
  }
  EXPECT_EQ(master_->Stats().workers, 2u);
  EXPECT_EQ(master_->Stats().objects, 4);  // "single" was only on w0
  // Each 2-replica object kept one replica, on w1 or w2; its worker copies it.
  size_t ran = RunAll("w1") + RunAll("w2");
  master_->Tick();
  ran += RunAll("w1") + RunAll("w2");
  EXPECT_EQ(ran, 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ReplicaWorkers(absl::StrCat("k", i)), std::set<std::string>({"w1", "w2"})) << i;
  }
}

TEST_F(MasterReplicationTest, RepairIsOffWhenDisabled) {
  MasterOptions o;
  o.replication.repair = false;
  Make(o);
  Put("k", "seg0", 2);
  for (int step = 0; step < 7; ++step) {
    clock_.AdvanceMs(1'000);
    Heartbeat("w1");
    Heartbeat("w2");
    master_->Tick();
  }
  EXPECT_EQ(RunAll("w1") + RunAll("w2"), 0u);
  EXPECT_EQ(ReplicaWorkers("k").size(), 1u);
}

TEST_F(MasterReplicationTest, AHotObjectGetsAnExtraReplicaAndReadsSpreadOverBoth) {
  MasterOptions o;
  o.replication.hot_reads = 3;
  o.replication.hot_max_fraction = 0.5;
  Make(o);
  Put("hot", "seg0");
  Put("cold", "seg0");
  for (int r = 0; r < 3; ++r) ReplicaWorkers("hot");
  ReplicaWorkers("cold");
  master_->Tick();
  EXPECT_EQ(RunAll("w0"), 1u);
  EXPECT_EQ(ReplicaWorkers("hot").size(), 2u);
  EXPECT_EQ(ReplicaWorkers("cold").size(), 1u);
  // Readers that take the first replica alternate between the two.
  std::set<std::string> firsts;
  for (int r = 0; r < 4; ++r) {
    auto got = master_->GetReplicas(GetReq("hot"));
    ASSERT_TRUE(got.ok());
    firsts.insert(got->replicas(0).worker_id());
    Release(got->lease().lease_id());
  }
  EXPECT_EQ(firsts.size(), 2u);
}

TEST_F(MasterReplicationTest, AHotObjectGainsAReplicaPerHotWindowUpToTheCap) {
  for (const uint32_t cap : {2u, 4u}) {
    SCOPED_TRACE(cap);
    MasterOptions o;
    o.replication.hot_reads = 3;
    o.replication.hot_max_replicas = cap;
    o.replication.hot_max_fraction = 0.5;
    Make(o, /*workers=*/4);
    Put("hot", "seg0");
    for (int window = 0; window < 5; ++window) {
      for (int r = 0; r < 3; ++r) ReplicaWorkers("hot");
      master_->Tick();
      for (int w = 0; w < 4; ++w) RunAll(absl::StrCat("w", w));
      master_->Tick();
      clock_.AdvanceMs(o.replication.hot_window_ms + 1);
    }
    EXPECT_EQ(ReplicaWorkers("hot").size(), cap) << "one replica on each of `cap` workers";
  }
}

TEST_F(MasterReplicationTest, ReadsServedFromClientCachesCountTowardHotness) {
  MasterOptions o;
  o.replication.hot_reads = 50;
  o.replication.hot_max_fraction = 0.5;
  Make(o);
  Put("hot", "seg0");
  proto::GetReplicasRequest req = GetReq("hot");
  req.set_cached_reads(60);  // a client served 60 reads from its cache since it asked
  auto got = master_->GetReplicas(req);
  ASSERT_TRUE(got.ok());
  Release(got->lease().lease_id());
  master_->Tick();
  EXPECT_EQ(RunAll("w0"), 1u);
  EXPECT_EQ(ReplicaWorkers("hot").size(), 2u);
}

TEST_F(MasterReplicationTest, HotExtrasAreDroppedFirstWhenSpaceRunsShort) {
  MasterOptions o;
  o.replication.hot_reads = 2;
  o.replication.hot_max_fraction = 0.5;
  Make(o, /*workers=*/2);
  proto::PutStartRequest hot = PutReq("hot", kObject);
  hot.mutable_options()->set_pin(proto::PIN_HARD);  // only its extra replica may go
  auto started = master_->PutStart(hot);
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(master_->PutEnd(EndReq("hot", started->put_id())).ok());
  for (int r = 0; r < 2; ++r) ReplicaWorkers("hot");
  master_->Tick();
  ASSERT_EQ(RunAll("w0"), 1u);
  ASSERT_EQ(ReplicaWorkers("hot").size(), 2u);
  // Fill past the high watermark with pinned objects (never evicted).
  for (int i = 0; i < 30; ++i) {
    proto::PutStartRequest req = PutReq(absl::StrCat("fill", i), kObject);
    req.mutable_options()->set_pin(proto::PIN_HARD);
    auto s = master_->PutStart(req);
    if (!s.ok()) break;
    ASSERT_TRUE(master_->PutEnd(EndReq(absl::StrCat("fill", i), s->put_id())).ok());
  }
  const TickReport t = master_->Tick();
  EXPECT_EQ(t.hot_bytes_dropped, kObject);
  EXPECT_EQ(ReplicaWorkers("hot").size(), 1u);
}

TEST_F(MasterReplicationTest, CopySyncOfAnUnknownWorkerAsksForARemount) {
  proto::CopySyncRequest req;
  req.set_worker_id("ghost");
  auto r = master_->CopySync(req);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->remount_required());
  req.set_worker_id("");
  EXPECT_TRUE(absl::IsInvalidArgument(master_->CopySync(req).status()));
}

TEST_F(MasterReplicationTest, ASourceWorkerThatLeavesFailsItsCopies) {
  Put("k", "seg0", 1);
  proto::CreateCopyTaskRequest req;
  req.set_key("k");
  req.add_targets("seg1");
  auto created = master_->CreateCopyTask(req);
  ASSERT_TRUE(created.ok());
  proto::UnmountSegmentRequest un;
  un.set_worker_id("w0");
  un.set_segment_id(segments_["w0"]);
  ASSERT_TRUE(master_->UnmountSegment(un).ok());
  EXPECT_EQ(Query(created->task_id()).status(), proto::REPLICA_TASK_FAILED);
  EXPECT_EQ(master_->Stats().used_bytes, 0u);
  EXPECT_EQ(master_->Stats().copy_tasks, 0u);
}

}  // namespace
}  // namespace mooncake::master
