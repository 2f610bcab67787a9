#!/usr/bin/python3
"""Plots cluster_sim --json output: prompt-token hit rate against total cache
size, one colour per node count, per-node caches dashed, global pool solid
(the shape of the Mooncake paper's local-vs-global cache figure).

    /usr/bin/python3 tools/cluster_sim/plot.py RESULTS.json OUT.png [BLIND.json]

BLIND.json, optional, is a --routing=least_loaded run of the same grid: its
per-node lines are added dotted (cache-blind routing, for comparison).

Uses Debian's python3-matplotlib (run with /usr/bin/python3).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows_by_nodes(data):
    out = {}
    for row in data["rows"]:
        out.setdefault(row["nodes"], []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: r["size_tokens"])
    return out


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write("usage: plot.py RESULTS.json OUT.png [BLIND.json]\n")
        return 2
    with open(argv[1]) as f:
        data = json.load(f)
    by_nodes = rows_by_nodes(data)
    blind = {}
    if len(argv) == 4:
        with open(argv[3]) as f:
            blind = rows_by_nodes(json.load(f))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (nodes, rows) in enumerate(sorted(by_nodes.items())):
        sizes = [r["size_tokens"] for r in rows]
        color = colors[i % len(colors)]
        ax.plot(sizes, [r["global"]["hit_rate"] for r in rows], "-", marker="o",
                color=color, label=f"P={nodes} global pool")
        ax.plot(sizes, [r["local"]["hit_rate"] for r in rows], "--", marker="x",
                color=color, label=f"P={nodes} per-node caches")
        if nodes in blind:
            b = blind[nodes]
            ax.plot([r["size_tokens"] for r in b], [r["local"]["hit_rate"] for r in b],
                    ":", color=color, alpha=0.8,
                    label=f"P={nodes} per-node, cache-blind routing")
    ax.set_xscale("log")
    ax.set_xlabel("total cache size (tokens, all nodes)")
    ax.set_ylabel("hit rate (prompt tokens served from cache)")
    ax.set_title(f"{data['requests']} requests, {data['policy']} eviction, "
                 f"{data.get('routing', 'conductor')} routing\n"
                 "(global-pool lines coincide: its hits do not depend on P)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, ncol=2 if blind else 1)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
