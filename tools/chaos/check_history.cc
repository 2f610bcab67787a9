// The chaos campaign's checker, standalone: judges a history file that
// tools/chaos/chaos wrote (--history) by the rules in history.h and prints
// the campaign's summary. Exit 0 when nothing was lost, wrong, hung or over
// its memory bound; 1 otherwise; 2 when the file cannot be read.
//
//   bazel-bin/tools/chaos/check_history /tmp/h.jsonl
#include <cstdio>
#include <string>

#include "tools/chaos/history.h"
#include "tools/chaos/report.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s HISTORY.jsonl\n", argv[0]);
    return 2;
  }
  auto records = mooncake::chaos::ReadHistory(argv[1]);
  if (!records.ok()) {
    std::fprintf(stderr, "check_history: %s\n", records.status().ToString().c_str());
    return 2;
  }
  const mooncake::chaos::CheckReport r = mooncake::chaos::CheckHistory(*records);
  std::printf("%s%s\n", mooncake::chaos::FormatReport(r).c_str(), r.Passed() ? "PASS" : "FAIL");
  return r.Passed() ? 0 : 1;
}
