#!/usr/bin/env bash
# Captures the sysfs files DiscoverTopology (mooncake/transport/topology.h)
# reads into a topology fixture manifest (format: mooncake/transport/
# topology_testing.h): `file PATH CONTENT` for each small attribute and
# `link PATH TARGET` for each symlink, with TARGET resolved and made relative
# to the sysfs root. Only the relevant attributes are copied (NUMA cpulists,
# interfaces, RDMA ports, NVIDIA GPUs), a few dozen lines on a typical host.
#
#   tools/capture_topology.sh > mooncake/transport/testdata/topology/this_host.sysfs
#   tools/capture_topology.sh /path/to/sysfs-root   # another root (default /sys)
set -uo pipefail
root=$(readlink -f "${1:-/sys}")

rel() { local p; p=$(readlink -f "$1") || return 1; echo "${p#"$root"/}"; }

file() {  # file ROOT-RELATIVE-PATH: one line of content, if readable
  local v
  [[ -f "$root/$1" ]] || return 0
  v=$(head -c 256 "$root/$1" 2>/dev/null | head -1) || return 0
  [[ -n "$v" || -r "$root/$1" ]] && printf 'file %s %s\n' "$1" "$v"
}

link() {  # link ROOT-RELATIVE-PATH: the symlink's resolved target
  [[ -L "$root/$1" ]] && printf 'link %s %s\n' "$1" "$(rel "$root/$1")"
}

device() {  # the device behind a resolved class entry, and its PCI ancestor
  local entry=$1 dev pci
  [[ -L "$root/$entry/device" ]] || return 0
  link "$entry/device"
  dev=$(rel "$root/$entry/device")
  file "$dev/numa_node"
  file "$dev/vendor"
  file "$dev/class"
  pci=$(dirname "$dev")
  [[ -f "$root/$pci/numa_node" && ! -f "$root/$dev/numa_node" ]] && file "$pci/numa_node"
}

echo "# sysfs topology of $(hostname), captured by tools/capture_topology.sh"
for n in "$root"/devices/system/node/node[0-9]*; do
  [[ -d "$n" ]] && file "devices/system/node/$(basename "$n")/cpulist"
done
for c in "$root"/class/net/*; do
  [[ -e "$c" ]] || continue
  name=$(basename "$c")
  entry=$(rel "$c")
  link "class/net/$name"
  # speed reads EINVAL on virtual and virtio links: an empty file reads as unknown too.
  if v=$(cat "$c/speed" 2>/dev/null); then
    printf 'file %s %s\n' "$entry/speed" "$v"
  else
    printf 'file %s -1\n' "$entry/speed"
  fi
  device "$entry"
done
for c in "$root"/class/infiniband/*; do
  [[ -e "$c" ]] || continue
  name=$(basename "$c")
  entry=$(rel "$c")
  link "class/infiniband/$name"
  device "$entry"
  for p in "$c"/ports/*; do
    pe="$entry/ports/$(basename "$p")"
    file "$pe/state"
    file "$pe/rate"
    file "$pe/link_layer"
    file "$pe/gid_attrs/ndevs/0"
  done
done
for d in "$root"/bus/pci/devices/*; do
  [[ -e "$d" ]] || continue
  [[ "$(cat "$d/vendor" 2>/dev/null)" == 0x10de ]] || continue
  case "$(cat "$d/class" 2>/dev/null)" in 0x0300* | 0x0302*) ;; *) continue ;; esac
  dev=$(rel "$d")
  link "bus/pci/devices/$(basename "$d")"
  file "$dev/vendor"
  file "$dev/class"
  file "$dev/numa_node"
done
