#!/usr/bin/env bash
# Installs the mooncake Python package for /usr/bin/python3 (into its
# site-packages under $PREFIX, default /usr/local) and the programs
# mooncake_master, mooncake_client and mooncake_http_metadata_server into
# $PREFIX/bin. Run with `bazel run -c opt //python:install` (as root for
# /usr/local).
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/mooncake"
prefix="${PREFIX:-/usr/local}"
ver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
site="$prefix/lib/python$ver/dist-packages"  # on /usr/bin/python3's path for /usr/local
install -d "$site/mooncake" "$prefix/bin"
for f in __init__.py connector.py; do
  install -m 0644 "$root/python/mooncake/$f" "$site/mooncake/$f"
done
for m in store.so engine.so _connector.so; do
  install -m 0755 "$root/python/mooncake/$m" "$site/mooncake/$m"
done
for p in mooncake_master mooncake_client mooncake_http_metadata_server; do
  install -m 0755 "$root/tools/$p" "$prefix/bin/$p"
done
echo "installed: $site/mooncake (mooncake.store, mooncake.engine, mooncake.connector for /usr/bin/python3)"
echo "installed: $prefix/bin/{mooncake_master,mooncake_client,mooncake_http_metadata_server}"
