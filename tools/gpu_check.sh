#!/usr/bin/env bash
# Builds and runs the CUDA transport's tests and bandwidth benchmark on a GPU
# machine (--config=cuda). Fails if no GPU is visible or a GPU test skipped.
#
#   tools/gpu_check.sh              # tests + benchmark
#   tools/gpu_check.sh --tests-only
#
# Needs: an NVIDIA driver and GPU, the CUDA toolkit at /usr/local/cuda (or
# $CUDA_PATH), and the workspace's Bazel setup (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! nvidia-smi -L; then
  echo "gpu_check: no GPU visible (nvidia-smi failed); nothing to check" >&2
  exit 1
fi

# Every CUDA target of the transport package must build.
bazel build --config=cuda //mooncake/transport/...

# MOONCAKE_REQUIRE_GPU=1 turns the tests' no-GPU skips into failures, so a
# broken driver cannot pass as "no device".
bazel test --config=cuda --test_output=all --cache_test_results=no \
  --test_env=MOONCAKE_REQUIRE_GPU=1 //mooncake/transport:cuda_transport_test

if [[ "${1:-}" == "--tests-only" ]]; then
  exit 0
fi

# Transport vs raw cudaMemcpyAsync of the same sizes, same run (counters
# GBps, raw_GBps, ratio).
bazel run -c opt --config=cuda //mooncake/transport:cuda_transport_benchmark -- \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
