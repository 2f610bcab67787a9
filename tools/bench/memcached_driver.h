// MemcachedDriver: a KvDriver over libmemcached (one memcached_st, one
// connection to one server).
//
// Gets go through memcached_mget + memcached_fetch_result into result objects
// the driver keeps and reuses, which is libmemcached's fastest read path:
// memcached_get() does the same and then hands over a freshly malloc'd
// buffer per call. Values are read straight into the result's buffer; the
// view handed back points there.
//
// Protocol: text (ASCII) or binary, chosen at Connect. With TCP_NODELAY on and
// no client-side hashing (one server), both are one request and one reply.
//
// Thread-safety: none (one driver per thread).
#ifndef MOONCAKE_TOOLS_BENCH_MEMCACHED_DRIVER_H_
#define MOONCAKE_TOOLS_BENCH_MEMCACHED_DRIVER_H_

#include <fcntl.h>
#include <libmemcached/memcached.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/absl_compat.h"
#include "mooncake/base/assert.h"
#include "mooncake/base/fd.h"
#include "mooncake/base/host_port.h"
#include "mooncake/base/status_macros.h"
#include "mooncake/base/tcp_connect.h"
#include "tools/bench/kv_driver.h"

namespace mooncake::bench {

struct MemcachedOptions {
  std::string host = "127.0.0.1";
  int port = 11211;
  bool binary_protocol = false;
  int timeout_ms = 10'000;  // poll, send and receive timeouts
};

class MemcachedDriver {
 public:
  static absl::StatusOr<std::unique_ptr<MemcachedDriver>> Connect(const MemcachedOptions& o) {
    memcached_st* m = memcached_create(nullptr);
    if (m == nullptr) return absl::ResourceExhaustedError("memcached_create failed");
    std::unique_ptr<MemcachedDriver> d(new MemcachedDriver(
        m, o.binary_protocol, HostPort{o.host, static_cast<uint16_t>(o.port)}, o.timeout_ms));
    memcached_return_t rc = memcached_server_add(m, o.host.c_str(), static_cast<in_port_t>(o.port));
    if (rc != MEMCACHED_SUCCESS) return d->Error(rc, "server_add");
    const uint64_t timeout = static_cast<uint64_t>(o.timeout_ms);
    for (auto [b, v] : {std::pair{MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, uint64_t{o.binary_protocol}},
                        std::pair{MEMCACHED_BEHAVIOR_TCP_NODELAY, uint64_t{1}},
                        std::pair{MEMCACHED_BEHAVIOR_POLL_TIMEOUT, timeout},
                        std::pair{MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, timeout},
                        std::pair{MEMCACHED_BEHAVIOR_SND_TIMEOUT, timeout * 1000},
                        std::pair{MEMCACHED_BEHAVIOR_RCV_TIMEOUT, timeout * 1000}}) {
      rc = memcached_behavior_set(m, b, v);
      if (rc != MEMCACHED_SUCCESS) return d->Error(rc, "behavior_set");
    }
    // One round trip now, so a dead server fails here and not in the timed loop.
    if (absl::StatusOr<std::string_view> r = d->Get("mooncake_bench/connect");
        !r.ok() && !absl::IsNotFound(r.status())) {
      return r.status();
    }
    return d;
  }

  MemcachedDriver(const MemcachedDriver&) = delete;
  MemcachedDriver& operator=(const MemcachedDriver&) = delete;
  ~MemcachedDriver() {
    for (auto& r : results_) memcached_result_free(r.get());  // frees the value, not *r
    memcached_free(m_);
  }

  std::string_view system() const { return binary_ ? "memcached-bin" : "memcached"; }

  absl::Status Put(std::string_view key, std::string_view value) {
    const memcached_return_t rc =
        memcached_set(m_, key.data(), key.size(), value.data(), value.size(), 0, 0);
    return rc == MEMCACHED_SUCCESS ? absl::OkStatus() : Error(rc, "set");
  }

  absl::StatusOr<std::string_view> Get(std::string_view key) {
    const std::string_view keys[1] = {key};
    BatchGet(keys, one_);
    return one_.front();
  }

  void BatchGet(std::span<const std::string_view> keys,
                std::vector<absl::StatusOr<std::string_view>>& out) {
    MC_ASSERT(!keys.empty() && keys.size() <= kMaxBatchKeys, "batch size out of range");
    out.assign(keys.size(), absl::NotFoundError("memcached: miss"));
    key_ptrs_.clear();
    key_lens_.clear();
    for (std::string_view k : keys) {
      key_ptrs_.push_back(k.data());
      key_lens_.push_back(k.size());
    }
    memcached_return_t rc = memcached_mget(m_, key_ptrs_.data(), key_lens_.data(), keys.size());
    if (rc != MEMCACHED_SUCCESS) {
      out.assign(keys.size(), Error(rc, "mget"));
      return;
    }
    // One slot per reply plus one for the final fetch, which resets the slot
    // it is given.
    while (results_.size() < keys.size() + 1) {
      results_.push_back(std::make_unique<memcached_result_st>());
      MC_ASSERT(memcached_result_create(m_, results_.back().get()) != nullptr, "result_create");
    }
    // Replies come back in request order for hits only (misses are skipped),
    // so each one is matched to its key by name.
    for (size_t n = 0;; ++n) {
      memcached_result_st* slot = results_[std::min(n, keys.size())].get();
      memcached_result_st* r = memcached_fetch_result(m_, slot, &rc);
      if (r == nullptr) break;
      const std::string_view got(memcached_result_key_value(r), memcached_result_key_length(r));
      const std::string_view value(memcached_result_value(r), memcached_result_length(r));
      for (size_t i = 0; i < keys.size(); ++i) {
        if (keys[i] == got) out[i] = value;
      }
      if (n >= keys.size()) out.assign(keys.size(), absl::InternalError("memcached: extra reply"));
    }
    if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND) {
      out.assign(keys.size(), Error(rc, "fetch"));
    }
  }

  // memcached has no multi-set and libmemcached no pipelined one with
  // replies, so this does what clients with a set_many do (pymemcache):
  // every text-protocol "set" in one writev on a connection of its own, then
  // one reply line read per item, in order.
  void BatchPut(std::span<const std::string_view> keys, std::span<const std::string_view> values,
                std::vector<absl::Status>& out) {
    MC_ASSERT(!keys.empty() && keys.size() <= kMaxBatchKeys && keys.size() == values.size(),
              "batch size out of range");
    out.assign(keys.size(), absl::OkStatus());
    if (absl::Status s = PipelinedSets(keys, values, out); !s.ok()) {
      raw_.Reset();  // the stream is lost: connect again next time
      out.assign(keys.size(), s);
    }
  }

  absl::Status Remove(std::string_view key) {
    const memcached_return_t rc = memcached_delete(m_, key.data(), key.size(), 0);
    if (rc == MEMCACHED_SUCCESS) return absl::OkStatus();
    return Error(rc, "delete");
  }

  // Drops every item (between benchmark cells; not timed).
  absl::Status FlushAll() {
    const memcached_return_t rc = memcached_flush(m_, 0);
    return rc == MEMCACHED_SUCCESS ? absl::OkStatus() : Error(rc, "flush");
  }

 private:
  MemcachedDriver(memcached_st* m, bool binary, HostPort at, int timeout_ms)
      : m_(m), binary_(binary), at_(std::move(at)), timeout_ms_(timeout_ms) {}

  absl::Status PipelinedSets(std::span<const std::string_view> keys,
                             std::span<const std::string_view> values,
                             std::vector<absl::Status>& out) {
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms_);
    if (!raw_.valid()) {
      ASSIGN_OR_RETURN(raw_, ConnectTcp(at_, deadline));
      // Blocking, with the driver's timeouts: a batch larger than the socket
      // buffer waits for memcached to read it.
      const int flags = ::fcntl(raw_.get(), F_GETFL);
      if (flags < 0 || ::fcntl(raw_.get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
        return absl::UnavailableError(
            absl::StrCat("memcached pipelined set: fcntl: errno ", errno));
      }
      const int one = 1;
      ::setsockopt(raw_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      const timeval tv = absl::ToTimeval(absl::Milliseconds(timeout_ms_));
      ::setsockopt(raw_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ::setsockopt(raw_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    lines_.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      lines_.push_back(absl::StrCat("set ", AbslView(keys[i]), " 0 0 ", values[i].size(), "\r\n"));
    }
    static constexpr char kCrLf[] = "\r\n";
    iov_.clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      iov_.push_back({lines_[i].data(), lines_[i].size()});
      iov_.push_back({const_cast<char*>(values[i].data()), values[i].size()});
      iov_.push_back({const_cast<char*>(kCrLf), 2});
    }
    RETURN_IF_ERROR(SendAll(iov_));
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSIGN_OR_RETURN(std::string line, ReadLine(deadline));
      if (line != "STORED") {
        out[i] = absl::InternalError(absl::StrCat("memcached set: ", line));
        if (line.starts_with("SERVER_ERROR out of memory")) {
          out[i] = absl::ResourceExhaustedError(absl::StrCat("memcached set: ", line));
        }
      }
    }
    return absl::OkStatus();
  }

  // Sends every byte of `iov` (consumed in place), IOV_MAX iovecs at a time.
  absl::Status SendAll(std::vector<iovec>& iov) {
    size_t at = 0;
    while (at < iov.size()) {
      msghdr msg{};
      msg.msg_iov = iov.data() + at;
      msg.msg_iovlen = std::min<size_t>(iov.size() - at, IOV_MAX);
      ssize_t n = ::sendmsg(raw_.get(), &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat("memcached pipelined set: send: errno ", errno));
      }
      while (at < iov.size() && static_cast<size_t>(n) >= iov[at].iov_len) {
        n -= static_cast<ssize_t>(iov[at].iov_len);
        ++at;
      }
      if (at < iov.size()) {
        iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + n;
        iov[at].iov_len -= static_cast<size_t>(n);
      }
    }
    return absl::OkStatus();
  }

  // One "\r\n"-terminated reply line from raw_, without the terminator.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline) {
    for (;;) {
      if (const size_t at = in_.find("\r\n"); at != std::string::npos) {
        std::string line = in_.substr(0, at);
        in_.erase(0, at + 2);
        return line;
      }
      if (in_.size() > 4096) return absl::InternalError("memcached: reply line too long");
      char buf[4096];
      const ssize_t n = ::recv(raw_.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        return absl::UnavailableError("memcached closed the pipelined-set connection");
      } else if (errno != EINTR && (errno != EAGAIN || absl::Now() >= deadline)) {
        return absl::UnavailableError(absl::StrCat("memcached pipelined set: recv: errno ", errno));
      }
    }
  }

  absl::Status Error(memcached_return_t rc, std::string_view what) const {
    const std::string msg =
        absl::StrCat("memcached ", AbslView(what), ": ", memcached_strerror(m_, rc), " (",
                     memcached_last_error_message(m_), ")");
    switch (rc) {
      case MEMCACHED_NOTFOUND:
      case MEMCACHED_END:
        return absl::NotFoundError(msg);
      case MEMCACHED_E2BIG:
        return absl::InvalidArgumentError(msg + "; start memcached with a larger -I");
      case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
      case MEMCACHED_MEMORY_ALLOCATION_FAILURE:
        return absl::ResourceExhaustedError(msg);
      case MEMCACHED_TIMEOUT:
        return absl::DeadlineExceededError(msg);
      case MEMCACHED_CONNECTION_FAILURE:
      case MEMCACHED_WRITE_FAILURE:
      case MEMCACHED_READ_FAILURE:
      case MEMCACHED_UNKNOWN_READ_FAILURE:
      case MEMCACHED_ERRNO:
        return absl::UnavailableError(msg);
      default:
        return absl::InternalError(msg);
    }
  }

  memcached_st* m_;
  bool binary_;
  // Caller-owned results (not allocated by libmemcached): fetch_result resets
  // such a slot at the end of a reply instead of freeing it.
  std::vector<std::unique_ptr<memcached_result_st>> results_;
  std::vector<const char*> key_ptrs_;
  std::vector<size_t> key_lens_;
  std::vector<absl::StatusOr<std::string_view>> one_;
  // BatchPut's own connection and buffers.
  HostPort at_;
  int timeout_ms_;
  UniqueFd raw_;
  std::string in_;
  std::vector<std::string> lines_;
  std::vector<iovec> iov_;
};
static_assert(KvDriver<MemcachedDriver>);

}  // namespace mooncake::bench

#endif  // MOONCAKE_TOOLS_BENCH_MEMCACHED_DRIVER_H_
