#!/bin/bash
# The EPD demo's checks on the tiny presets (a 56x56 image, 17 text tokens):
# the media-key and encoder unit tests, then epd_demo.py check, which starts a
# mooncake_master and the encoder, prefill and decode processes on loopback and
# compares every case bit for bit with one process doing everything.
set -u
root="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-mooncake}"
cd "$root"
export PYTHONPATH="$root/python"
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "FAIL: python3-torch is not installed (bash tools/setup.sh installs it)"
  exit 1
}
/usr/bin/python3 -m pytest -q -p no:cacheprovider examples/epd/media_key_test.py \
  examples/epd/vision_test.py || { echo "FAIL: unit tests"; exit 1; }
/usr/bin/python3 examples/epd/epd_demo.py check \
  --master-bin "$root/tools/mooncake_master" || { echo "FAIL: epd_demo check"; exit 1; }
echo "PASS"
