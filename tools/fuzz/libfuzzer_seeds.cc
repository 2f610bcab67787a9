// Seeds for libFuzzer runs of the mooncake fuzz targets (--config=libfuzzer).
//
// A *_fuzz.cc target may define `std::vector<std::string> mooncake::FuzzSeeds()`;
// the deterministic driver (//mooncake/base:fuzz_main_testing.cc) starts from
// them, libFuzzer's own main knows nothing of them. With the environment
// variable MOONCAKE_FUZZ_DUMP_SEEDS=DIR set, this LLVMFuzzerInitialize writes
// each seed to DIR/seed-NNNN and exits 0 before libFuzzer starts, so
// tools/fuzz.sh can merge them into the target's corpus. Without the variable
// it does nothing. Fuzz targets must therefore not define LLVMFuzzerInitialize.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace mooncake {
std::vector<std::string> FuzzSeeds() __attribute__((weak));
}  // namespace mooncake

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("MOONCAKE_FUZZ_DUMP_SEEDS");
  if (dir == nullptr || *dir == '\0') return 0;
  const std::vector<std::string> seeds =
      mooncake::FuzzSeeds ? mooncake::FuzzSeeds() : std::vector<std::string>{};
  for (size_t i = 0; i < seeds.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "/seed-%04zu", i);
    const std::string path = std::string(dir) + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
      std::exit(2);
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir);
  std::exit(0);
}
