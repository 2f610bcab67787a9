// Low-overhead tracing: spans recorded into per-thread rings, dumped as
// Chrome / Perfetto "traceEvents" JSON (open it in ui.perfetto.dev or
// chrome://tracing).
//
//   trace::Enable(true);
//   {
//     trace::Scope span("router.submit", "router");
//     span.set_batch(id);
//   }                                           // recorded here
//   trace::Record("tcp.wire", "tcp", start_ns, trace::NowNs(), batch, slice, bytes);
//   trace::DumpChromeJson(std::cout, absl::Seconds(5));  // spans of the last 5 s
//
// Span. A name and a category (string literals: only the pointer is stored),
// start and end in nanoseconds of the monotonic clock (NowNs(), the epoch of
// MonotonicClock), the recording thread, and three arguments: a batch id, a
// slice index and a byte count (0 when they do not apply).
//
// Cost. A global relaxed flag: while tracing is off a Scope or Record costs
// one load and a branch, and no thread allocates anything. While it is on, a
// span is two clock reads plus a dozen stores to the thread's ring (no lock, no
// allocation, no shared cache line), except the thread's first span, which
// allocates its ring (kRingEvents slots, about 1 MiB) and registers it.
//
// Rings. One per recording thread, a fixed number of slots; the newest span
// overwrites the oldest. Each ring has a single writer (its thread) and any
// number of concurrent readers (the dumpers): every slot is a seqlock, so a
// reader skips a slot the writer is rewriting instead of reading a torn span.
// A global registry holds every ring. The ring of a thread that exited stays
// until a Collect reads it (then it is dropped), and at most
// kExitedRingsMax of them are kept: older ones are dropped first.
//
// Thread-safety: every function may be called from any thread at any time.
#ifndef MOONCAKE_BASE_TRACE_H_
#define MOONCAKE_BASE_TRACE_H_

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"

namespace mooncake::trace {

inline constexpr size_t kRingEvents = size_t{1} << 14;  // slots per thread
inline constexpr size_t kExitedRingsMax = 32;           // rings of exited threads kept
static_assert((kRingEvents & (kRingEvents - 1)) == 0, "a power of two: slot = count & mask");

// Nanoseconds of the monotonic clock (std::chrono::steady_clock, as
// MonotonicClock::NowNs).
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One span as Collect returns it.
struct Span {
  const char* name = "";
  const char* category = "";
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int tid = 0;  // the kernel's thread id (gettid)
  uint64_t batch = 0;
  uint32_t slice = 0;
  uint64_t bytes = 0;
  bool scoped = false;  // a Scope: nested in the thread's other scoped spans
};

struct ThreadInfo {
  int tid = 0;
  std::string name;  // pthread_getname_np when its ring was made
};

// What Collect returns: spans ordered by start, and the threads they ran on.
struct Snapshot {
  int pid = 0;
  std::vector<Span> spans;
  std::vector<ThreadInfo> threads;
};

}  // namespace mooncake::trace

namespace mooncake::trace_internal {

// relaxed: the flag orders nothing; a span that starts just after a flip may
// be recorded or not, either is fine.
inline std::atomic<bool> g_enabled{false};

// A slot is a seqlock: `seq` is 2n+1 while the writer writes the ring's n-th
// span into it and 2n+2 once it is complete, so a reader knows both that the
// slot is whole and which span it holds.
struct alignas(64) Slot {
  std::atomic<uint64_t> seq{0};
  std::atomic<const char*> name{nullptr};
  std::atomic<const char*> category{nullptr};
  std::atomic<int64_t> start_ns{0};
  std::atomic<int64_t> end_ns{0};
  std::atomic<uint64_t> batch{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint32_t> slice{0};
  std::atomic<bool> scoped{false};
};

// Invariants: only the owning thread writes; head_ counts the spans ever
// written, and slots [head_ - trace::kRingEvents, head_) hold the newest ones.
class Ring {
 public:
  Ring(int tid, std::string thread_name) : tid_(tid), thread_name_(std::move(thread_name)) {}

  int tid() const { return tid_; }
  const std::string& thread_name() const { return thread_name_; }

  // Owner thread only.
  void Append(const char* name, const char* category, int64_t start_ns, int64_t end_ns,
              uint64_t batch, uint32_t slice, uint64_t bytes, bool scoped) {
    // relaxed: only this thread writes head_.
    const uint64_t n = head_.load(std::memory_order_relaxed);
    Slot& s = slots_[n & (trace::kRingEvents - 1)];
    // relaxed: the release stores below keep it before every field store.
    s.seq.store(2 * n + 1, std::memory_order_relaxed);
    // release (each field): a reader that sees a new field value also sees
    // the odd seq above on its recheck (a fence would do, but TSAN does not
    // model fences, and on x86 these are plain stores either way).
    s.name.store(name, std::memory_order_release);
    s.category.store(category, std::memory_order_release);
    s.start_ns.store(start_ns, std::memory_order_release);
    s.end_ns.store(end_ns, std::memory_order_release);
    s.batch.store(batch, std::memory_order_release);
    s.bytes.store(bytes, std::memory_order_release);
    s.slice.store(slice, std::memory_order_release);
    s.scoped.store(scoped, std::memory_order_release);
    // release: the fields before the even seq that says they are whole.
    s.seq.store(2 * n + 2, std::memory_order_release);
    // release: a reader that sees the new head sees the slot complete.
    head_.store(n + 1, std::memory_order_release);
  }

  // Any thread: appends the complete spans that ended at or after
  // `since_ns`; a slot being rewritten meanwhile is skipped.
  void ReadInto(int64_t since_ns, std::vector<trace::Span>* out) const {
    // acquire: pairs with Append's head_ store.
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t first = head > trace::kRingEvents ? head - trace::kRingEvents : 0;
    for (uint64_t n = first; n < head; ++n) {
      const Slot& s = slots_[n & (trace::kRingEvents - 1)];
      // acquire: pairs with the even seq store; the fields are at least this span's.
      const uint64_t seq = s.seq.load(std::memory_order_acquire);
      if (seq != 2 * n + 2) continue;  // overwritten by a newer span already
      trace::Span span;
      // acquire (each): a value from a newer write makes the recheck see its odd seq.
      span.name = s.name.load(std::memory_order_acquire);
      span.category = s.category.load(std::memory_order_acquire);
      span.start_ns = s.start_ns.load(std::memory_order_acquire);
      span.end_ns = s.end_ns.load(std::memory_order_acquire);
      span.batch = s.batch.load(std::memory_order_acquire);
      span.bytes = s.bytes.load(std::memory_order_acquire);
      span.slice = s.slice.load(std::memory_order_acquire);
      span.scoped = s.scoped.load(std::memory_order_acquire);
      // relaxed: ordered after the acquire loads above.
      if (s.seq.load(std::memory_order_relaxed) != seq) continue;  // torn: skip
      if (span.end_ns < since_ns) continue;
      span.tid = tid_;
      out->push_back(span);
    }
  }

  // release/acquire: the owner's last spans are complete before its exit is seen.
  void MarkExited() { exited_.store(true, std::memory_order_release); }
  bool exited() const { return exited_.load(std::memory_order_acquire); }

 private:
  const int tid_;
  const std::string thread_name_;
  std::atomic<uint64_t> head_{0};
  std::atomic<bool> exited_{false};
  Slot slots_[trace::kRingEvents];
};

// Every ring; the dumpers walk it. Rings are shared_ptr so a dumper reading
// one outside the lock keeps it alive while its thread exits. std::mutex, not
// absl::Mutex: Debian's abseil is not built with TSAN, which then cannot see
// its happens-before edges (docs/qos.md).
class Registry {
 public:
  static Registry& Get() {
    static Registry* const registry = new Registry();  // never destroyed: threads outlive main
    return *registry;
  }

  void Add(std::shared_ptr<Ring> ring) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t exited = 0;
    for (const auto& r : rings_) exited += r->exited() ? 1 : 0;
    // Bounded: the oldest exited rings go first.
    for (auto it = rings_.begin(); exited >= trace::kExitedRingsMax && it != rings_.end();) {
      if ((*it)->exited()) {
        it = rings_.erase(it);
        --exited;
      } else {
        ++it;
      }
    }
    rings_.push_back(std::move(ring));
  }

  std::vector<std::shared_ptr<Ring>> Rings() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rings_;
  }

  // Drops the given exited rings (they were dumped).
  void DropDumped(const std::vector<std::shared_ptr<Ring>>& dumped) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(rings_, [&](const std::shared_ptr<Ring>& r) {
      return r->exited() && std::find(dumped.begin(), dumped.end(), r) != dumped.end();
    });
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rings_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Ring>> rings_ ABSL_GUARDED_BY(mu_);
};

// The thread's ring, trivially destructible so the hot path reads it with no
// TLS init guard; ThreadRingOwner below marks it exited at thread exit.
inline thread_local Ring* tls_ring = nullptr;
inline thread_local bool tls_exiting = false;

struct ThreadRingOwner {
  std::shared_ptr<Ring> ring;
  ~ThreadRingOwner() {
    if (ring != nullptr) ring->MarkExited();
    tls_ring = nullptr;
    tls_exiting = true;  // spans from later thread_local destructors are dropped
  }
};

// The first span of a thread (or one after its exit began: null).
[[gnu::noinline]] inline Ring* MakeThreadRing() {
  if (tls_exiting) return nullptr;
  thread_local ThreadRingOwner owner;
  char name[64] = {};
  if (::pthread_getname_np(::pthread_self(), name, sizeof(name)) != 0) name[0] = '\0';
  owner.ring = std::make_shared<Ring>(static_cast<int>(::syscall(SYS_gettid)), name);
  Registry::Get().Add(owner.ring);
  tls_ring = owner.ring.get();
  return tls_ring;
}

inline void Append(const char* name, const char* category, int64_t start_ns, int64_t end_ns,
                   uint64_t batch, uint32_t slice, uint64_t bytes, bool scoped) {
  Ring* ring = tls_ring;
  if (ring == nullptr && (ring = MakeThreadRing()) == nullptr) return;
  ring->Append(name, category, start_ns, end_ns, batch, slice, bytes, scoped);
}

// JSON string body of `s` (quotes, backslashes and control bytes escaped).
inline void WriteJsonString(std::ostream& out, std::string_view s) {
  out << '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out << '\\' << c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(c));
      out << esc;
    } else {
      out << c;
    }
  }
  out << '"';
}

// Microseconds with nanosecond precision, as Chrome's "ts"/"dur" take them.
inline void WriteMicros(std::ostream& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out << buf;
}

}  // namespace mooncake::trace_internal

namespace mooncake::trace {

// Turns recording on or off for every thread. Spans already recorded stay.
inline void Enable(bool on) {
  // relaxed: see g_enabled.
  trace_internal::g_enabled.store(on, std::memory_order_relaxed);
}

inline bool Enabled() {
  // relaxed: see g_enabled.
  return trace_internal::g_enabled.load(std::memory_order_relaxed);
}

// Records one span if tracing is on. `name` and `category` must outlive the
// process's last dump (string literals). REQUIRES: start_ns <= end_ns.
inline void Record(const char* name, const char* category, int64_t start_ns, int64_t end_ns,
                   uint64_t batch = 0, uint32_t slice = 0, uint64_t bytes = 0) {
  if (!Enabled()) return;
  MC_DASSERT(name != nullptr && category != nullptr, "a span needs a name and a category");
  MC_DASSERT(start_ns <= end_ns, "a span ends after it starts");
  trace_internal::Append(name, category, start_ns, end_ns, batch, slice, bytes, /*scoped=*/false);
}

// RAII span from construction to destruction; records nothing if tracing
// was off when it began. The arguments may be set while it runs.
class Scope {
 public:
  explicit Scope(const char* name, const char* category, uint64_t batch = 0, uint32_t slice = 0,
                 uint64_t bytes = 0)
      : name_(Enabled() ? name : nullptr),
        category_(category),
        start_ns_(name_ != nullptr ? NowNs() : 0),
        batch_(batch),
        slice_(slice),
        bytes_(bytes) {}
  ~Scope() {
    if (name_ != nullptr) {
      trace_internal::Append(name_, category_, start_ns_, NowNs(), batch_, slice_, bytes_,
                             /*scoped=*/true);
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool active() const { return name_ != nullptr; }
  int64_t start_ns() const { return start_ns_; }  // 0 unless active()
  // Records nothing after all (the work it timed turned out to be none).
  void Dismiss() { name_ = nullptr; }
  void set_batch(uint64_t batch) { batch_ = batch; }
  void set_slice(uint32_t slice) { slice_ = slice; }
  void set_bytes(uint64_t bytes) { bytes_ = bytes; }

 private:
  const char* name_;  // null: tracing was off or Dismiss, record nothing
  const char* const category_;
  const int64_t start_ns_;
  uint64_t batch_;
  uint32_t slice_;
  uint64_t bytes_;
};

// The spans of every ring that ended within the last `window` (all of them
// for InfiniteDuration), ordered by start. Rings of exited threads read here
// are dropped from the registry afterwards.
inline Snapshot Collect(absl::Duration window = absl::InfiniteDuration()) {
  const int64_t since_ns =
      window == absl::InfiniteDuration() ? INT64_MIN : NowNs() - absl::ToInt64Nanoseconds(window);
  Snapshot snap;
  snap.pid = static_cast<int>(::getpid());
  auto& registry = trace_internal::Registry::Get();
  const std::vector<std::shared_ptr<trace_internal::Ring>> rings = registry.Rings();
  std::vector<std::shared_ptr<trace_internal::Ring>> exited;
  for (const auto& r : rings) {
    // Checked before reading: a ring seen exited has all its spans complete.
    const bool was_exited = r->exited();
    const size_t before = snap.spans.size();
    r->ReadInto(since_ns, &snap.spans);
    if (snap.spans.size() > before) snap.threads.push_back(ThreadInfo{r->tid(), r->thread_name()});
    if (was_exited) exited.push_back(r);
  }
  registry.DropDumped(exited);
  std::sort(snap.spans.begin(), snap.spans.end(),
            [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return snap;
}

// Chrome "traceEvents" JSON of `snap`: one complete ("X") event per span,
// ts/dur in microseconds, and a thread_name metadata event per track. A
// Scope's span goes on its thread's track (scopes nest). A Record's span may
// overlap others on its thread (it began elsewhere: a queued slice, a frame
// on the wire), and Chrome and Perfetto draw only nested events on one
// track, so those go on per-category tracks ("router spans 0", ...), each
// span on the first one free at its start; its thread is in args.tid.
inline void WriteChromeJson(const Snapshot& snap, std::ostream& out) {
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  const auto sep = [&] {
    out << (first ? "\n" : ",\n");
    first = false;
  };
  const auto thread_name = [&](int tid, std::string_view name) {
    sep();
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << snap.pid << ",\"tid\":" << tid
        << ",\"args\":{\"name\":";
    trace_internal::WriteJsonString(out, name);
    out << "}}";
  };
  for (const ThreadInfo& t : snap.threads) thread_name(t.tid, t.name);
  struct Track {
    std::string_view category;
    int64_t end_ns;
  };
  std::vector<Track> tracks;              // of unscoped spans; tid = kTrackTidBase + index
  constexpr int kTrackTidBase = 1 << 30;  // above any Linux thread id (pid_max <= 2^22)
  for (const Span& s : snap.spans) {      // by start
    int tid = s.tid;
    if (!s.scoped) {
      size_t k = 0;
      while (k < tracks.size() &&
             (tracks[k].category != s.category || tracks[k].end_ns > s.start_ns)) {
        ++k;
      }
      if (k == tracks.size()) {
        tracks.push_back({s.category, s.end_ns});
        size_t same = 0;
        for (const Track& t : tracks) same += t.category == s.category ? 1 : 0;
        thread_name(kTrackTidBase + static_cast<int>(k),
                    std::string(s.category) + " spans " + std::to_string(same - 1));
      }
      tracks[k].end_ns = std::max(tracks[k].end_ns, s.end_ns);
      tid = kTrackTidBase + static_cast<int>(k);
    }
    sep();
    out << "{\"name\":";
    trace_internal::WriteJsonString(out, s.name);
    out << ",\"cat\":";
    trace_internal::WriteJsonString(out, s.category);
    out << ",\"ph\":\"X\",\"ts\":";
    trace_internal::WriteMicros(out, s.start_ns);
    out << ",\"dur\":";
    trace_internal::WriteMicros(out, std::max<int64_t>(0, s.end_ns - s.start_ns));
    out << ",\"pid\":" << snap.pid << ",\"tid\":" << tid << ",\"args\":{\"batch\":" << s.batch
        << ",\"slice\":" << s.slice << ",\"bytes\":" << s.bytes;
    if (!s.scoped) out << ",\"tid\":" << s.tid;
    out << "}}";
  }
  out << "\n]}\n";
}

// Collect(window) written as Chrome JSON.
inline void DumpChromeJson(std::ostream& out, absl::Duration window = absl::InfiniteDuration()) {
  WriteChromeJson(Collect(window), out);
}

}  // namespace mooncake::trace

#endif  // MOONCAKE_BASE_TRACE_H_
