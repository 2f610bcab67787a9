// An echo service for the RPC tests and benchmarks: method types and a
// handler that echoes, sleeps or fails on request (testdata/echo.proto); and
// an asynchronous variant whose answers a DeferredCompleter thread sends
// sleep_ms later (a stand-in for a group-commit thread).
#ifndef MOONCAKE_STORE_RPC_ECHO_TESTING_H_
#define MOONCAKE_STORE_RPC_ECHO_TESTING_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mooncake/store/rpc/channel.h"
#include "mooncake/store/rpc/service.h"
#include "mooncake/store/rpc/testdata/echo.pb.h"

namespace mooncake::rpc {

// Runs on the handler thread pool.
struct EchoMethod {
  static constexpr uint16_t kId = 1;
  static constexpr std::string_view kName = "Echo";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

// Same messages, run inline on the server's I/O thread.
struct EchoInlineMethod {
  static constexpr uint16_t kId = 2;
  static constexpr std::string_view kName = "EchoInline";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

// Never registered: calls get UNIMPLEMENTED.
struct UnregisteredMethod {
  static constexpr uint16_t kId = 999;
  static constexpr std::string_view kName = "Unregistered";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

// Same messages, async (RegisterEchoAsync): started on the handler pool...
struct EchoAsyncMethod {
  static constexpr uint16_t kId = 5;
  static constexpr std::string_view kName = "EchoAsync";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

// ... and on the I/O thread.
struct EchoAsyncInlineMethod {
  static constexpr uint16_t kId = 6;
  static constexpr std::string_view kName = "EchoAsyncInline";
  using Request = echo::EchoRequest;
  using Response = echo::EchoResponse;
};

static_assert(RpcMethod<EchoMethod>);
static_assert(RpcMethod<EchoInlineMethod>);
static_assert(RpcMethod<EchoAsyncMethod>);

inline absl::StatusOr<echo::EchoResponse> EchoHandler(const echo::EchoRequest& req,
                                                      const ServerCallContext& ctx) {
  if (req.sleep_ms() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(req.sleep_ms()));
  if (req.error_code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(req.error_code()), req.error_message());
  }
  echo::EchoResponse resp;
  if (req.response_bytes() > 0) {
    resp.set_payload(std::string(req.response_bytes(), 'r'));
  } else {
    resp.set_payload(req.payload());
  }
  resp.set_request_id(ctx.request_id);
  return resp;
}

// Registers EchoMethod (worker) and EchoInlineMethod (inline).
inline absl::Status RegisterEcho(ServiceRegistry* registry) {
  if (absl::Status s = registry->Register<EchoMethod>(EchoHandler); !s.ok()) return s;
  return registry->Register<EchoInlineMethod>(EchoHandler, {.mode = ExecutionMode::kInline});
}

// Answers Responders on its own thread, each at its due time. The destructor
// answers what is left at once, then joins. Thread-safe.
class DeferredCompleter {
 public:
  using Result = absl::StatusOr<echo::EchoResponse>;
  DeferredCompleter() : thread_([this] { Run(); }) {}
  DeferredCompleter(const DeferredCompleter&) = delete;
  DeferredCompleter& operator=(const DeferredCompleter&) = delete;
  ~DeferredCompleter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void Add(Responder<echo::EchoResponse> respond, Result result, int64_t delay_ns) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      due_.emplace(std::chrono::steady_clock::now() + std::chrono::nanoseconds(delay_ns),
                   Item{std::move(respond), std::move(result)});
      ++added_;
    }
    cv_.notify_one();
  }

  // Answers handed to Add so far.
  size_t added() {
    std::lock_guard<std::mutex> lock(mu_);
    return added_;
  }

  // The thread answers run on (to check where a completion ran).
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  using Time = std::chrono::steady_clock::time_point;
  struct Item {
    Responder<echo::EchoResponse> respond;
    Result result;
  };

  void Run() {
    for (;;) {
      std::multimap<Time, Item> ready;
      bool stop;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!stop_) {
          if (due_.empty()) {
            cv_.wait(lock);
          } else {
            cv_.wait_until(lock, due_.begin()->first);
          }
        }
        stop = stop_;
        auto end = stop ? due_.end() : due_.upper_bound(std::chrono::steady_clock::now());
        ready.insert(std::make_move_iterator(due_.begin()), std::make_move_iterator(end));
        due_.erase(due_.begin(), end);
      }
      // Outside the lock: an answer may run a caller's callback.
      for (auto& [when, item] : ready) std::move(item.respond)(std::move(item.result));
      if (stop) return;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;              // guarded by mu_
  std::multimap<Time, Item> due_;  // guarded by mu_
  size_t added_ = 0;               // guarded by mu_
  std::thread thread_;
};

// An async echo: computes EchoHandler's answer at once (without its sleep)
// and has `completer` send it sleep_ms later.
inline auto AsyncEchoHandler(DeferredCompleter* completer) {
  return [completer](const echo::EchoRequest& req, const ServerCallContext& ctx,
                     Responder<echo::EchoResponse> respond) {
    echo::EchoRequest now = req;
    now.set_sleep_ms(0);
    completer->Add(std::move(respond), EchoHandler(now, ctx), int64_t{req.sleep_ms()} * 1000000);
  };
}

// Registers EchoAsyncMethod (worker) and EchoAsyncInlineMethod (inline).
inline absl::Status RegisterEchoAsync(ServiceRegistry* registry, DeferredCompleter* completer) {
  if (absl::Status s = registry->RegisterAsync<EchoAsyncMethod>(AsyncEchoHandler(completer));
      !s.ok()) {
    return s;
  }
  return registry->RegisterAsync<EchoAsyncInlineMethod>(AsyncEchoHandler(completer),
                                                        {.mode = ExecutionMode::kInline});
}

inline echo::EchoRequest MakeEcho(std::string payload, uint32_t sleep_ms = 0) {
  echo::EchoRequest req;
  req.set_payload(std::move(payload));
  req.set_sleep_ms(sleep_ms);
  return req;
}

}  // namespace mooncake::rpc

#endif  // MOONCAKE_STORE_RPC_ECHO_TESTING_H_
