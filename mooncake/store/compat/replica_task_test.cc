#include "mooncake/store/compat/replica_task.h"

#include "gtest/gtest.h"

namespace mooncake::compat {
namespace {

TEST(ReplicaTask, IdsTravelAsMooncakesUuidPair) {
  EXPECT_EQ(ToTaskUuid(42), TaskUuid(0, 42));
  EXPECT_EQ(FromTaskUuid(TaskUuid(0, 42)), 42u);
  EXPECT_EQ(FromTaskUuid(TaskUuid(0, 0)), std::nullopt);   // a failed create's id
  EXPECT_EQ(FromTaskUuid(TaskUuid(7, 42)), std::nullopt);  // not made here
}

// Mooncake's integer values, which Python code may compare against.
TEST(ReplicaTask, EnumsKeepMooncakesValues) {
  EXPECT_EQ(static_cast<int>(ToTaskStatus(store::proto::REPLICA_TASK_PENDING)), 0);
  EXPECT_EQ(static_cast<int>(ToTaskStatus(store::proto::REPLICA_TASK_PROCESSING)), 1);
  EXPECT_EQ(static_cast<int>(ToTaskStatus(store::proto::REPLICA_TASK_FAILED)), 2);
  EXPECT_EQ(static_cast<int>(ToTaskStatus(store::proto::REPLICA_TASK_SUCCESS)), 3);
  EXPECT_EQ(static_cast<int>(ToTaskType(store::proto::REPLICA_COPY)), 0);
  EXPECT_EQ(static_cast<int>(ToTaskType(store::proto::REPLICA_MOVE)), 1);
}

TEST(ReplicaTask, QueryAnswerMapsEveryField) {
  store::proto::QueryTaskResponse r;
  r.set_task_id(9);
  r.set_type(store::proto::REPLICA_MOVE);
  r.set_status(store::proto::REPLICA_TASK_SUCCESS);
  r.set_created_at_ms_epoch(1000);
  r.set_last_updated_at_ms_epoch(2000);
  r.set_assigned_worker("w1");
  r.set_message("done");
  const TaskInfo t = ToTaskInfo(r);
  EXPECT_EQ(t.id, TaskUuid(0, 9));
  EXPECT_EQ(t.type, TaskType::kReplicaMove);
  EXPECT_EQ(t.status, TaskStatus::kSuccess);
  EXPECT_EQ(t.created_at_ms_epoch, 1000);
  EXPECT_EQ(t.last_updated_at_ms_epoch, 2000);
  EXPECT_EQ(t.assigned_client, "w1");
  EXPECT_EQ(t.message, "done");
}

}  // namespace
}  // namespace mooncake::compat
