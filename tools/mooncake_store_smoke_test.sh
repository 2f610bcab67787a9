#!/usr/bin/env bash
# README's command 1 runs this binary; it must start, check itself and say so.
set -euo pipefail
out=$(tools/mooncake_store)
echo "$out"
grep -q '^ok   stable hash' <<<"$out"
! grep -q '^FAIL' <<<"$out"
