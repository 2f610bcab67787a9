// PacketImpairer: delay, loss and reordering of one network namespace's
// packets in user space, for kernels without the `netem` qdisc.
//
// iptables rules in the namespace send the chosen packets (to and from one
// peer, or all of an interface's) to an NFQUEUE; a thread of this process,
// moved into the namespace, reads each packet's id from the queue
// (libnetfilter_queue, metadata only) and decides its fate as netem would:
//   loss P%          dropped with probability P (NF_DROP, at once)
//   delay D [J]      released after D +- J (uniform) ms: with jitter larger
//                    than the gap between packets they leave out of order
//   reorder R%       with `delay`: R% of packets go at once, the rest wait D
// The kernel holds a packet until its verdict, so "delay" costs no copy of
// its bytes; verdicts may come in any order (by packet id).
//
// Rules carry `--queue-bypass` (a packet passes when no reader is bound) and
// the queue is fail-open (a packet passes when the queue holds 65,536), so a
// slow or dead reader never blackholes traffic by accident. Stop() removes
// the rules first, then releases every held packet, then closes the queue.
//
// Needs root, iptables (nft or legacy; Debian's `iptables` package) and the
// kernel's nfnetlink_queue; Probe() says which is missing. Correlation
// parameters of netem ("reorder 50% 50%": the second figure) are accepted
// and ignored: every decision is independent.
//
// Thread-safety: Start/Stop from one owning thread.
#ifndef MOONCAKE_TOOLS_CHAOS_PACKET_IMPAIRER_H_
#define MOONCAKE_TOOLS_CHAOS_PACKET_IMPAIRER_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

namespace mooncake::chaos {

// Runs a shell command quietly; true when it exits 0.
inline bool Sh(const std::string& cmd) {
  return std::system(absl::StrCat(cmd, " >/dev/null 2>&1").c_str()) == 0;
}

// What a netem argument string asks for, as far as this impairer does it.
struct ImpairSpec {
  double delay_ms = 0;
  double jitter_ms = 0;
  double loss = 0;     // probability, 0..1
  double reorder = 0;  // probability of going at once, 0..1 (needs delay_ms)
};

namespace impair_internal {
inline std::optional<double> Millis(absl::string_view s) {
  double v = 0;
  if (absl::ConsumeSuffix(&s, "ms") && absl::SimpleAtod(s, &v)) return v;
  if (absl::ConsumeSuffix(&s, "us") && absl::SimpleAtod(s, &v)) return v / 1000;
  if (absl::ConsumeSuffix(&s, "s") && absl::SimpleAtod(s, &v)) return v * 1000;
  return std::nullopt;
}
inline std::optional<double> Percent(absl::string_view s) {
  double v = 0;
  if (!absl::ConsumeSuffix(&s, "%") || !absl::SimpleAtod(s, &v) || v < 0 || v > 100) {
    return std::nullopt;
  }
  return v / 100;
}
}  // namespace impair_internal

// Parses "delay 80ms 40ms", "loss 15%", "delay 10ms reorder 50% 50%" (netem's
// words: delay TIME [JITTER [CORR]], loss PCT [CORR], reorder PCT [CORR]).
inline absl::StatusOr<ImpairSpec> ParseImpairSpec(absl::string_view text) {
  using impair_internal::Millis;
  using impair_internal::Percent;
  std::vector<absl::string_view> w = absl::StrSplit(text, ' ', absl::SkipEmpty());
  ImpairSpec spec;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("impairment \"", text, "\": ", why));
  };
  for (size_t i = 0; i < w.size();) {
    if (w[i] == "delay") {
      if (i + 1 >= w.size() || !Millis(w[i + 1])) return bad("delay needs a time (e.g. 80ms)");
      spec.delay_ms = *Millis(w[i + 1]);
      i += 2;
      if (i < w.size() && Millis(w[i])) spec.jitter_ms = *Millis(w[i++]);
      if (i < w.size() && Percent(w[i])) ++i;  // correlation: ignored
    } else if (w[i] == "loss" || w[i] == "reorder") {
      if (i + 1 >= w.size() || !Percent(w[i + 1])) return bad("needs a percentage (e.g. 15%)");
      (w[i] == "loss" ? spec.loss : spec.reorder) = *Percent(w[i + 1]);
      i += 2;
      if (i < w.size() && Percent(w[i])) ++i;  // correlation: ignored
    } else {
      return bad(absl::StrCat("unknown word \"", w[i], "\" (delay, loss, reorder)"));
    }
  }
  if (spec.reorder > 0 && spec.delay_ms <= 0) return bad("reorder needs a delay");
  if (spec.jitter_ms > spec.delay_ms) return bad("jitter larger than the delay");
  return spec;
}

// Which packets of a namespace go through the queue: `interface` (the
// namespace's side of its veth) and, when `peer` is not empty, only those to
// and from that IPv4 address.
struct ImpairTarget {
  std::string netns;      // a name under /var/run/netns
  std::string interface;  // e.g. "mc123v0"
  std::string peer;       // "" = every address
  uint16_t queue = 0;
};

class PacketImpairer {
 public:
  // OK when this machine can impair packets this way (root, iptables, the
  // kernel's NFQUEUE: tried in a scratch namespace); else why not.
  static absl::Status Probe() {
    if (geteuid() != 0) return absl::PermissionDeniedError("NFQUEUE needs root");
    if (!Sh("iptables -V")) {
      return absl::FailedPreconditionError("iptables is not installed (Debian's `iptables`)");
    }
    const std::string ns = absl::StrCat("mcprobe", getpid());
    const std::string cmd =
        absl::StrCat("ip netns add ", ns, " && ip netns exec ", ns,
                     " iptables -A OUTPUT -d 127.0.0.2/32 -j NFQUEUE --queue-num 1 --queue-bypass");
    const bool ok = Sh(absl::StrCat("(", cmd, ")"));
    Sh(absl::StrCat("ip netns del ", ns));
    if (!ok) {
      return absl::UnavailableError(
          "the kernel refuses an iptables NFQUEUE rule (no nfnetlink_queue or xt_NFQUEUE)");
    }
    return absl::OkStatus();
  }

  // Binds the queue inside the namespace, then adds the rules. Fails (and
  // leaves nothing behind) if either does.
  static absl::StatusOr<std::unique_ptr<PacketImpairer>> Start(ImpairTarget target, ImpairSpec spec,
                                                               uint64_t seed) {
    std::unique_ptr<PacketImpairer> p(new PacketImpairer(std::move(target), spec, seed));
    p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
    while (p->state_.load() == kStarting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (p->state_.load() != kRunning) {
      p->thread_.join();
      return absl::UnavailableError(p->error_);
    }
    for (const std::string& rule : p->Rules()) {
      if (!Sh(absl::StrCat(p->in_ns_, "iptables -A ", rule))) {
        p->Stop();
        return absl::UnavailableError(absl::StrCat("`iptables -A ", rule, "` failed"));
      }
      p->added_.push_back(rule);
    }
    return p;
  }

  PacketImpairer(const PacketImpairer&) = delete;
  PacketImpairer& operator=(const PacketImpairer&) = delete;
  ~PacketImpairer() { Stop(); }

  // Removes the rules, releases every held packet, closes the queue.
  void Stop() {
    for (const std::string& rule : added_) Sh(absl::StrCat(in_ns_, "iptables -D ", rule));
    added_.clear();
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  // Packets seen, dropped and delayed so far (read after Stop for totals).
  uint64_t seen() const { return seen_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  uint64_t delayed() const { return delayed_.load(); }

 private:
  enum State { kStarting, kRunning, kFailed };
  struct Held {
    int64_t due_ns;
    uint32_t id;
    bool operator>(const Held& o) const { return due_ns > o.due_ns; }
  };

  PacketImpairer(ImpairTarget target, ImpairSpec spec, uint64_t seed)
      : target_(std::move(target)),
        spec_(spec),
        rng_(seed),
        in_ns_(absl::StrCat("ip netns exec ", target_.netns, " ")) {}

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::vector<std::string> Rules() const {
    const std::string q =
        absl::StrCat(" -j NFQUEUE --queue-num ", target_.queue, " --queue-bypass");
    const std::string to = target_.peer.empty() ? "" : absl::StrCat(" -d ", target_.peer, "/32");
    const std::string from = target_.peer.empty() ? "" : absl::StrCat(" -s ", target_.peer, "/32");
    return {absl::StrCat("OUTPUT -o ", target_.interface, to, q),
            absl::StrCat("INPUT -i ", target_.interface, from, q)};
  }

  void Fail(std::string why) {
    error_ = std::move(why);
    state_.store(kFailed);
  }

  static int OnPacket(nfq_q_handle* /*qh*/, nfgenmsg* /*msg*/, nfq_data* nfa, void* self) {
    auto* p = static_cast<PacketImpairer*>(self);
    const nfqnl_msg_packet_hdr* h = nfq_get_msg_packet_hdr(nfa);
    if (h != nullptr) p->Decide(ntohl(h->packet_id));
    return 0;
  }

  void Decide(uint32_t id) {
    seen_.fetch_add(1, std::memory_order_relaxed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (spec_.loss > 0 && u(rng_) < spec_.loss) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      nfq_set_verdict(qh_, id, NF_DROP, 0, nullptr);
      return;
    }
    if (spec_.delay_ms <= 0 || (spec_.reorder > 0 && u(rng_) < spec_.reorder)) {
      nfq_set_verdict(qh_, id, NF_ACCEPT, 0, nullptr);
      return;
    }
    const double ms = spec_.delay_ms + spec_.jitter_ms * (2 * u(rng_) - 1);
    delayed_.fetch_add(1, std::memory_order_relaxed);
    held_.push({NowNs() + static_cast<int64_t>(ms * 1e6), id});
  }

  void ReleaseDue(int64_t now_ns) {
    while (!held_.empty() && held_.top().due_ns <= now_ns) {
      nfq_set_verdict(qh_, held_.top().id, NF_ACCEPT, 0, nullptr);
      held_.pop();
    }
  }

  void Run() {
    const std::string path = "/var/run/netns/" + target_.netns;
    const int ns_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0 || ::setns(ns_fd, CLONE_NEWNET) != 0) {
      if (ns_fd >= 0) ::close(ns_fd);
      return Fail(absl::StrCat("cannot enter network namespace ", path, ": errno ", errno));
    }
    ::close(ns_fd);
    nfq_handle* h = nfq_open();
    if (h == nullptr) return Fail("nfq_open failed (no nfnetlink_queue in this kernel?)");
    qh_ = nfq_create_queue(h, target_.queue, &OnPacket, this);
    if (qh_ == nullptr || nfq_set_mode(qh_, NFQNL_COPY_META, 0) < 0) {
      if (qh_ != nullptr) nfq_destroy_queue(qh_);
      nfq_close(h);
      return Fail(absl::StrCat("cannot bind NFQUEUE ", target_.queue, " in ", target_.netns));
    }
    nfq_set_queue_maxlen(qh_, 65536);
    nfq_set_queue_flags(qh_, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN);
    const int fd = nfq_fd(h);
    const int rcvbuf = 8 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
    state_.store(kRunning);

    std::vector<char> buf(1 << 16);
    while (!stop_.load()) {
      int64_t wait_ms = 5;
      if (!held_.empty()) {
        const int64_t until = (held_.top().due_ns - NowNs()) / 1'000'000;
        wait_ms = std::clamp<int64_t>(until, 0, 5);
      }
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(wait_ms)) > 0) {
        for (;;) {  // everything queued now, without blocking
          const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
          if (n <= 0) break;  // EAGAIN, or ENOBUFS (the kernel dropped notices: fail-open)
          nfq_handle_packet(h, buf.data(), static_cast<int>(n));
        }
      }
      ReleaseDue(NowNs());
    }
    // The rules are gone: let everything still held go, and anything that
    // reached the queue meanwhile.
    ReleaseDue(INT64_MAX);
    for (;;) {
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n <= 0) break;
      spec_ = ImpairSpec{};  // no more drops or delays
      nfq_handle_packet(h, buf.data(), static_cast<int>(n));
    }
    ReleaseDue(INT64_MAX);
    nfq_destroy_queue(qh_);
    nfq_close(h);
  }

  const ImpairTarget target_;
  ImpairSpec spec_;
  std::mt19937_64 rng_;
  const std::string in_ns_;
  std::thread thread_;
  std::atomic<int> state_{kStarting};
  std::atomic<bool> stop_{false};
  std::string error_;
  std::vector<std::string> added_;
  nfq_q_handle* qh_ = nullptr;
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> held_;
  std::atomic<uint64_t> seen_{0}, dropped_{0}, delayed_{0};
};

}  // namespace mooncake::chaos

#endif  // MOONCAKE_TOOLS_CHAOS_PACKET_IMPAIRER_H_
