# Shell functions for tests that run the store's programs as processes.
# Sourced (from the runfiles root) by sh_tests that list
# //tools/testing:process_helpers in their data. Sets $tmp, the test's scratch
# folder, and $pids, the processes fail() kills; a script with other needs
# defines its own fail() after sourcing (it must not return).

tmp=${TEST_TMPDIR:-$(mktemp -d)}
pids=()

# Prints the message and every $tmp/*.out, kills $pids, exits 1.
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.out; do [[ -f $f ]] && { echo "--- $f"; cat "$f"; }; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  exit 1
}

# $1 ready file, $2 pid: returns once the file exists, within 30 s.
wait_ready() {
  for _ in $(seq 300); do
    [[ -f $1 ]] && return 0
    kill -0 "$2" 2>/dev/null || fail "process $2 exited before it was ready"
    sleep 0.1
  done
  fail "no $1 within 30 s"
}

# $1 pid: sets $rc to its exit status once it exits, within 10 s.
await_exit() {
  for _ in $(seq 100); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$1" 2>/dev/null && fail "pid $1 still running 10 s after the signal"
  set +e
  wait "$1"
  rc=$?
  set -e
}

# A loopback port nothing listens on now (random, checked by connecting).
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  fail "no free port found"
}

# HTTP over bash's /dev/tcp (python3 or curl would do, but start slowly on a
# loaded CI machine): prints "<status>\n<body>". $1 host:port, $2 the raw
# request with printf %b escapes.
http() {
  local resp
  exec 3<>"/dev/tcp/${1%:*}/${1##*:}"
  printf '%b' "$2" >&3
  resp=$(cat <&3)
  exec 3<&-
  local status_line=${resp%%$'\r\n'*}
  status_line=${status_line#* }
  printf '%s\n%s' "${status_line%% *}" "${resp#*$'\r\n\r\n'}"
}
# $1 host:port, $2 the path.
get() { http "$1" "GET $2 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"; }
