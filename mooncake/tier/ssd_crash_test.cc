// Crash safety of SsdTier: a forked writer process writes and removes
// objects and reports each acknowledgement through a pipe; the parent kills
// it with SIGKILL at a random moment, reopens the file and checks that
// every acknowledged write is present with exactly its bytes, every
// acknowledged remove is absent, and no object is served with wrong bytes.
// The state carries over from crash to crash (each writer recovers the file
// its predecessor left).
//
// Flags (environment, so the manual target can run more points):
//   MOONCAKE_CRASH_POINTS  number of kills per durability (default 70: the
//                          three durabilities make the 210 >= 200 points of
//                          issue #10 in every CI run)
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "mooncake/base/mutex.h"
#include "mooncake/tier/blocking.h"
#include "mooncake/tier/ssd_tier.h"
#include "mooncake/tier/tier_testing.h"

namespace mooncake::tier {

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TierConformanceTest);

namespace {

constexpr uint64_t kFileBytes = 24 << 20;

SsdTierOptions CrashOptions(const std::string& path, uint64_t capacity, Durability durability) {
  SsdTierOptions o;
  o.durability = durability;
  o.paths = {path};
  o.capacity_bytes_per_file = capacity;
  o.bounce_arena_bytes = 4 << 20;
  o.io_chunk_bytes = 64 << 10;
  o.device_read_bytes_per_s = o.device_write_bytes_per_s = 1e9;
  return o;
}

size_t ObjectSize(uint64_t id) { return 1000 + (id * 7919) % 150000; }
std::string Key(uint64_t id) { return "obj" + std::to_string(id); }

// What a writer keeps live (recovered objects plus its own writes): half the
// file, so no write ever fails for space and every kill lands on a writer
// that is writing (a full file would leave later writers failing every write
// and the test checking nothing).
constexpr uint64_t kLiveBudget = kFileBytes / 2;

// The child: keeps 4 operations in flight; removes the object it wrote just
// before every 5th one (often while that write is still in flight), and the
// oldest live objects (its predecessors' first) to stay under kLiveBudget.
// Reports, one line each:
//   "W id"       a write acknowledged        "r id"  a remove about to be issued
//   "R id"       a remove acknowledged       "E id code"  a write that failed
//   "n id"       a remove that found nothing: it raced its object's write
//                (the tier indexes an object when its write finishes), so it
//                had no effect; the writer removes that object again later
//   "X id code"  a remove that failed otherwise
[[noreturn]] void Writer(const std::string& path, uint64_t first_id, int fd,
                         Durability durability) {
  auto tier = SsdTier::Open(CrashOptions(path, 0, durability));
  if (!tier.ok()) {
    std::fprintf(stderr, "writer: %s\n", std::string(tier.status().message()).c_str());
    _exit(3);
  }
  std::atomic<int> inflight{0};
  auto report = [fd](char kind, uint64_t id, int code = 0) {
    char line[48];
    const int n = code == 0 ? std::snprintf(line, sizeof(line), "%c %llu\n", kind,
                                            static_cast<unsigned long long>(id))
                            : std::snprintf(line, sizeof(line), "%c %llu %d\n", kind,
                                            static_cast<unsigned long long>(id), code);
    (void)!::write(fd, line, n);
  };
  // Live ids, oldest first; the recovered ones come from the file itself.
  std::vector<uint64_t> recovered;
  (*tier)->ForEach([&](const ObjectInfo& info) {
    recovered.push_back(std::strtoull(info.key.c_str() + 3, nullptr, 10));
  });
  std::sort(recovered.begin(), recovered.end());
  std::deque<uint64_t> live(recovered.begin(), recovered.end());
  // This thread's bookkeeping: removes issued for ids still in `live`, and the
  // bytes of what is live less what removes were issued for.
  absl::flat_hash_set<uint64_t> removed;
  uint64_t live_bytes = 0;
  for (uint64_t id : live) live_bytes += ObjectSize(id);
  // Removes that found nothing, from the tier's callbacks, taken back by this
  // thread (each id once: a second miss means its write failed, reported).
  Mutex missed_mu;
  std::vector<uint64_t> missed;
  absl::flat_hash_set<uint64_t> retried;
  auto remove = [&](uint64_t victim) {
    report('r', victim);  // intent first: an unacknowledged remove may still take effect
    live_bytes -= ObjectSize(victim);
    ++inflight;
    (*tier)->Remove(Key(victim), [&, victim](absl::Status s) {
      if (s.ok()) {
        report('R', victim);
      } else if (absl::IsNotFound(s)) {
        report('n', victim);
        MutexLock l(&missed_mu);
        missed.push_back(victim);
      } else {
        report('X', victim, static_cast<int>(s.code()));
      }
      --inflight;
    });
  };
  auto take_back_missed = [&] {
    std::vector<uint64_t> ids;
    {
      MutexLock l(&missed_mu);
      ids.swap(missed);
    }
    for (uint64_t id : ids) {
      if (!retried.insert(id).second) continue;
      live_bytes += ObjectSize(id);
      // Still queued (the remove's mark is dropped) or already passed over.
      if (removed.erase(id) == 0) live.push_front(id);
    }
  };
  for (uint64_t id = first_id;; ++id) {
    take_back_missed();
    while (live_bytes + ObjectSize(id) > kLiveBudget && !live.empty()) {
      const uint64_t oldest = live.front();
      live.pop_front();
      if (removed.erase(oldest) == 0) {
        while (inflight.load() >= 4) std::this_thread::yield();
        remove(oldest);
      }
    }
    while (inflight.load() >= 4) std::this_thread::yield();
    const auto data = TestObject(Key(id), ObjectSize(id));
    ++inflight;
    (*tier)->Write(Key(id), data, {}, [&, id](absl::Status s) {
      if (s.ok()) {
        report('W', id);
      } else {
        report('E', id, static_cast<int>(s.code()));
      }
      --inflight;
    });
    live.push_back(id);
    live_bytes += ObjectSize(id);
    if (id % 5 == 0 && id > first_id) {
      while (inflight.load() >= 4) std::this_thread::yield();
      remove(id - 1);
      removed.insert(id - 1);  // still in `live`: passed over when it reaches the front
    }
  }
}

struct Expectation {
  // id -> acknowledged present (true) or acknowledged removed (false).
  absl::flat_hash_map<uint64_t, bool> present;
  // Removes issued and not yet answered: either outcome is correct.
  absl::flat_hash_set<uint64_t> removing;
  uint64_t acked = 0;                     // 'W' and 'R' lines: acknowledged writes and removes
  uint64_t failed_writes = 0;             // 'E' lines: a write that returned an error
  uint64_t missed_removes = 0;            // 'n' lines: a remove that raced its object's write
  uint64_t failed_removes = 0;            // 'X' lines: a remove that failed otherwise
  uint64_t removed_before_write_ack = 0;  // an 'R' line before its object's 'W' line
};

void Apply(const std::string& text, Expectation& e, uint64_t& max_id) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // a torn last line: the kill interrupted the report
    const char kind = text[pos];
    const uint64_t id = std::strtoull(text.c_str() + pos + 2, nullptr, 10);
    max_id = std::max(max_id, id);
    if (kind == 'W') {
      // A remove on another lane can find the object between the tier indexing it and
      // the write's callback, and be acknowledged first: the object is then removed.
      if (!e.present.try_emplace(id, true).second) ++e.removed_before_write_ack;
      ++e.acked;
    } else if (kind == 'R') {
      e.present[id] = false;
      e.removing.erase(id);
      ++e.acked;
    } else if (kind == 'E') {
      ++e.failed_writes;
    } else if (kind == 'n') {
      // Found nothing, so it did nothing: the object is what its write says.
      e.removing.erase(id);
      ++e.missed_removes;
    } else if (kind == 'X') {
      ++e.failed_removes;  // stays in `removing`: its effect is unknown
    } else {
      e.removing.insert(id);  // 'r': a remove was issued; until answered, either outcome
    }
    pos = nl + 1;
  }
}

int CrashPoints() {
  const char* env = std::getenv("MOONCAKE_CRASH_POINTS");
  return env ? std::atoi(env) : 70;
}

// Every durability promises that an acknowledged write or remove survives the
// process being killed; kProcessCrash acknowledges before any fdatasync (the
// background one runs every 100 ms), and kNoSync never syncs while open (its
// removes are acknowledged unsynced too), so their kills land with
// acknowledged operations not yet synced; each reopen is in the same boot.
class SsdCrashTest : public ::testing::TestWithParam<Durability> {};

TEST_P(SsdCrashTest, AcknowledgedRecordsSurviveSigkillAtRandomPoints) {
  const Durability durability = GetParam();
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/crash." +
                           std::to_string(::getpid()) + "." +
                           std::to_string(static_cast<int>(durability));
  { ASSERT_TRUE(SsdTier::Open(CrashOptions(path, kFileBytes, durability)).ok()); }
  std::mt19937_64 rng(12345);
  Expectation expect;
  uint64_t next_id = 1, lost = 0, wrong = 0, verified = 0, acks = 0;
  int points_with_acks = 0;
  const int points = CrashPoints();
  // The kill window grows with how long a writer takes to acknowledge its
  // first operation (point 0 measures it and is killed right then), so on a
  // loaded machine or in a sanitizer build (both slow Open down many times)
  // writers are still killed mid-stream, not always inside Open.
  std::chrono::microseconds window(150000);
  for (int point = 0; point < points; ++point) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      Writer(path, next_id, fds[1], durability);
    }
    ::close(fds[1]);
    std::string text;
    char buf[4096];
    if (point == 0) {
      const auto start = std::chrono::steady_clock::now();
      while (text.find('\n') == std::string::npos) {
        const ssize_t n = ::read(fds[0], buf, sizeof(buf));
        if (n <= 0) break;  // the writer died before its first acknowledgement
        text.append(buf, n);
      }
      window = std::max(window, 3 * std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now() - start));
    } else {
      // Random kill moment: anywhere from inside Open (recovery) to well into
      // the write stream.
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % window.count()));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status)) FAIL() << "writer exited with " << WEXITSTATUS(status);
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
    ::close(fds[0]);
    uint64_t max_id = next_id;
    Apply(text, expect, max_id);
    if (expect.acked > acks) ++points_with_acks;
    acks = expect.acked;
    next_id = max_id + 100;  // ids the dead writer may have used unacknowledged are skipped
    auto tier = SsdTier::Open(CrashOptions(path, 0, durability));
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (const auto& [id, present] : expect.present) {
      const bool has = (*tier)->Contains(Key(id));
      if (present && !has && !expect.removing.contains(id)) ++lost;
      if (!present && has) ++wrong;  // an acknowledged remove came back
    }
    // Every object present is read back and must be exactly its bytes.
    std::vector<std::string> keys;
    (*tier)->ForEach([&](const ObjectInfo& info) { keys.push_back(info.key); });
    for (const std::string& key : keys) {
      const uint64_t id = std::strtoull(key.c_str() + 3, nullptr, 10);
      std::vector<std::byte> back(ObjectSize(id));
      auto r = ReadBlocking(**tier, key, back);
      ++verified;
      if (!r.ok() || r->raw_bytes != back.size() || back != TestObject(key, back.size())) ++wrong;
    }
  }
  std::printf(
      "durability %s: crash points %d (kill window %lld ms), %d with acknowledged operations, "
      "acknowledged ops %llu, failed writes %llu, removes that raced their write %llu, failed "
      "removes %llu, removes acknowledged before their write %llu, objects verified %llu, "
      "lost %llu, wrong %llu\n",
      std::string(DurabilityName(durability)).c_str(), points,
      static_cast<long long>(window.count() / 1000), points_with_acks,
      static_cast<unsigned long long>(acks), static_cast<unsigned long long>(expect.failed_writes),
      static_cast<unsigned long long>(expect.missed_removes),
      static_cast<unsigned long long>(expect.failed_removes),
      static_cast<unsigned long long>(expect.removed_before_write_ack),
      static_cast<unsigned long long>(verified), static_cast<unsigned long long>(lost),
      static_cast<unsigned long long>(wrong));
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(wrong, 0u);
  // The writers kept the file half full: no write may fail, and most kills
  // must land after some acknowledgements (a kill inside Open acknowledges
  // nothing; the window is three times the first writer's time to its first
  // acknowledgement, so about two thirds of the kills land after it).
  EXPECT_EQ(expect.failed_writes, 0u);
  EXPECT_EQ(expect.failed_removes, 0u);
  EXPECT_GE(points_with_acks, points / 3);
}

INSTANTIATE_TEST_SUITE_P(EveryDurability, SsdCrashTest,
                         ::testing::Values(Durability::kPowerLoss, Durability::kProcessCrash,
                                           Durability::kNoSync));

}  // namespace
}  // namespace mooncake::tier
