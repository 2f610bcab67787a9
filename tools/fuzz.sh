#!/usr/bin/env bash
# Coverage-guided fuzzing of mooncake's *_fuzz targets with clang's libFuzzer.
#
# Usage: tools/fuzz.sh [--minutes=N | --runs=N [--max_seconds=S]] [--jobs=J] [--ci]
#                      [--artifacts=DIR] [TARGET...]
#
#   --minutes=N    campaign: each target fuzzes for N minutes (default 1)
#   --runs=N       a fixed number of executions per target instead
#   --max_seconds=S  with --runs: stop a target after S seconds even short of N
#                  (the SSD recovery target: a few hundred inputs per CPU-second)
#   --jobs=J       J fuzzing processes per target at once, each with the whole
#                  budget (--runs or --minutes); their executions are summed
#                  and what each found is merged (default 1)
#   --ci           leave the repository untouched: new inputs go to a temporary
#                  directory, not into fuzz/corpus (what tools/run_tests.sh runs)
#   --artifacts=D  where crash/timeout/OOM reproducers go
#                  (default ${TMPDIR:-/tmp}/mooncake-fuzz-artifacts)
#   TARGET         a label (//mooncake/compress:frame_fuzz), a corpus name
#                  (compress_frame_fuzz) or a target name if unique; default:
#                  every mooncake_fuzz_test in mooncake/**/BUILD
#
# Builds the targets with `bazel build --config=libfuzzer` (clang, ASan, UBSan,
# libFuzzer's main; .bazelrc), then runs them one at a time. Each target's
# corpus lives in fuzz/corpus/<corpus name>/; it is seeded from the target's
# FuzzSeeds() and the testdata listed below, and what a campaign finds is
# minimized into it with -merge=1. Prints per target: executions, exec/s,
# libFuzzer's final cov/ft, corpus size and crashes, and a last line
# "libfuzzer: N passed, N failed, N skipped". Exits 1 when a target crashed
# (its reproducer path is printed) or failed to build; 0 with every target
# skipped when clang or libFuzzer is missing. See docs/fuzzing.md.
set -uo pipefail
cd "$(dirname "$0")/.."

minutes=1
runs=""
max_seconds=""
jobs=1
ci=0
artifacts="${TMPDIR:-/tmp}/mooncake-fuzz-artifacts"
wanted=()
for arg in "$@"; do
  case "$arg" in
    --minutes=*) minutes="${arg#*=}"; runs="" ;;
    --runs=*) runs="${arg#*=}" ;;
    --max_seconds=*) max_seconds="${arg#*=}" ;;
    --ci) ci=1 ;;
    --artifacts=*) artifacts="${arg#*=}" ;;
    --jobs=*) jobs="${arg#*=}" ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $arg" >&2; exit 2 ;;
    *) wanted+=("$arg") ;;
  esac
done

if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: --jobs wants a positive integer, not '$jobs'" >&2
  exit 2
fi

# Every mooncake_fuzz_test, found in the BUILD files (no `bazel query`: it
# would wait for the shared Bazel server's lock just to list them).
all_labels=()
while IFS= read -r f; do
  pkg="${f%/BUILD}"
  while IFS= read -r name; do
    all_labels+=("//$pkg:$name")
  done < <(awk '/^mooncake_fuzz_test\(/ {f = 1}
                f && /name = "/ {match($0, /"[^"]+"/); print substr($0, RSTART + 1, RLENGTH - 2); f = 0}' "$f")
done < <(find mooncake -name BUILD | sort)

corpus_name() {  # //mooncake/store/rpc:frame_fuzz -> store_rpc_frame_fuzz
  local l="${1#//mooncake/}"
  l="${l/://}"
  echo "${l//\//_}"
}

labels=()
if [ ${#wanted[@]} -eq 0 ]; then
  labels=("${all_labels[@]}")
else
  for w in "${wanted[@]}"; do
    match=()
    for l in "${all_labels[@]}"; do
      if [ "$w" = "$l" ] || [ "$w" = "$(corpus_name "$l")" ] || [ "$w" = "${l##*:}" ]; then
        match+=("$l")
      fi
    done
    if [ ${#match[@]} -ne 1 ]; then
      echo "fuzz.sh: '$w' names ${#match[@]} fuzz targets; use a label or a corpus name:" >&2
      for l in "${all_labels[@]}"; do echo "  $l  ($(corpus_name "$l"))" >&2; done
      exit 2
    fi
    labels+=("${match[0]}")
  done
fi

# Inputs already in the repository that a target parses, merged into its
# corpus with the seeds.
extra_inputs() {
  case "$1" in
    index_mooncake_trace_fuzz) echo tools/testdata/small_trace.jsonl tools/testdata/malformed_trace.jsonl ;;
    transport_route_policy_fuzz) echo mooncake/transport/testdata/topology/server_8gpu_nvidia_smi_topo.txt ;;
  esac
}

# The bound the target's own BUILD stanza gives the deterministic driver
# (--max_len=...), so libFuzzer explores the same input sizes; none: libFuzzer's
# default (the larger of 4096 and the largest corpus input).
max_len_of() {
  local pkg="${1#//}" name="${1##*:}"
  pkg="${pkg%%:*}"
  awk -v n="\"$name\"" '/^mooncake_fuzz_test\(/ {f = 0}
      /name = / && index($0, n) {f = 1}
      f && /--max_len=/ {match($0, /--max_len=[0-9]+/); print substr($0, RSTART + 10, RLENGTH - 10); exit}
      f && /^\)/ {exit}' "$pkg/BUILD"
}

skip_all() {
  echo "libfuzzer: SKIPPED: $1"
  echo "libfuzzer: 0 passed, 0 failed, ${#labels[@]} skipped"
  exit 0
}

# clang with libFuzzer's runtime and lld (the config links with -fuse-ld=lld):
# Debian packages clang, lld and libclang-rt-14-dev / libfuzzer-14-dev.
for tool in clang ld.lld bazel; do
  command -v "$tool" > /dev/null || skip_all "$tool not found (install clang, lld, libfuzzer-14-dev)"
done
probe=$(mktemp -d)
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined -fuse-ld=lld "$probe/p.cc" -o "$probe/p" \
  > "$probe/log" 2>&1; then
  rm -rf "$probe"
  skip_all "clang cannot link a libFuzzer binary (install libfuzzer-14-dev / libclang-rt-14-dev)"
fi
rm -rf "$probe"

work=$(mktemp -d "${TMPDIR:-/tmp}/mooncake-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"

echo "libfuzzer: building ${#labels[@]} targets with --config=libfuzzer"
build_start=$(date +%s)
bazel build --config=libfuzzer --keep_going --build_event_json_file="$work/bep.json" \
  "${labels[@]}" > "$work/build.log" 2>&1
build_rc=$?
echo "libfuzzer: build took $(($(date +%s) - build_start)) s (bazel exit $build_rc)"
# Which labels built in this invocation (a failed one may have a stale binary).
built=$(python3 - "$work/bep.json" << 'EOF'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    tc = e.get("id", {}).get("targetCompleted")
    if tc and e.get("completed", {}).get("success"):
        print(tc["label"])
EOF
)
if [ "$build_rc" -ne 0 ]; then
  grep -E '^(ERROR|.*error:)' "$work/build.log" | head -20
fi

bin_dir=bazel-out/k8-fastbuild-libfuzzer/bin
passed=0
failed=0
rows=()
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for label in "${labels[@]}"; do
  name=$(corpus_name "$label")
  if ! grep -qxF "$label" <<< "$built"; then
    echo "libfuzzer: $label FAILED TO BUILD"
    rows+=("$(printf '%-30s %12s %8s %7s %7s %7s  %s' "$name" - - - - - "build failed")")
    failed=$((failed + 1))
    continue
  fi
  pkg="${label#//}"
  pkg="${pkg%%:*}"
  bin="$bin_dir/$pkg/${label##*:}"
  corpus="fuzz/corpus/$name"
  mkdir -p "$corpus"
  t="$work/$name"
  mkdir -p "$t/seeds" "$t/new"
  MOONCAKE_FUZZ_DUMP_SEEDS="$t/seeds" "$bin" > /dev/null 2>&1
  for f in $(extra_inputs "$name"); do cp "$f" "$t/seeds/"; done

  opts=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/$name-")
  ml=$(max_len_of "$label")
  [ -n "$ml" ] && opts+=(-max_len="$ml")
  if [ "$ci" -eq 0 ]; then
    # Seeds and testdata that add coverage join the repository corpus.
    "$bin" "${opts[@]}" -merge=1 "$corpus" "$t/seeds" > "$t/merge.log" 2>&1
  fi
  if [ -n "$runs" ]; then
    limit=(-runs="$runs")
    [ -n "$max_seconds" ] && limit+=(-max_total_time="$max_seconds")
  else
    limit=(-max_total_time=$((minutes * 60)))
  fi

  # Job j writes what it finds to new<j> and logs to log<j>; job 1 to new
  # and log.
  run_start=$(date +%s%N)
  pids=()
  for ((j = 1; j <= jobs; j++)); do
    sfx=""
    [ "$j" -gt 1 ] && sfx="$j"
    mkdir -p "$t/new$sfx"
    "$bin" "${opts[@]}" "${limit[@]}" "$t/new$sfx" "$corpus" "$t/seeds" > "$t/log$sfx" 2>&1 &
    pids+=($!)
  done
  rc=0
  crashed_log="$t/log"
  for ((j = 1; j <= jobs; j++)); do
    wait "${pids[$((j - 1))]}"
    r=$?
    if [ "$r" -ne 0 ] && [ "$rc" -eq 0 ]; then
      rc=$r
      [ "$j" -gt 1 ] && crashed_log="$t/log$j"
    fi
  done
  run_ms=$((($(date +%s%N) - run_start) / 1000000 + 1))
  execs=""
  cov=""
  ft=""
  new_dirs=()
  for ((j = 1; j <= jobs; j++)); do
    sfx=""
    [ "$j" -gt 1 ] && sfx="$j"
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$t/log$sfx" | tail -1)
    [ -n "$e" ] && execs=$((${execs:-0} + e))
    c=$(grep -oE 'cov: [0-9]+' "$t/log$sfx" | tail -1 | cut -d' ' -f2)
    [ -n "$c" ] && { [ -z "$cov" ] || [ "$c" -gt "$cov" ]; } && cov=$c
    f=$(grep -oE 'ft: [0-9]+' "$t/log$sfx" | tail -1 | cut -d' ' -f2)
    [ -n "$f" ] && { [ -z "$ft" ] || [ "$f" -gt "$ft" ]; } && ft=$f
    [ -n "$(ls -A "$t/new$sfx")" ] && new_dirs+=("$t/new$sfx")
  done
  # Over the whole run, corpus loading included (libFuzzer's own figure
  # rounds the seconds down and reads 0 for short runs); all jobs together.
  eps=""
  [ -n "$execs" ] && eps=$((execs * 1000 / run_ms))
  added=""
  if [ "$ci" -eq 0 ] && [ ${#new_dirs[@]} -gt 0 ]; then
    before=$(ls "$corpus" | wc -l)
    "$bin" "${opts[@]}" -merge=1 "$corpus" "${new_dirs[@]}" > "$t/merge2.log" 2>&1
    added=" (+$(($(ls "$corpus" | wc -l) - before)))"
  fi
  size=$(ls "$corpus" | wc -l)
  if [ "$rc" -eq 0 ]; then
    verdict="0"
    passed=$((passed + 1))
  else
    repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$crashed_log" | tail -1)
    verdict="CRASH ${repro:-(no reproducer written; exit $rc)}"
    failed=$((failed + 1))
    echo "libfuzzer: $label crashed (exit $rc); log tail:"
    grep -E '^(==[0-9]+==|SUMMARY|.*runtime error|#[0-9]+ )' "$crashed_log" | head -30
    cp "$crashed_log" "$artifacts/$name.log"
    echo "libfuzzer: full log: $artifacts/$name.log"
    echo "libfuzzer: reproduce: $bin ${repro:-<input>}"
  fi
  row=$(printf '%-30s %12s %8s %7s %7s %7s  %s' "$name" "${execs:--}" "${eps:--}" \
    "${cov:--}" "${ft:--}" "$size" "$verdict$added")
  echo "$row"
  rows+=("$row")
done

echo
printf '%-30s %12s %8s %7s %7s %7s  %s\n' target executions exec/s cov ft corpus crashes
for r in "${rows[@]}"; do echo "$r"; done
echo "libfuzzer: $passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
