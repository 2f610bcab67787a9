// A fixed set of threads draining one bounded FIFO of tasks.
//
// TrySubmit never blocks: it refuses (returns false) when `capacity` tasks are
// queued or the pool is stopping, so the caller can shed load with an error
// instead of queuing without bound. Stop() lets running tasks finish, destroys
// queued ones without running them, and joins the threads.
//
// Thread-safety: every method may be called from any thread; Stop is
// idempotent. Tasks must not call Stop.
#ifndef MOONCAKE_STORE_RPC_INTERNAL_WORKER_POOL_H_
#define MOONCAKE_STORE_RPC_INTERNAL_WORKER_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/mutex.h"

namespace mooncake::rpc_internal {

class WorkerPool {
 public:
  using Task = std::function<void()>;

  // REQUIRES: threads >= 1, capacity >= 1.
  WorkerPool(size_t threads, size_t capacity) : capacity_(capacity) {
    MC_ASSERT(threads >= 1 && capacity >= 1, "a worker pool needs threads and room");
    MutexLock lock(&stop_mu_);
    threads_.reserve(threads);
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() { Stop(); }

  [[nodiscard]] bool TrySubmit(Task task) {
    MutexLock lock(&mu_);
    if (stopping_ || queue_.size() >= capacity_) return false;
    queue_.push_back(std::move(task));
    MC_DASSERT(queue_.size() <= capacity_, "queue past its bound");
    return true;
  }

  void Stop() {
    MutexLock stop_lock(&stop_mu_);
    std::deque<Task> dropped;  // destroyed outside mu_: a task's destructor may lock
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      dropped.swap(queue_);
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  size_t Queued() const {
    MutexLock lock(&mu_);
    return queue_.size();
  }
  size_t capacity() const { return capacity_; }

 private:
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }

  void Run() {
    for (;;) {
      Task task;
      {
        MutexLock lock(&mu_);
        mu_.Await(Condition(this, &WorkerPool::HasWorkOrStopping));
        if (stopping_) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  const size_t capacity_;
  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  Mutex stop_mu_;  // serializes Stop calls
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(stop_mu_);
};

}  // namespace mooncake::rpc_internal

#endif  // MOONCAKE_STORE_RPC_INTERNAL_WORKER_POOL_H_
