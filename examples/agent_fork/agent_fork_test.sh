#!/bin/bash
# The agent-fork demo on small sizes (a 512-token context, 3 branches, 16
# decoded tokens each): agent_fork.py check starts a mooncake_master, forks the
# context with one clone_prefix per branch and checks the branches' tokens
# against an independent run, the pool's use after the fork (< 1.5 x context +
# branch pages), the refused forks, and 0 bytes leaked after removing everything.
set -u
root="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-mooncake}"
cd "$root"
export PYTHONPATH="$root/python"
/usr/bin/python3 -c 'import torch' 2>/dev/null || {
  echo "FAIL: python3-torch is not installed (bash tools/setup.sh installs it)"
  exit 1
}
/usr/bin/python3 examples/agent_fork/agent_fork.py check \
  --master-bin "$root/tools/mooncake_master" || { echo "FAIL: agent_fork check"; exit 1; }
echo "PASS"
