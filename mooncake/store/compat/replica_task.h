// Mooncake's replica tasks as its Python API shows them (store_py.cpp:
// create_copy_task / create_move_task / query_task), and the mapping from
// this store's QueryTask answer (rpc/master.proto, "Replication").
//
// Ids. Mooncake names a task by a UUID, std::pair<uint64_t, uint64_t>, which
// pybind11 turns into a Python tuple (first, second). This store's task ids
// are one uint64 (never 0), carried as TaskUuid{0, id}: (0, 0) is what a
// failed create returns, as in Mooncake. A UUID whose first half is not 0
// was not made here (INVALID_PARAMS).
//
// Enums keep Mooncake's integer values, which differ from the proto's for
// the status: PENDING 0, PROCESSING 1, FAILED 2, SUCCESS 3 (proto: SUCCESS 2,
// FAILED 3); REPLICA_COPY 0, REPLICA_MOVE 1 (proto: 1, 2).
//
// assigned_client: Mooncake gives the UUID of the client that runs the
// task; this store's tasks run on a worker, named by its worker id
// (rpc/worker_id.h), so it is that string (docs/python.md).
//
// Pure functions; thread-safe.
#ifndef MOONCAKE_STORE_COMPAT_REPLICA_TASK_H_
#define MOONCAKE_STORE_COMPAT_REPLICA_TASK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "mooncake/store/rpc/master.pb.h"

namespace mooncake::compat {

using TaskUuid = std::pair<uint64_t, uint64_t>;

// Mooncake's TaskType and TaskStatus, values as in its task_manager.h.
enum class TaskType : int32_t { kReplicaCopy = 0, kReplicaMove = 1 };
enum class TaskStatus : int32_t { kPending = 0, kProcessing = 1, kFailed = 2, kSuccess = 3 };

// Mooncake's QueryTaskResponse (attribute names as its Python binding has them).
struct TaskInfo {
  TaskUuid id{0, 0};
  TaskType type = TaskType::kReplicaCopy;
  TaskStatus status = TaskStatus::kPending;
  int64_t created_at_ms_epoch = 0;
  int64_t last_updated_at_ms_epoch = 0;
  std::string assigned_client;  // the worker that copies (its worker id)
  std::string message;
};

inline TaskUuid ToTaskUuid(uint64_t task_id) { return {0, task_id}; }

// The store's task id, or nullopt for a UUID this store never made.
inline std::optional<uint64_t> FromTaskUuid(const TaskUuid& id) {
  if (id.first != 0 || id.second == 0) return std::nullopt;
  return id.second;
}

inline TaskType ToTaskType(store::proto::ReplicaTaskType t) {
  return t == store::proto::REPLICA_MOVE ? TaskType::kReplicaMove : TaskType::kReplicaCopy;
}

inline TaskStatus ToTaskStatus(store::proto::ReplicaTaskStatus s) {
  switch (s) {
    case store::proto::REPLICA_TASK_PROCESSING:
      return TaskStatus::kProcessing;
    case store::proto::REPLICA_TASK_SUCCESS:
      return TaskStatus::kSuccess;
    case store::proto::REPLICA_TASK_FAILED:
      return TaskStatus::kFailed;
    default:
      return TaskStatus::kPending;
  }
}

inline TaskInfo ToTaskInfo(const store::proto::QueryTaskResponse& r) {
  TaskInfo t;
  t.id = ToTaskUuid(r.task_id());
  t.type = ToTaskType(r.type());
  t.status = ToTaskStatus(r.status());
  t.created_at_ms_epoch = r.created_at_ms_epoch();
  t.last_updated_at_ms_epoch = r.last_updated_at_ms_epoch();
  t.assigned_client = r.assigned_worker();
  t.message = r.message();
  return t;
}

}  // namespace mooncake::compat

#endif  // MOONCAKE_STORE_COMPAT_REPLICA_TASK_H_
