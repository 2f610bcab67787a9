// mooncake_bench: the mooncake store against memcached and Redis, side by
// side in one run, on loopback (docs/bench.md).
//
// It starts memcached (-I 16m -t 4), redis-server (no persistence) and the
// store (tools/mooncake_store --role=all) as separate processes on free
// ports of 127.0.0.1, then for every value size x client count runs, per
// system and repetition: a put phase (work-bound), get phases for every
// batch size (time-bound), and a clean-up. The store runs twice: through its
// TCP transport only (store-tcp) and reading through shared memory on this
// host (store-shm). Then a fill-past-capacity run per system on small
// instances. Tables go to stdout, progress to stderr, everything to --json.
//
//   bazel run -c opt //tools:mooncake_bench -- --json=/tmp/bench.json
//   bazel run -c opt //tools:mooncake_bench -- --quick
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/fast_hash.h"
#include "mooncake/base/mutex.h"
#include "mooncake/base/status_macros.h"
#include "tools/bench/fill.h"
#include "tools/bench/harness.h"
#include "tools/bench/json_writer.h"
#include "tools/bench/memcached_driver.h"
#include "tools/bench/redis_driver.h"
#include "tools/bench/report.h"
#include "tools/bench/servers.h"
#include "tools/bench/store_driver.h"
#include "tools/bench/targets.h"
#include "tools/bench/text_query.h"
#include "tools/bench/value_pool.h"

ABSL_FLAG(bool, quick, false,
          "small, fast run (sizes 64K,1M; clients 1,4; one repetition; 0.2 s gets); flags given "
          "explicitly still win");
ABSL_FLAG(std::string, sizes, "64K,1M,4M,16M", "value sizes (K = KiB, M = MiB)");
ABSL_FLAG(std::string, clients, "1,8", "client counts (one thread and one connection each)");
ABSL_FLAG(std::string, batches, "1,8", "keys per get request (mget / MGET / BatchGet)");
ABSL_FLAG(std::string, put_batches, "1",
          "keys per put request (1: single puts; more: pipelined sets / MSET / BatchPut), "
          "each a put phase of its own over fresh keys");
ABSL_FLAG(int, reps, 3, "repetitions per cell; figures are medians over them");
ABSL_FLAG(double, get_seconds, 1.0, "duration of each get phase");
ABSL_FLAG(int, working_set_mb, 256, "bytes put per cell and system (keys = this / size)");
ABSL_FLAG(std::string, systems, "memcached,redis,store-tcp,store-shm", "systems to run");
ABSL_FLAG(std::string, memcached_protocol, "ascii",
          "libmemcached protocol: ascii, binary or both (ratios use the faster per cell)");
ABSL_FLAG(std::string, verify, "sampled", "get checks: sampled (length + 4 windows) or full");
ABSL_FLAG(bool, fill, true, "run the fill-past-capacity comparison");
ABSL_FLAG(int, fill_capacity_mb, 256, "capacity of each fill instance");
ABSL_FLAG(double, fill_factor, 3.0, "fill puts this many times the capacity");
ABSL_FLAG(int, fill_clients, 4, "clients putting during the fill run");
ABSL_FLAG(std::string, fill_value, "1M", "value size of the fill run");
ABSL_FLAG(int, fill_ssd_mb, 0,
          "also fill a store whose worker has an SSD tier of this size (store+ssd; same DRAM)");
ABSL_FLAG(std::string, json, "", "write all results as JSON to this path");
ABSL_FLAG(std::string, store_binary, "",
          "tools/mooncake_store; default: next to this binary or in its runfiles");
ABSL_FLAG(std::string, memcached_binary, "memcached", "memcached to start");
ABSL_FLAG(std::string, redis_binary, "redis-server", "redis-server to start");
ABSL_FLAG(std::string, store_args, "", "extra flags for the store, space-separated");
ABSL_FLAG(int, store_tcp_lanes,
          static_cast<int>(mooncake::client::ClientOptions{}.tcp_lanes_per_peer),
          "store client: TCP connections per worker (ClientOptions)");
ABSL_FLAG(int, store_tcp_spread_min_kib,
          static_cast<int>(mooncake::client::ClientOptions{}.tcp_spread_min_bytes >> 10),
          "store client: requests above this many KiB spread over the connections");
ABSL_FLAG(int, store_tcp_whole_lanes,
          static_cast<int>(mooncake::client::ClientOptions{}.tcp_whole_request_lanes),
          "store client: the connections a transfer batch may start on, in turn; a batch's "
          "requests take the connections after its start (0: any; ClientOptions)");
ABSL_FLAG(int, store_tcp_slice_kib,
          static_cast<int>(mooncake::client::ClientOptions{}.tcp_slice_bytes >> 10),
          "store client: TCP slice size in KiB (ClientOptions)");
ABSL_FLAG(bool, store_verify_checksums, mooncake::client::ClientOptions{}.verify_checksums,
          "store client: verify every value read against its checksum (ClientOptions; off only "
          "to measure what the check costs)");
ABSL_FLAG(std::string, value_data, "random",
          "what values hold: random (incompressible bytes) or bf16 (synthetic bf16 KV "
          "activations; the store's puts declare dtype bf16, so its SSD tier may compress them)");
ABSL_FLAG(std::string, store_evictions_metric, "mooncake_master_evictions_total",
          "the store's /metrics counter of evicted objects");
ABSL_FLAG(std::string, log_dir, "",
          "where server logs go (created if missing); default a new directory in /tmp");
ABSL_FLAG(double, progress_s, 5.0, "seconds between progress lines on stderr (0: none)");

namespace mooncake::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Config {
  std::vector<size_t> sizes, clients, batches, put_batches;
  int reps = 3;
  absl::Duration get_duration;
  uint64_t working_set_bytes = 0;
  std::vector<std::string> systems;
  std::string memcached_protocol;
  VerifyMode verify = VerifyMode::kSampled;
  bool fill = true;
  uint64_t fill_capacity_bytes = 0;
  double fill_factor = 3;
  size_t fill_clients = 4;
  size_t fill_value_bytes = kMiB;
  uint64_t fill_ssd_bytes = 0;  // 0: no store+ssd fill
  std::string store_binary, log_dir;
};

absl::StatusOr<size_t> ParseSize(std::string_view s) {
  uint64_t mult = 1;
  if (s.ends_with('K') || s.ends_with('k')) mult = 1024;
  if (s.ends_with('M') || s.ends_with('m')) mult = kMiB;
  if (mult != 1) s.remove_suffix(1);
  uint64_t n = 0;
  if (!absl::SimpleAtoi(AbslView(s), &n) || n == 0 || n > (uint64_t{1} << 40) / mult) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", AbslView(s), "' is not a positive number with K or M"));
  }
  return static_cast<size_t>(n * mult);
}

absl::StatusOr<std::vector<size_t>> ParseList(const std::string& flag, const std::string& text,
                                              bool sizes) {
  std::vector<size_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<size_t> v = ParseSize(StdView(part));
    if (!v.ok() || (!sizes && part.back() > '9')) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a ", sizes ? "size" : "count"));
    }
    out.push_back(*v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

// The flag's value, or `quick` when --quick is on and the flag was left at
// its default.
template <typename T>
T Pick(const absl::Flag<T>& flag, std::string_view name, T quick) {
  const absl::CommandLineFlag* f = absl::FindCommandLineFlag(AbslView(name));
  const bool at_default = f != nullptr && f->CurrentValue() == f->DefaultValue();
  return absl::GetFlag(FLAGS_quick) && at_default ? quick : absl::GetFlag(flag);
}

// The store client's settings from the --store_* flags (negative values are
// refused in LoadConfig first: they would wrap in the unsigned fields).
StoreOptions StoreOptionsFromFlags() {
  StoreOptions o;
  o.tcp_lanes_per_peer = static_cast<size_t>(absl::GetFlag(FLAGS_store_tcp_lanes));
  o.tcp_slice_bytes = static_cast<uint32_t>(absl::GetFlag(FLAGS_store_tcp_slice_kib)) << 10;
  o.tcp_whole_request_lanes = static_cast<size_t>(absl::GetFlag(FLAGS_store_tcp_whole_lanes));
  o.tcp_spread_min_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_store_tcp_spread_min_kib))
                           << 10;
  o.verify_checksums = absl::GetFlag(FLAGS_store_verify_checksums);
  if (absl::GetFlag(FLAGS_value_data) == "bf16") o.dtype = store::proto::DTYPE_BF16;
  return o;
}

absl::StatusOr<Config> LoadConfig() {
  Config c;
  ASSIGN_OR_RETURN(c.sizes,
                   ParseList("sizes", Pick(FLAGS_sizes, "sizes", std::string("64K,1M")), true));
  ASSIGN_OR_RETURN(c.clients,
                   ParseList("clients", Pick(FLAGS_clients, "clients", std::string("1,4")), false));
  ASSIGN_OR_RETURN(c.batches,
                   ParseList("batches", Pick(FLAGS_batches, "batches", std::string("1,4")), false));
  for (size_t b : c.batches) {
    if (b > kMaxBatchKeys) return absl::InvalidArgumentError("--batches: at most 256 keys");
  }
  ASSIGN_OR_RETURN(c.put_batches,
                   ParseList("put_batches", absl::GetFlag(FLAGS_put_batches), false));
  for (size_t b : c.put_batches) {
    if (b > kMaxBatchKeys) return absl::InvalidArgumentError("--put_batches: at most 256 keys");
  }
  c.reps = Pick(FLAGS_reps, "reps", 1);
  c.get_duration = absl::Seconds(Pick(FLAGS_get_seconds, "get_seconds", 0.2));
  c.working_set_bytes =
      static_cast<uint64_t>(Pick(FLAGS_working_set_mb, "working_set_mb", 32)) * kMiB;
  c.systems = absl::StrSplit(absl::GetFlag(FLAGS_systems), ',', absl::SkipEmpty());
  c.memcached_protocol = absl::GetFlag(FLAGS_memcached_protocol);
  const std::string verify = Pick(FLAGS_verify, "verify", std::string("full"));
  c.verify = verify == "full" ? VerifyMode::kFull : VerifyMode::kSampled;
  c.fill = absl::GetFlag(FLAGS_fill);
  c.fill_capacity_bytes =
      static_cast<uint64_t>(Pick(FLAGS_fill_capacity_mb, "fill_capacity_mb", 16)) * kMiB;
  c.fill_factor = Pick(FLAGS_fill_factor, "fill_factor", 2.0);
  c.fill_clients = static_cast<size_t>(Pick(FLAGS_fill_clients, "fill_clients", 2));
  ASSIGN_OR_RETURN(c.fill_value_bytes, ParseSize(absl::GetFlag(FLAGS_fill_value)));
  if (absl::GetFlag(FLAGS_fill_ssd_mb) < 0) {
    return absl::InvalidArgumentError("--fill_ssd_mb must be >= 0");
  }
  if (const std::string d = absl::GetFlag(FLAGS_value_data); d != "random" && d != "bf16") {
    return absl::InvalidArgumentError("--value_data must be random or bf16");
  }
  c.fill_ssd_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_fill_ssd_mb)) * kMiB;
  // The store client's transport options go to unsigned fields, where a
  // negative value would wrap to a huge one the transport cannot tell from a
  // real setting; their ranges are the transport's to check (TcpTransport).
  for (const auto* flag : {&FLAGS_store_tcp_lanes, &FLAGS_store_tcp_slice_kib,
                           &FLAGS_store_tcp_whole_lanes, &FLAGS_store_tcp_spread_min_kib}) {
    if (absl::GetFlag(*flag) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", absl::GetFlagReflectionHandle(*flag).Name(), " must be >= 0"));
    }
  }
  // The ranges are the client's and its transport's to say: asked here, so a
  // bad value stops the bench before any server starts.
  if (absl::Status st = StoreDriver::CheckOptions(StoreOptionsFromFlags()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--store_tcp_*: ", st.message()));
  }
  if (c.reps < 1 || c.get_duration <= absl::ZeroDuration() || c.working_set_bytes == 0 ||
      c.fill_clients < 1 || c.fill_factor <= 1 || c.fill_capacity_bytes == 0) {
    return absl::InvalidArgumentError(
        "--reps, --get_seconds, --working_set_mb, --fill_clients, --fill_capacity_mb must be > 0 "
        "and --fill_factor > 1");
  }
  if (verify != "full" && verify != "sampled") {
    return absl::InvalidArgumentError("--verify must be sampled or full");
  }
  if (c.memcached_protocol != "ascii" && c.memcached_protocol != "binary" &&
      c.memcached_protocol != "both") {
    return absl::InvalidArgumentError("--memcached_protocol must be ascii, binary or both");
  }
  for (const std::string& s : c.systems) {
    if (s != "memcached" && s != "redis" && s != "store-tcp" && s != "store-shm") {
      return absl::InvalidArgumentError(
          absl::StrCat("--systems: unknown '", s, "' (memcached, redis, store-tcp, store-shm)"));
    }
  }
  c.store_binary = bench::FindStoreBinary(absl::GetFlag(FLAGS_store_binary)).value_or("");
  c.log_dir = absl::GetFlag(FLAGS_log_dir);
  return c;
}

bool Has(const Config& c, std::string_view system) {
  return std::find(c.systems.begin(), c.systems.end(), system) != c.systems.end();
}

// ---- Progress ----------------------------------------------------------------

// What runs now and how far the run is, printed on stderr every --progress_s.
class Progress {
 public:
  Progress(size_t total_units, double interval_s) : total_(total_units) {
    if (interval_s > 0) {
      thread_ = std::thread([this, interval_s] { Loop(absl::Seconds(interval_s)); });
    }
  }
  ~Progress() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

  void Start(std::string what) {
    MutexLock lock(&mu_);
    what_ = std::move(what);
  }
  void Done() {
    MutexLock lock(&mu_);
    ++done_;
  }
  std::atomic<uint64_t>* ops() { return &ops_; }

 private:
  void Loop(absl::Duration interval) {
    MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(Condition(&stop_), interval)) {
      const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
      const size_t todo = total_ > done_ ? total_ - done_ : 0;
      const double left = done_ == 0 ? 0 : elapsed * static_cast<double>(todo) / done_;
      std::fprintf(stderr, "progress: %zu/%zu runs (%.0f%%), now %s, %llu ops, %.0f s elapsed",
                   done_, total_, 100.0 * done_ / total_, what_.c_str(),
                   static_cast<unsigned long long>(ops_.load(std::memory_order_relaxed)), elapsed);
      if (done_ > 0) std::fprintf(stderr, ", ~%.0f s left", left);
      std::fprintf(stderr, "\n");
    }
  }

  const size_t total_;
  const absl::Time start_ = absl::Now();
  std::atomic<uint64_t> ops_{0};  // relaxed: display only
  Mutex mu_;
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::string what_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// ---- One system, one cell, one repetition ---------------------------------------

template <typename D>
using Factory = std::function<absl::StatusOr<std::unique_ptr<D>>(size_t value_bytes)>;
template <typename D>
using Clear = std::function<absl::Status(std::span<const std::unique_ptr<D>>, const KeySpace&)>;

struct Cell {
  size_t index = 0;
  size_t value_bytes = 0;
  size_t clients = 0;
  size_t keys = 0;
};

class Results {
 public:
  void Add(std::string_view system, Op op, const Cell& cell, size_t batch, PhaseResult r) {
    for (Row& row : rows_) {
      if (row.system == system && row.op == op && row.value_bytes == cell.value_bytes &&
          row.clients == cell.clients && row.batch == batch) {
        row.reps.push_back(std::move(r));
        return;
      }
    }
    Row row;
    row.system = std::string(system);
    row.op = op;
    row.value_bytes = cell.value_bytes;
    row.clients = cell.clients;
    row.batch = batch;
    row.reps.push_back(std::move(r));
    rows_.push_back(std::move(row));
  }
  std::vector<Row>& rows() { return rows_; }

 private:
  std::vector<Row> rows_;
};

template <typename D>
absl::StatusOr<std::vector<std::unique_ptr<D>>> ConnectAll(const Factory<D>& make, size_t n,
                                                           size_t value_bytes) {
  std::vector<std::unique_ptr<D>> drivers;
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(auto d, make(value_bytes));
    drivers.push_back(std::move(d));
  }
  return drivers;
}

struct Context {
  const Config& config;
  const ValuePool& pool;
  Progress& progress;
  Results& results;
  int failed_runs = 0;
};

template <typename D>
absl::Status RunRep(const Factory<D>& make, const Clear<D>& clear, pid_t server_pid, Context& ctx,
                    const Cell& cell, int rep) {
  ASSIGN_OR_RETURN(auto drivers, ConnectAll(make, cell.clients, cell.value_bytes));
  const std::string system(drivers[0]->system());
  const std::span<const std::unique_ptr<D>> ds(drivers);
  const KeySpace keys{absl::StrCat("mb/", system, "/", cell.index, "/", rep), cell.keys};
  const std::string where = absl::StrCat(SizeName(cell.value_bytes), " x", cell.clients, " ",
                                         system, " rep ", rep + 1, "/", ctx.config.reps);
  ctx.progress.Start(absl::StrCat("put ", where));
  PhaseResult put = RunPuts(ds, ctx.pool, keys, cell.value_bytes, ctx.progress.ops(), server_pid);
  if (std::find(ctx.config.put_batches.begin(), ctx.config.put_batches.end(), 1) !=
      ctx.config.put_batches.end()) {
    ctx.results.Add(system, Op::kPut, cell, 1, std::move(put));
  }
  for (size_t batch : ctx.config.batches) {
    if (batch > cell.keys) continue;
    ctx.progress.Start(absl::StrCat("get b=", batch, " ", where));
    GetSpec spec{cell.value_bytes,
                 batch,
                 ctx.config.get_duration,
                 ctx.config.verify,
                 cell.index * 100 + static_cast<uint64_t>(rep),
                 server_pid};
    ctx.results.Add(system, Op::kGet, cell, batch,
                    RunGets(ds, ctx.pool, keys, spec, ctx.progress.ops()));
  }
  RETURN_IF_ERROR(clear(ds, keys));
  // Batched puts: each size a phase of its own over fresh keys (objects are
  // immutable), cleared after.
  for (size_t batch : ctx.config.put_batches) {
    if (batch == 1 || batch > cell.keys) continue;
    const KeySpace fresh{absl::StrCat(keys.prefix, "/p", batch), cell.keys};
    ctx.progress.Start(absl::StrCat("put b=", batch, " ", where));
    ctx.results.Add(
        system, Op::kPut, cell, batch,
        RunPuts(ds, ctx.pool, fresh, cell.value_bytes, ctx.progress.ops(), server_pid, batch));
    RETURN_IF_ERROR(clear(ds, fresh));
  }
  return absl::OkStatus();
}

// A system of the comparison: its name and how to run one repetition of a cell.
struct SystemRun {
  std::string name;
  std::function<absl::Status(Context&, const Cell&, int rep)> run;
};

template <typename D>
SystemRun MakeSystem(std::string name, Factory<D> make, Clear<D> clear, const Server& server) {
  return {std::move(name), [make = std::move(make), clear = std::move(clear),
                            pid = server.process.pid()](Context& ctx, const Cell& cell, int rep) {
            return RunRep<D>(make, clear, pid, ctx, cell, rep);
          }};
}

// ---- Servers and systems ------------------------------------------------------------

struct Servers {
  std::optional<Server> memcached, redis, store;
};

absl::Status StartServers(const Config& c, uint64_t max_value, Servers& s) {
  if (Has(c, "memcached")) {
    MemcachedConfig m;
    m.binary = absl::GetFlag(FLAGS_memcached_binary);
    m.memory_mb = (2 * c.working_set_bytes + 2 * max_value) / kMiB + 64;
    ASSIGN_OR_RETURN(s.memcached, StartMemcached(m, c.log_dir + "/memcached.log"));
  }
  if (Has(c, "redis")) {
    RedisConfig r;
    r.binary = absl::GetFlag(FLAGS_redis_binary);
    ASSIGN_OR_RETURN(s.redis, StartRedis(r, c.log_dir + "/redis.log"));
  }
  if (Has(c, "store-tcp") || Has(c, "store-shm")) {
    if (c.store_binary.empty()) {
      return absl::NotFoundError(
          "no mooncake_store binary (build //tools:mooncake_store or pass --store_binary)");
    }
    StoreConfig st;
    st.binary = c.store_binary;
    // Removed objects keep their space until their read leases end, so room
    // for three working sets keeps the store below its eviction watermark.
    st.segment_bytes = 3 * (c.working_set_bytes + max_value) + 256 * kMiB;
    st.extra_args = absl::StrSplit(absl::GetFlag(FLAGS_store_args), ' ', absl::SkipEmpty());
    ASSIGN_OR_RETURN(s.store, StartStore(st, c.log_dir + "/store.log", c.log_dir + "/store.ready"));
  }
  return absl::OkStatus();
}

template <typename D>
Clear<D> FlushClear() {
  return [](std::span<const std::unique_ptr<D>> ds, const KeySpace&) { return ds[0]->FlushAll(); };
}

Factory<MemcachedDriver> MemcachedFactory(const Server& s, bool binary) {
  return [port = s.port, binary](size_t) {
    MemcachedOptions o;
    o.port = port;
    o.binary_protocol = binary;
    return MemcachedDriver::Connect(o);
  };
}

// A store client maps (and, through SHM, populates) a worker's whole segment
// the first time it touches it: a one-off cost per client process that a
// long-lived engine pays once. Each new driver pays it here, untimed, with a
// tiny put/get/remove, so the timed phases measure the steady state (the
// cost itself is in docs/bench.md).
Factory<StoreDriver> StoreFactory(const Server& s, bool shm) {
  return [address = s.address,
          shm](size_t value_bytes) -> absl::StatusOr<std::unique_ptr<StoreDriver>> {
    StoreOptions o = StoreOptionsFromFlags();
    o.master_address = address;
    o.use_shm = shm;
    o.max_value_bytes = value_bytes;
    ASSIGN_OR_RETURN(auto d, StoreDriver::Connect(o));
    static std::atomic<uint64_t> serial{0};
    const std::string key = absl::StrCat("mb/warm/", getpid(), "/", serial.fetch_add(1));
    RETURN_IF_ERROR(d->Put(key, "warm"));
    RETURN_IF_ERROR(d->Get(key).status());
    RETURN_IF_ERROR(d->Remove(key));
    return d;
  };
}

std::vector<SystemRun> MakeSystems(const Config& c, const Servers& s) {
  std::vector<SystemRun> out;
  if (s.memcached) {
    for (bool binary : {false, true}) {
      if (c.memcached_protocol != "both" && binary != (c.memcached_protocol == "binary")) continue;
      out.push_back(MakeSystem<MemcachedDriver>(binary ? "memcached-bin" : "memcached",
                                                MemcachedFactory(*s.memcached, binary),
                                                FlushClear<MemcachedDriver>(), *s.memcached));
    }
  }
  if (s.redis) {
    Factory<RedisDriver> make = [port = s.redis->port](size_t) {
      RedisOptions o;
      o.port = port;
      return RedisDriver::Connect(o);
    };
    out.push_back(MakeSystem<RedisDriver>("redis", make, FlushClear<RedisDriver>(), *s.redis));
  }
  for (bool shm : {false, true}) {
    if (!s.store || !Has(c, shm ? "store-shm" : "store-tcp")) continue;
    out.push_back(MakeSystem<StoreDriver>(
        shm ? "store-shm" : "store-tcp", StoreFactory(*s.store, shm),
        [](auto ds, const KeySpace& k) { return RemoveAll(ds, k); }, *s.store));
  }
  return out;
}

// ---- The comparison ---------------------------------------------------------------------

std::vector<Cell> MakeCells(const Config& c) {
  std::vector<Cell> cells;
  const size_t max_batch = *std::max_element(c.batches.begin(), c.batches.end());
  for (size_t size : c.sizes) {
    for (size_t clients : c.clients) {
      Cell cell;
      cell.index = cells.size();
      cell.value_bytes = size;
      cell.clients = clients;
      cell.keys = std::max<size_t>({c.working_set_bytes / size, max_batch, clients});
      cells.push_back(cell);
    }
  }
  return cells;
}

void RunComparison(Context& ctx, std::vector<SystemRun>& systems, const std::vector<Cell>& cells) {
  for (const Cell& cell : cells) {
    for (int rep = 0; rep < ctx.config.reps; ++rep) {
      // The order rotates per repetition, so no system always runs right
      // after the same neighbour.
      for (size_t i = 0; i < systems.size(); ++i) {
        SystemRun& s = systems[(i + static_cast<size_t>(rep)) % systems.size()];
        // A failed repetition is reported and the run goes on: one system's
        // trouble must not lose every other figure.
        if (absl::Status st = s.run(ctx, cell, rep); !st.ok()) {
          std::fprintf(stderr, "mooncake_bench: %s, %s x%zu rep %d: %s\n", s.name.c_str(),
                       SizeName(cell.value_bytes).c_str(), cell.clients, rep + 1,
                       st.ToString().c_str());
          ++ctx.failed_runs;
        }
        ctx.progress.Done();
      }
    }
  }
}

}  // namespace
}  // namespace mooncake::bench

namespace mooncake::bench {
namespace {

// ---- Fill past capacity -------------------------------------------------------------------

template <typename D>
absl::StatusOr<FillResult> FillWith(const Factory<D>& make, UtilisationProbe probe, Context& ctx,
                                    std::string_view label = {}) {
  const Config& c = ctx.config;
  ASSIGN_OR_RETURN(auto drivers, ConnectAll(make, c.fill_clients, c.fill_value_bytes));
  const std::span<const std::unique_ptr<D>> ds(drivers);
  const size_t count =
      static_cast<size_t>(c.fill_factor * static_cast<double>(c.fill_capacity_bytes) /
                          static_cast<double>(c.fill_value_bytes));
  const KeySpace keys{absl::StrCat("fill/", AbslView(drivers[0]->system())),
                      std::max<size_t>(count, 1)};
  ctx.progress.Start(
      absl::StrCat("fill ", label.empty() ? AbslView(drivers[0]->system()) : AbslView(label)));
  FillResult f = RunFill(ds, ctx.pool, keys, c.fill_value_bytes, c.fill_capacity_bytes,
                         std::move(probe), absl::Milliseconds(20), ctx.progress.ops());
  ctx.progress.Done();
  return f;
}

absl::StatusOr<FillResult> FillMemcached(Context& ctx) {
  const Config& c = ctx.config;
  MemcachedConfig m;
  m.binary = absl::GetFlag(FLAGS_memcached_binary);
  m.memory_mb = c.fill_capacity_bytes / kMiB;
  // memcached wants -I <= -m / 2; a small fill instance gets a smaller -I.
  if (m.memory_mb < 32) m.item_max = absl::StrCat(std::max<uint64_t>(1, m.memory_mb / 2), "m");
  ASSIGN_OR_RETURN(Server s, StartMemcached(m, c.log_dir + "/memcached_fill.log"));
  UtilisationProbe probe = [address = s.address]() -> absl::StatusOr<Utilisation> {
    Utilisation u;
    ASSIGN_OR_RETURN(u.used_bytes, MemcachedStat(address, "bytes"));
    ASSIGN_OR_RETURN(u.capacity_bytes, MemcachedStat(address, "limit_maxbytes"));
    ASSIGN_OR_RETURN(u.evictions, MemcachedStat(address, "evictions"));
    return u;
  };
  return FillWith(MemcachedFactory(s, c.memcached_protocol == "binary"), std::move(probe), ctx);
}

absl::StatusOr<double> RedisNumber(RedisDriver& r, std::string_view section,
                                   std::string_view field) {
  ASSIGN_OR_RETURN(std::string v, r.InfoField(section, field));
  double d = 0;
  if (!absl::SimpleAtod(v, &d)) return absl::InternalError(absl::StrCat("INFO ", v));
  return d;
}

absl::StatusOr<FillResult> FillRedis(Context& ctx) {
  const Config& c = ctx.config;
  RedisConfig rc;
  rc.binary = absl::GetFlag(FLAGS_redis_binary);
  rc.maxmemory_bytes = c.fill_capacity_bytes;
  ASSIGN_OR_RETURN(Server s, StartRedis(rc, c.log_dir + "/redis_fill.log"));
  RedisOptions o;
  o.port = s.port;
  ASSIGN_OR_RETURN(std::shared_ptr<RedisDriver> info, RedisDriver::Connect(o));
  UtilisationProbe probe = [info]() -> absl::StatusOr<Utilisation> {
    Utilisation u;
    ASSIGN_OR_RETURN(u.used_bytes, RedisNumber(*info, "memory", "used_memory"));
    ASSIGN_OR_RETURN(u.capacity_bytes, RedisNumber(*info, "memory", "maxmemory"));
    ASSIGN_OR_RETURN(u.evictions, RedisNumber(*info, "stats", "evicted_keys"));
    return u;
  };
  Factory<RedisDriver> make = [o](size_t) { return RedisDriver::Connect(o); };
  return FillWith(make, std::move(probe), ctx);
}

// `ssd_bytes` > 0: the worker also has an SSD tier of that size (a file in
// the log directory); the result is named "store+ssd".
absl::StatusOr<FillResult> FillStore(Context& ctx, uint64_t ssd_bytes) {
  const Config& c = ctx.config;
  StoreConfig st;
  st.binary = c.store_binary;
  st.segment_bytes = c.fill_capacity_bytes;
  st.extra_args = absl::StrSplit(absl::GetFlag(FLAGS_store_args), ' ', absl::SkipEmpty());
  const std::string name = ssd_bytes > 0 ? "store_fill_ssd" : "store_fill";
  if (ssd_bytes > 0) {
    st.extra_args.push_back(absl::StrCat("--ssd_path=", c.log_dir, "/", name, ".tier"));
    st.extra_args.push_back(absl::StrCat("--ssd_bytes=", ssd_bytes));
  }
  ASSIGN_OR_RETURN(Server s, StartStore(st, absl::StrCat(c.log_dir, "/", name, ".log"),
                                        absl::StrCat(c.log_dir, "/", name, ".ready")));
  UtilisationProbe probe =
      [http = s.http_address,
       evictions = absl::GetFlag(FLAGS_store_evictions_metric)]() -> absl::StatusOr<Utilisation> {
    ASSIGN_OR_RETURN(std::string text, HttpGet(http, "/metrics"));
    Utilisation u;
    ASSIGN_OR_RETURN(u.used_bytes, PrometheusValue(text, "mooncake_master_used_bytes"));
    ASSIGN_OR_RETURN(u.capacity_bytes, PrometheusValue(text, "mooncake_master_capacity_bytes"));
    ASSIGN_OR_RETURN(u.evictions, PrometheusValue(text, evictions));
    return u;
  };
  const std::string_view label = ssd_bytes > 0 ? "store+ssd" : "";
  ASSIGN_OR_RETURN(FillResult f,
                   FillWith(StoreFactory(s, /*shm=*/false), std::move(probe), ctx, label));
  if (!label.empty()) f.system = std::string(label);
  return f;
}

void RunFills(Context& ctx, std::vector<FillResult>& out) {
  const Config& c = ctx.config;
  auto one = [&](std::string_view name, absl::StatusOr<FillResult> f) {
    if (f.ok()) {
      out.push_back(std::move(*f));
      return;
    }
    std::fprintf(stderr, "mooncake_bench: fill %s: %s\n", std::string(name).c_str(),
                 f.status().ToString().c_str());
    ++ctx.failed_runs;
  };
  if (Has(c, "memcached")) one("memcached", FillMemcached(ctx));
  if (Has(c, "redis")) one("redis", FillRedis(ctx));
  if (Has(c, "store-tcp") || Has(c, "store-shm")) {
    one("store", FillStore(ctx, 0));
    if (c.fill_ssd_bytes > 0) one("store+ssd", FillStore(ctx, c.fill_ssd_bytes));
  }
}

// ---- Output -------------------------------------------------------------------------------

std::string Machine() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  // The checksum kernel: the store's digests cost a few times more on a CPU without AVX2.
  return absl::StrCat(host, ", ", std::thread::hardware_concurrency(), " cores, ",
                      sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE) / (1 << 30), " GiB, ",
                      FastStableHash64Kernel(), " checksums");
}

void WriteConfigJson(JsonWriter& w, const Config& c) {
  w.Key("config");
  w.BeginObject();
  w.Key("sizes");
  w.BeginArray();
  for (size_t s : c.sizes) w.Uint(s);
  w.EndArray();
  w.Key("clients");
  w.BeginArray();
  for (size_t n : c.clients) w.Uint(n);
  w.EndArray();
  w.Key("batches");
  w.BeginArray();
  for (size_t b : c.batches) w.Uint(b);
  w.EndArray();
  w.Key("put_batches");
  w.BeginArray();
  for (size_t b : c.put_batches) w.Uint(b);
  w.EndArray();
  w.Field("reps", static_cast<int64_t>(c.reps));
  w.Field("get_seconds", absl::ToDoubleSeconds(c.get_duration));
  w.Field("working_set_bytes", c.working_set_bytes);
  w.Field("memcached_protocol", c.memcached_protocol);
  w.Field("verify", c.verify == VerifyMode::kFull ? "full" : "sampled");
  w.Field("fill_capacity_bytes", c.fill_capacity_bytes);
  w.Field("fill_factor", c.fill_factor);
  w.Field("fill_clients", static_cast<uint64_t>(c.fill_clients));
  w.Field("store_binary", c.store_binary);
  w.Field("store_verify_checksums", absl::GetFlag(FLAGS_store_verify_checksums));
  w.Field("value_data", absl::GetFlag(FLAGS_value_data));
  w.EndObject();
}

absl::Status WriteJson(const std::string& path, const Config& c, const std::vector<Row>& rows,
                       const std::vector<FillResult>& fills,
                       const std::vector<TargetCheck>& targets) {
  JsonWriter w;
  w.BeginObject();
  w.Field("machine", Machine());
  w.Field("date", absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  WriteConfigJson(w, c);
  w.Key("rows");
  w.BeginArray();
  for (const Row& r : rows) WriteRowJson(w, r);
  w.EndArray();
  w.Key("fill");
  w.BeginArray();
  for (const FillResult& f : fills) WriteFillJson(w, f);
  w.EndArray();
  w.Key("targets");
  w.BeginArray();
  for (const TargetCheck& t : targets) WriteTargetJson(w, t);
  w.EndArray();
  w.EndObject();
  std::ofstream out(path);
  out << w.Take() << "\n";
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write --json=", path));
  return absl::OkStatus();
}

// Rows grouped by cell (op, size, clients, batch), systems in a fixed order.
void SortRows(std::vector<Row>& rows) {
  auto rank = [](const std::string& s) {
    for (int i = 0; const char* n : {"memcached", "memcached-bin", "redis", "store-tcp"}) {
      if (s == n) return i;
      ++i;
    }
    return 4;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    return std::tuple(a.op, a.value_bytes, a.clients, a.batch, rank(a.system)) <
           std::tuple(b.op, b.value_bytes, b.clients, b.batch, rank(b.system));
  });
}

absl::Status Run(const Config& c) {
  const size_t max_value =
      std::max(*std::max_element(c.sizes.begin(), c.sizes.end()), c.fill_value_bytes);
  const ValuePool pool(max_value, absl::GetFlag(FLAGS_value_data) == "bf16" ? ValueData::kBf16Kv
                                                                            : ValueData::kRandom);
  Servers servers;
  RETURN_IF_ERROR(StartServers(c, max_value, servers));
  std::vector<SystemRun> systems = MakeSystems(c, servers);
  const std::vector<Cell> cells = MakeCells(c);
  const size_t fills =
      c.fill ? (Has(c, "memcached") + Has(c, "redis") +
                (Has(c, "store-tcp") || Has(c, "store-shm")) * (c.fill_ssd_bytes > 0 ? 2 : 1))
             : 0;
  Progress progress(cells.size() * static_cast<size_t>(c.reps) * systems.size() + fills,
                    absl::GetFlag(FLAGS_progress_s));
  Results results;
  Context ctx{c, pool, progress, results};
  std::printf(
      "mooncake_bench on %s; logs in %s; values %s\n", Machine().c_str(), c.log_dir.c_str(),
      pool.data() == ValueData::kBf16Kv ? "bf16 KV (dtype declared to the store)" : "random bytes");
  if (!absl::GetFlag(FLAGS_store_verify_checksums)) {
    std::printf(
        "NOTE: --store_verify_checksums=false: the store client does not verify what it reads "
        "(not the product's default; the targets are judged on the default)\n");
  }
  RunComparison(ctx, systems, cells);
  std::vector<FillResult> fill_results;
  if (c.fill) RunFills(ctx, fill_results);

  std::vector<Row>& rows = results.rows();
  for (Row& r : rows) Summarize(r);
  SortRows(rows);
  ComputeRatios(rows);
  std::printf(
      "\nmedians of %d repetition(s); latency per request; vs = store items/s over the "
      "baseline's, same cell: the median of the repetitions' ratios (each repetition runs "
      "every system back to back)\n",
      c.reps);
  PrintTable(stdout, rows);
  std::printf(
      "\nwhere the CPU went (cores in use over each phase, medians; server = the system's "
      "process, clients = this benchmark's; cpu us/item = server + clients)\n");
  PrintCpuTable(stdout, rows);
  if (!fill_results.empty()) {
    std::printf("\nfill past capacity: %s values, %.1fx capacity, %zu clients\n",
                SizeName(c.fill_value_bytes).c_str(), c.fill_factor, c.fill_clients);
    PrintFill(stdout, fill_results);
  }
  std::vector<TargetCheck> targets = CheckTargets(rows, fill_results);
  const std::vector<TargetCheck> small = CheckSmallObjectTargets(rows);
  const char* judged =
      absl::GetFlag(FLAGS_store_verify_checksums)
          ? ""
          : ": NOT JUDGED, the store client ran with --store_verify_checksums=false";
  std::printf("\ntargets (issue #9)%s\n", judged);
  PrintTargets(stdout, targets);
  std::printf("\ntargets (issue #41, small objects)%s\n", judged);
  PrintTargets(stdout, small);
  targets.insert(targets.end(), small.begin(), small.end());
  if (const std::string json = absl::GetFlag(FLAGS_json); !json.empty()) {
    RETURN_IF_ERROR(WriteJson(json, c, rows, fill_results, targets));
    std::printf("\nJSON: %s\n", json.c_str());
  }
  if (ctx.failed_runs > 0) {
    return absl::InternalError(absl::StrCat(ctx.failed_runs, " runs failed (see above)"));
  }
  for (const Row& r : rows) {
    if (r.verify_failures > 0) {
      return absl::DataLossError(absl::StrCat(r.system, " returned wrong bytes: ", r.first_error));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace mooncake::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<mooncake::bench::Config> config = mooncake::bench::LoadConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "mooncake_bench: %s\n", config.status().ToString().c_str());
    return 2;
  }
  if (config->log_dir.empty()) {
    char tmpl[] = "/tmp/mooncake_bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("mooncake_bench: mkdtemp");
      return 2;
    }
    config->log_dir = tmpl;
  } else if (std::error_code ec; !std::filesystem::is_directory(config->log_dir, ec) &&
                                 !std::filesystem::create_directories(config->log_dir, ec)) {
    std::fprintf(stderr, "mooncake_bench: --log_dir=%s: cannot create it: %s\n",
                 config->log_dir.c_str(), ec.message().c_str());
    return 2;
  }
  const absl::Status s = mooncake::bench::Run(*config);
  std::fflush(stdout);
  if (!s.ok()) {
    std::fprintf(stderr, "mooncake_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
