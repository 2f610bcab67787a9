// A deterministic, bounded fuzz driver for LLVMFuzzerTestOneInput targets.
//
// Every *_fuzz.cc target in mooncake defines the libFuzzer entry point
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// and may define seeds with
//   std::vector<std::string> mooncake::FuzzSeeds();
// This main runs each seed as is, then mutates seeds (bit flips, byte
// overwrites with boundary values, truncation, insertion, chunk duplication,
// splicing) for a bounded number of iterations and seconds, so the fuzzers run
// in every `bazel test` (and under --config=asan / ubsan) without libFuzzer.
// Files named on the command line are run first (crash reproducers).
//
// Flags: --iterations=N (default 20000), --seed=S (default 1),
//        --max_seconds=T (default 20), --max_len=L (default 1 MiB).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace mooncake {
std::vector<std::string> FuzzSeeds() __attribute__((weak));
}  // namespace mooncake

namespace {

void RunOne(const std::string& input) {
  // A copy in its own allocation, so ASan catches reads past the end.
  std::vector<uint8_t> buf(input.begin(), input.end());
  LLVMFuzzerTestOneInput(buf.empty() ? nullptr : buf.data(), buf.size());
}

std::string Mutate(std::string s, const std::vector<std::string>& pool, std::mt19937_64& rng,
                   size_t max_len) {
  static constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x10, 0x40};
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // overwrite a byte with a boundary value
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(kInteresting[rng() % 8]);
        break;
      case 2:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 3: {  // insert random bytes
        const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
        std::string ins(1 + rng() % 16, '\0');
        for (auto& c : ins) c = static_cast<char>(rng());
        s.insert(at, ins);
        break;
      }
      case 4: {  // duplicate a chunk
        if (s.empty()) break;
        const size_t from = rng() % s.size();
        const size_t len = 1 + rng() % (s.size() - from);
        s.insert(rng() % (s.size() + 1), s.substr(from, len));
        break;
      }
      case 5: {  // splice with another seed
        if (pool.empty()) break;
        const std::string& other = pool[rng() % pool.size()];
        s = s.substr(0, s.empty() ? 0 : rng() % s.size()) +
            other.substr(other.empty() ? 0 : rng() % other.size());
        break;
      }
      default: {  // overwrite a little-endian u32/u64 field with a boundary value
        if (s.size() < 8) break;
        const size_t at = rng() % (s.size() - 7);
        const uint64_t values[] = {0,
                                   1,
                                   0xFFFFFFFFu,
                                   0x7FFFFFFFu,
                                   ~uint64_t{0},
                                   s.size(),
                                   s.size() + 1,
                                   uint64_t{1} << 40};
        const uint64_t v = values[rng() % 8];
        std::memcpy(&s[at], &v, (rng() & 1) ? 4 : 8);
        break;
      }
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = 20000;
  uint64_t seed = 1;
  double max_seconds = 20;
  size_t max_len = 1 << 20;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--iterations=", 0) == 0) {
      iterations = std::strtoull(arg.c_str() + 13, nullptr, 10);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 7, nullptr, 10);
    } else if (arg.rfind("--max_seconds=", 0) == 0) {
      max_seconds = std::strtod(arg.c_str() + 14, nullptr);
    } else if (arg.rfind("--max_len=", 0) == 0) {
      max_len = std::strtoull(arg.c_str() + 10, nullptr, 10);
    } else if (arg.rfind("--", 0) == 0) {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    RunOne(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  std::vector<std::string> pool =
      mooncake::FuzzSeeds ? mooncake::FuzzSeeds() : std::vector<std::string>{};
  pool.push_back("");
  for (const auto& s : pool) RunOne(s);

  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  uint64_t done = 0;
  for (; done < iterations; ++done) {
    if ((done & 255) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            max_seconds) {
      break;
    }
    const std::string& base = pool[rng() % pool.size()];
    std::string input = Mutate(base, pool, rng, max_len);
    RunOne(input);
    // Keep some mutants as new bases so mutations compound.
    if (rng() % 16 == 0 && pool.size() < 4096) pool.push_back(std::move(input));
  }
  std::printf("fuzz: %llu seeds, %llu mutated inputs, no crash\n",
              static_cast<unsigned long long>(pool.size()), static_cast<unsigned long long>(done));
  return 0;
}
