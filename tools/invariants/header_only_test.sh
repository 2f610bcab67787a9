#!/usr/bin/env bash
# Library code under mooncake/ is header-only: the only .cc files allowed there
# are tests, benchmarks, fuzzers, test helpers (*_testing.cc) and generated
# protobuf code.
set -euo pipefail
root=$(dirname "$(readlink -f WORKSPACE)")
cd "$root"
stray=$(find mooncake -name '*.cc' | grep -vE '_(test|benchmark|fuzz|testing)\.cc$|\.pb\.cc$' || true)
if [[ -n "$stray" ]]; then
  echo "non-test .cc files under mooncake/ (library code must live in headers):"
  echo "$stray"
  exit 1
fi
echo "header-only: $(find mooncake -name '*.h' | wc -l) headers, no library .cc files"
