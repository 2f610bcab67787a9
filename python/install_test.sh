#!/usr/bin/env bash
# //python:install into a scratch prefix: the package imports with
# /usr/bin/python3 from there and the three programs run.
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
prefix="${TEST_TMPDIR}/prefix"
PREFIX="$prefix" RUNFILES_DIR="$TEST_SRCDIR" bash "$root/python/install.sh" || fail "install failed"
ver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
site="$prefix/lib/python$ver/dist-packages"
out=$(cd "$TEST_TMPDIR" && PYTHONPATH="$site" /usr/bin/python3 -c \
  'import mooncake.store as s; from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction; print(s.__file__)') ||
  fail "import failed: $out"
[[ "$out" == "$site/mooncake/store.so" ]] || fail "imported from $out, not $site"
out=$(cd "$TEST_TMPDIR" && PYTHONPATH="$site" /usr/bin/python3 -c \
  'import mooncake.engine as e, mooncake.connector as c; from mooncake.engine import TransferEngine; from mooncake.connector import PrefillConnector, DecodeConnector, layout_for; print(e.__file__, c.__file__)') ||
  fail "import of engine/connector failed: $out"
[[ "$out" == "$site/mooncake/engine.so $site/mooncake/connector.py" ]] || fail "imported from $out, not $site"
for p in mooncake_master mooncake_client mooncake_http_metadata_server; do
  [[ -x "$prefix/bin/$p" ]] || fail "$p not installed"
  # An unknown flag: the program runs and refuses it by name (not 126/127: not run).
  rc=0
  msg=$("$prefix/bin/$p" --no_such_flag_here 2>&1) || rc=$?
  [[ $rc -ne 0 && $rc -ne 126 && $rc -ne 127 ]] || fail "$p: exit $rc"
  [[ "$msg" == *no_such_flag_here* ]] || fail "$p did not name the bad flag: $msg"
done
echo PASS
