// RedisDriver: a KvDriver over hiredis (one redisContext, one connection).
//
// SET/GET/MGET/DEL with binary-safe arguments ("%b"); the view a get hands
// back is the reply's own string (hiredis has already copied it out of its
// read buffer), freed on the next call.
//
// Thread-safety: none (one driver per thread).
#ifndef MOONCAKE_TOOLS_BENCH_REDIS_DRIVER_H_
#define MOONCAKE_TOOLS_BENCH_REDIS_DRIVER_H_

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/kv_driver.h"

namespace mooncake::bench {

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  int timeout_ms = 10'000;  // connect, send and receive
};

class RedisDriver {
 public:
  static absl::StatusOr<std::unique_ptr<RedisDriver>> Connect(const RedisOptions& o) {
    const timeval tv{o.timeout_ms / 1000, (o.timeout_ms % 1000) * 1000};
    redisContext* c = redisConnectWithTimeout(o.host.c_str(), o.port, tv);
    if (c == nullptr) return absl::ResourceExhaustedError("redisConnect: out of memory");
    std::unique_ptr<RedisDriver> d(new RedisDriver(c));
    if (c->err != 0) {
      return absl::UnavailableError(
          absl::StrCat("redis at ", o.host, ":", o.port, ": ", c->errstr));
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) return d->ContextError("set timeout");
    RETURN_IF_ERROR(d->Command("PING"));
    return d;
  }

  RedisDriver(const RedisDriver&) = delete;
  RedisDriver& operator=(const RedisDriver&) = delete;
  ~RedisDriver() {
    Release();
    redisFree(c_);
  }

  std::string_view system() const { return "redis"; }

  absl::Status Put(std::string_view key, std::string_view value) {
    Release();
    reply_ = static_cast<redisReply*>(
        redisCommand(c_, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
    return Check(reply_, "SET");
  }

  absl::StatusOr<std::string_view> Get(std::string_view key) {
    Release();
    reply_ = static_cast<redisReply*>(redisCommand(c_, "GET %b", key.data(), key.size()));
    if (absl::Status s = Check(reply_, "GET"); !s.ok()) return s;
    return Value(reply_);
  }

  void BatchGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string_view>>& out) {
    MC_ASSERT(!keys.empty() && keys.size() <= kMaxBatchKeys, "batch size out of range");
    Release();
    argv_.assign(1, "MGET");
    argv_len_.assign(1, 4);
    for (std::string_view k : keys) {
      argv_.push_back(k.data());
      argv_len_.push_back(k.size());
    }
    reply_ = static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(argv_.size()), argv_.data(), argv_len_.data()));
    if (absl::Status s = Check(reply_, "MGET"); !s.ok()) {
      out.assign(keys.size(), s);
      return;
    }
    if (reply_->type != REDIS_REPLY_ARRAY || reply_->elements != keys.size()) {
      out.assign(keys.size(), absl::InternalError("redis MGET: reply is not one item per key"));
      return;
    }
    out.clear();
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(Value(reply_->element[i]));
  }

  // One MSET: Redis sets every key or none, so each item gets its status.
  void BatchPut(std::span<const std::string_view> keys, std::span<const std::string_view> values,
                std::vector<absl::Status>& out) {
    MC_ASSERT(!keys.empty() && keys.size() <= kMaxBatchKeys && keys.size() == values.size(),
              "batch size out of range");
    Release();
    argv_.assign(1, "MSET");
    argv_len_.assign(1, 4);
    for (size_t i = 0; i < keys.size(); ++i) {
      argv_.push_back(keys[i].data());
      argv_len_.push_back(keys[i].size());
      argv_.push_back(values[i].data());
      argv_len_.push_back(values[i].size());
    }
    reply_ = static_cast<redisReply*>(
        redisCommandArgv(c_, static_cast<int>(argv_.size()), argv_.data(), argv_len_.data()));
    out.assign(keys.size(), Check(reply_, "MSET"));
  }

  absl::Status Remove(std::string_view key) {
    Release();
    reply_ = static_cast<redisReply*>(redisCommand(c_, "DEL %b", key.data(), key.size()));
    if (absl::Status s = Check(reply_, "DEL"); !s.ok()) return s;
    if (reply_->type == REDIS_REPLY_INTEGER && reply_->integer == 0) {
      return absl::NotFoundError("redis DEL: no such key");
    }
    return absl::OkStatus();
  }

  // ASYNC: the server frees in the background, so a large data set does not
  // hold this call past its timeout.
  absl::Status FlushAll() { return Command("FLUSHALL ASYNC"); }

  // A simple command whose reply is not needed ("CONFIG SET maxmemory 1000").
  absl::Status Command(std::string_view command) {
    Release();
    reply_ = static_cast<redisReply*>(redisCommand(c_, std::string(command).c_str()));
    return Check(reply_, command);
  }

  // The value of `field` in INFO's answer ("used_memory"), NOT_FOUND if absent.
  absl::StatusOr<std::string> InfoField(std::string_view section, std::string_view field) {
    RETURN_IF_ERROR(Command(absl::StrCat("INFO ", AbslView(section))));
    if (reply_->type != REDIS_REPLY_STRING && reply_->type != REDIS_REPLY_STATUS) {
      return absl::InternalError("redis INFO: not a string reply");
    }
    // INFO is "field:value\r\n" lines.
    const std::string text = absl::StrCat("\n", absl::string_view(reply_->str, reply_->len));
    const std::string needle = absl::StrCat("\n", AbslView(field), ":");
    const size_t at = text.find(needle);
    if (at == std::string::npos) {
      return absl::NotFoundError(absl::StrCat("redis INFO has no field ", AbslView(field)));
    }
    const size_t begin = at + needle.size();
    const size_t end = text.find_first_of("\r\n", begin);
    return std::string(text.substr(begin, end - begin));
  }

 private:
  explicit RedisDriver(redisContext* c) : c_(c) {}

  void Release() {
    if (reply_ != nullptr) freeReplyObject(reply_);
    reply_ = nullptr;
  }

  static absl::StatusOr<std::string_view> Value(const redisReply* r) {
    if (r->type == REDIS_REPLY_NIL) return absl::NotFoundError("redis: miss");
    if (r->type != REDIS_REPLY_STRING) {
      return absl::InternalError(absl::StrCat("redis: reply type ", r->type, " for a value"));
    }
    return std::string_view(r->str, r->len);
  }

  absl::Status ContextError(std::string_view what) const {
    const std::string msg = absl::StrCat("redis ", AbslView(what), ": ", c_->errstr);
    if (c_->err == REDIS_ERR_IO || c_->err == REDIS_ERR_EOF) return absl::UnavailableError(msg);
    return absl::InternalError(msg);
  }

  absl::Status Check(const redisReply* r, std::string_view what) const {
    if (r == nullptr) return ContextError(what);
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string msg = absl::StrCat("redis ", AbslView(what), ": ", r->str);
      if (std::string_view(r->str, r->len).starts_with("OOM")) {
        return absl::ResourceExhaustedError(msg);
      }
      return absl::InternalError(msg);
    }
    return absl::OkStatus();
  }

  redisContext* c_;
  redisReply* reply_ = nullptr;  // the last reply; owns the views handed out
  std::vector<const char*> argv_;
  std::vector<size_t> argv_len_;
};
static_assert(KvDriver<RedisDriver>);

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_REDIS_DRIVER_H_
