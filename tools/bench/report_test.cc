#include "tools/bench/report.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/targets.h"

namespace mooncake::bench {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

PhaseResult Phase(double items_per_s, double p99_us) {
  PhaseResult p;
  p.seconds = 1;
  p.items = static_cast<uint64_t>(items_per_s);
  p.bytes = p.items * kMiB;
  p.p50_us = p99_us / 2;
  p.p99_us = p99_us;
  p.p999_us = p99_us * 2;
  return p;
}

Row MakeRow(std::string system, Op op, size_t size, std::vector<PhaseResult> reps) {
  Row r;
  r.system = std::move(system);
  r.op = op;
  r.value_bytes = size;
  r.clients = 8;
  r.reps = std::move(reps);
  Summarize(r);
  return r;
}

TEST(ReportTest, SummarizeTakesMediansAndSumsErrors) {
  PhaseResult bad = Phase(100, 50);
  bad.errors = 2;
  bad.first_error = "boom";
  Row r = MakeRow("redis", Op::kGet, kMiB, {Phase(300, 10), bad, Phase(200, 30)});
  EXPECT_DOUBLE_EQ(r.items_per_s, 200);
  EXPECT_DOUBLE_EQ(r.p99_us, 30);
  EXPECT_DOUBLE_EQ(r.gb_per_s, 200.0 * kMiB / 1e9);
  EXPECT_EQ(r.errors, 2u);
  EXPECT_EQ(r.first_error, "boom");
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2);  // lower middle for an even count
}

TEST(ReportTest, RatiosUseTheFasterMemcachedAndSameCellOnly) {
  std::vector<Row> rows = {
      MakeRow("memcached", Op::kGet, kMiB, {Phase(1000, 100)}),
      MakeRow("memcached-bin", Op::kGet, kMiB, {Phase(2000, 100)}),
      MakeRow("redis", Op::kGet, kMiB, {Phase(500, 100)}),
      MakeRow("store-tcp", Op::kGet, kMiB, {Phase(3000, 100)}),
      MakeRow("store-tcp", Op::kPut, kMiB, {Phase(10, 100)}),  // no baseline in its cell
  };
  ComputeRatios(rows);
  ASSERT_TRUE(rows[3].vs_memcached.has_value());
  EXPECT_DOUBLE_EQ(*rows[3].vs_memcached, 1.5);
  EXPECT_DOUBLE_EQ(*rows[3].vs_redis, 6.0);
  EXPECT_FALSE(rows[4].vs_memcached.has_value());
  EXPECT_FALSE(rows[0].vs_memcached.has_value());  // baselines get no ratio
}

TEST(ReportTest, RatiosPairRepetitionsWhenTheyCan) {
  // The machine slows down between repetitions: the ratio of the medians
  // (200 / 150 = 1.33) mixes a fast store repetition with slow baseline ones;
  // the paired ratios are 1.0, 1.0, 2.0, median 1.0.
  std::vector<Row> rows = {
      MakeRow("memcached", Op::kGet, kMiB, {Phase(300, 1), Phase(150, 1), Phase(100, 1)}),
      MakeRow("store-tcp", Op::kGet, kMiB, {Phase(300, 1), Phase(150, 1), Phase(200, 1)}),
  };
  ComputeRatios(rows);
  ASSERT_TRUE(rows[1].vs_memcached.has_value());
  EXPECT_DOUBLE_EQ(*rows[1].vs_memcached, 1.0);
  // Different repetition counts: the ratio of the medians.
  const Row two = MakeRow("redis", Op::kGet, kMiB, {Phase(100, 1), Phase(100, 1)});
  EXPECT_DOUBLE_EQ(*ThroughputRatio(rows[1], two), 2.0);
  // A baseline repetition that moved nothing: no pairing; a baseline that
  // moved nothing at all: no ratio.
  const Row stalled = MakeRow("redis", Op::kGet, kMiB, {Phase(0, 1), Phase(100, 1), Phase(50, 1)});
  EXPECT_DOUBLE_EQ(*ThroughputRatio(rows[1], stalled), 200.0 / 50);
  const Row dead = MakeRow("redis", Op::kGet, kMiB, {Phase(0, 1)});
  EXPECT_FALSE(ThroughputRatio(rows[1], dead).has_value());
}

TEST(ReportTest, TableAndJsonHaveEveryRow) {
  std::vector<Row> rows = {MakeRow("memcached", Op::kGet, kMiB, {Phase(1000, 100)}),
                           MakeRow("store-shm", Op::kGet, kMiB, {Phase(4000, 50)})};
  ComputeRatios(rows);
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  PrintTable(f, rows);
  std::fclose(f);
  const std::string table(buf, len);
  std::free(buf);
  EXPECT_NE(table.find("store-shm"), std::string::npos) << table;
  EXPECT_NE(table.find("4.00x"), std::string::npos) << table;
  JsonWriter w;
  w.BeginArray();
  for (const Row& r : rows) WriteRowJson(w, r);
  w.EndArray();
  const std::string json = w.Take();
  EXPECT_NE(json.find(R"("system":"store-shm")"), std::string::npos);
  EXPECT_NE(json.find(R"("vs_memcached":4)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("vs_memcached":null)"), std::string::npos) << json;
}

TEST(ReportTest, CpuColumnsAreMediansOfTheRepsThatReadThem) {
  auto with_cpu = [](double items_per_s, double server, double clients) {
    PhaseResult p = Phase(items_per_s, 10);
    p.cpu.server_cores = server;
    p.cpu.client_cores = clients;
    p.cpu.idle_cores = 0.25;
    p.cpu.steal_cores = 0;
    p.cpu.seconds = p.seconds;
    p.cpu.cpus = 2;
    return p;
  };
  // The middle rep did not read /proc: the medians come from the other two
  // (lower middle of an even count).
  Row r = MakeRow("store-tcp", Op::kGet, kMiB,
                  {with_cpu(1000, 1.5, 0.5), Phase(900, 10), with_cpu(2000, 1.0, 0.5)});
  ASSERT_TRUE(r.server_cores.has_value());
  EXPECT_DOUBLE_EQ(*r.server_cores, 1.0);
  EXPECT_DOUBLE_EQ(*r.client_cores, 0.5);
  // (1.5 + 0.5) cores * 1 s / 1000 items = 2000 us; (1.0 + 0.5) / 2000 = 750 us.
  EXPECT_DOUBLE_EQ(*r.cpu_us_per_item, 750);
  Row none = MakeRow("redis", Op::kGet, kMiB, {Phase(500, 10)});
  EXPECT_FALSE(none.server_cores.has_value());
  EXPECT_FALSE(none.cpu_us_per_item.has_value());

  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  PrintCpuTable(f, {none, r});
  std::fclose(f);
  const std::string table(buf, len);
  std::free(buf);
  EXPECT_NE(table.find("cpu us/item"), std::string::npos) << table;
  EXPECT_NE(table.find("750.0"), std::string::npos) << table;
  EXPECT_NE(table.find("1.00     0.50     0.25     0.00"), std::string::npos) << table;
  EXPECT_NE(table.find("redis                 -        -        -        -            -"),
            std::string::npos)
      << table;

  JsonWriter w;
  w.BeginArray();
  WriteRowJson(w, none);
  WriteRowJson(w, r);
  w.EndArray();
  const std::string json = w.Take();
  EXPECT_NE(json.find(R"("server_cores":null)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("server_cores":1,)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("cpu_us_per_item":750)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("cpu_us_per_item":2000)"), std::string::npos) << json;  // per rep
}

TEST(TargetsTest, MetMissedAndNotMeasured) {
  std::vector<Row> rows = {
      MakeRow("memcached", Op::kGet, kMiB, {Phase(1000, 100)}),
      MakeRow("redis", Op::kGet, kMiB, {Phase(600, 100)}),
      MakeRow("store-tcp", Op::kGet, kMiB, {Phase(1300, 120)}),  // 1.3x mc, 2.17x redis, P99 worse
  };
  FillResult fill;
  fill.system = "store-tcp";
  fill.samples = 10;
  fill.util_min = 0.96;
  fill.util_median = 0.97;
  std::vector<TargetCheck> t = CheckTargets(rows, {fill});
  ASSERT_EQ(t.size(), 9u);
  EXPECT_TRUE(t[0].met()) << t[0].name;   // 1 MiB vs memcached >= 1.25
  EXPECT_TRUE(t[1].met()) << t[1].name;   // 1 MiB vs redis >= 2
  EXPECT_FALSE(t[2].met()) << t[2].name;  // P99 120 > 100
  EXPECT_TRUE(t[2].measured_ok());
  EXPECT_FALSE(t[3].measured_ok());  // 4 MiB not in this run
  EXPECT_FALSE(t[6].measured_ok());  // no store-shm row
  EXPECT_TRUE(t[8].met()) << t[8].detail;
  fill.puts.errors = 1;  // one failed put fails the fill target
  EXPECT_FALSE(CheckTargets(rows, {fill})[8].met());
}

TEST(TargetsTest, SmallObjectTargetsCompareBatchesSinglesAndCpu) {
  constexpr size_t k64 = size_t{64} << 10;
  auto row = [](std::string system, Op op, size_t size, size_t batch, double items, double cpu) {
    Row r = MakeRow(std::move(system), op, size, {Phase(items, 100)});
    r.batch = batch;
    r.cpu_us_per_item = cpu;
    return r;
  };
  std::vector<Row> rows = {
      row("memcached", Op::kGet, k64, 16, 1000, 30), row("store-tcp", Op::kGet, k64, 16, 1600, 25),
      row("memcached", Op::kGet, k64, 1, 800, 60),   row("store-tcp", Op::kGet, k64, 1, 600, 90),
      row("memcached", Op::kPut, k64, 1, 500, 0),    row("store-tcp", Op::kPut, k64, 1, 300, 0),
  };
  std::vector<TargetCheck> t = CheckSmallObjectTargets(rows);
  ASSERT_EQ(t.size(), 9u);
  EXPECT_EQ(t[0].name, "get 64 KiB x8 b16 store-tcp vs memcached");
  EXPECT_TRUE(t[0].met()) << *t[0].achieved;  // 1.6x >= 1.5
  EXPECT_FALSE(t[1].met());                   // single 0.75x
  EXPECT_FALSE(t[2].met());                   // put 0.6x
  EXPECT_FALSE(t[3].met());                   // CPU 90 vs 60
  EXPECT_NEAR(*t[3].achieved, 1.5, 1e-9);
  EXPECT_EQ(t[4].name, "get 64 KiB x8 store-tcp b16 vs b1");
  EXPECT_TRUE(t[4].met());  // 1600 vs 600 items/s of the same size
  EXPECT_NEAR(*t[4].achieved, 1600.0 / 600.0, 1e-9);
  EXPECT_FALSE(t[5].measured_ok());  // 1 MiB not in this run
  EXPECT_FALSE(t[8].measured_ok());
}

}  // namespace
}  // namespace mooncake::bench
