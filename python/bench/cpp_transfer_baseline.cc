// The C++ baseline //python:transfer_engine_benchmark runs in the same run:
// batch WRITE bandwidth of a bare TcpTransport (the transport
// mooncake.engine uses, with the same lanes_per_peer) from this process into
// a segment owned by a fork()ed child, for the shapes the Python benchmark
// measures. Prints one line per shape:
//   shape=64x262144 gbps=<median> reps=<n>
// Flags: --seconds=<s per rep> --reps=<n> --lanes=<lanes_per_peer>.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mooncake/base/assert.h"
#include "mooncake/transport/tcp_transport.h"
#include "mooncake/transport/transport.h"

namespace {

using mooncake::transport::BatchId;
using mooncake::transport::MemoryLocation;
using mooncake::transport::OpCode;
using mooncake::transport::TcpTransport;
using mooncake::transport::TransferRequest;

constexpr uint64_t kSegmentBytes = uint64_t{64} << 20;

// The owner: registers one segment, reports "endpoint id" on `out`, serves
// until the parent closes `in`.
[[noreturn]] void Owner(int in, int out, size_t lanes) {
  TcpTransport::Options o;
  o.lanes_per_peer = lanes;
  TcpTransport t(o);
  std::vector<uint8_t> mem(kSegmentBytes, 0);
  auto seg = t.RegisterMemory(mem.data(), mem.size(), MemoryLocation::HostDram());
  MC_ASSERT(seg.ok(), "owner could not register its segment");
  const std::string line = t.LocalEndpoint() + " " + std::to_string(seg->id) + "\n";
  MC_ASSERT(::write(out, line.data(), line.size()) == static_cast<ssize_t>(line.size()),
            "owner could not report");
  char c;
  while (::read(in, &c, 1) > 0) {
  }
  _exit(0);
}

double Measure(TcpTransport& t, uint64_t handle, size_t n, uint64_t piece, absl::Duration run) {
  std::vector<uint8_t> src(n * piece);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  std::vector<TransferRequest> reqs(n);
  for (size_t i = 0; i < n; ++i) {
    reqs[i] = {.op = OpCode::kWrite,
               .local_addr = src.data() + i * piece,
               .segment = handle,
               .remote_offset = i * piece,
               .length = piece};
  }
  uint64_t bytes = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < run) {
    auto b = mooncake::transport::SubmitForWaitOrSubmit(t, reqs);
    MC_ASSERT(b.ok(), "submit failed");
    auto r = t.Wait(*b, absl::Now() + absl::Seconds(30));
    MC_ASSERT(r.ok() && r->ok(), "batch failed");
    bytes += n * piece;
  }
  return static_cast<double>(bytes) / absl::ToDoubleSeconds(absl::Now() - start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  int reps = 3;
  size_t lanes = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0)
      MC_ASSERT(absl::SimpleAtod(a.substr(10), &seconds), "--seconds");
    if (a.rfind("--reps=", 0) == 0) MC_ASSERT(absl::SimpleAtoi(a.substr(7), &reps), "--reps");
    if (a.rfind("--lanes=", 0) == 0) MC_ASSERT(absl::SimpleAtoi(a.substr(8), &lanes), "--lanes");
  }
  int down[2], up[2];
  MC_ASSERT(::pipe(down) == 0 && ::pipe(up) == 0, "pipe");
  const pid_t child = ::fork();
  MC_ASSERT(child >= 0, "fork");
  if (child == 0) {
    ::close(down[1]);
    ::close(up[0]);
    Owner(down[0], up[1], lanes);
  }
  ::close(down[0]);
  ::close(up[1]);
  std::string line;
  char c;
  while (::read(up[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  const size_t space = line.find(' ');
  uint64_t seg = 0;
  MC_ASSERT(space != std::string::npos && absl::SimpleAtoi(line.substr(space + 1), &seg),
            "bad owner report");
  TcpTransport::Options o;
  o.lanes_per_peer = lanes;
  int rc = 0;
  {
    TcpTransport t(o);
    auto opened = t.OpenSegment(line.substr(0, space), seg);
    MC_ASSERT(opened.ok(), "open failed");
    for (const auto& [n, piece] :
         std::vector<std::pair<size_t, uint64_t>>{{64, 256 << 10}, {16, 4 << 20}}) {
      std::vector<double> runs;
      (void)Measure(t, opened->handle, n, piece, absl::Milliseconds(200));  // warm-up
      for (int r = 0; r < reps; ++r) {
        runs.push_back(Measure(t, opened->handle, n, piece, absl::Seconds(seconds)));
      }
      std::sort(runs.begin(), runs.end());
      std::printf("shape=%zux%llu gbps=%.3f reps=%d\n", n, static_cast<unsigned long long>(piece),
                  runs[runs.size() / 2], reps);
      std::fflush(stdout);
    }
  }
  ::close(down[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return rc;
}
