#!/usr/bin/python3
"""Turns the benchmark figures in docs/data/*.json into the PNGs under docs/img/.

Run from anywhere with Debian's interpreter (python3-matplotlib, installed by
tools/setup.sh):

    /usr/bin/python3 tools/plots/make_plots.py

Every plotted number comes from a JSON file under docs/data/, and every entry
there names the command, machine and date (and commit, where recorded) of the
run that produced it; docs/EVALUATION.md quotes the same figures. The output
is deterministic: fixed sizes, fonts and DPI, no timestamps in the PNGs.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after use("Agg"))

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "docs", "data")
IMG = os.path.join(ROOT, "docs", "img")
MIB = 1048576

plt.rcParams.update({
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.dpi": 110,
    "svg.hashsalt": "mooncake",
})
# No creation date or software version in the PNG metadata: same input, same bytes.
PNG_METADATA = {"Software": None}

COLORS = {
    "memcached": "tab:blue",
    "redis": "tab:red",
    "store-tcp": "tab:green",
    "store-shm": "tab:purple",
}


def load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def save(fig, name):
    path = os.path.join(IMG, name)
    fig.savefig(path, metadata=PNG_METADATA)
    plt.close(fig)
    print(os.path.relpath(path, ROOT))


def plot_hit_rates():
    d = load("trace_replay_hit_rates.json")
    labels = d["capacity_labels"]
    x = list(range(len(labels)))
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    styles = {
        "LRU": ("tab:blue", "o", "-"),
        "S3-FIFO": ("tab:orange", "s", "-"),
        "ReuseDepth": ("tab:gray", "^", "-"),
        "ConversationPolicy": ("tab:green", "D", "-"),
        "Belady (offline)": ("black", "x", "--"),
    }
    for policy, rates in d["hit_rate"].items():
        color, marker, line = styles[policy]
        ax.plot(x, rates, color=color, marker=marker, linestyle=line, label=policy)
    t = d["target"]
    i = labels.index(t["capacity_label"])
    lru = d["hit_rate"]["LRU"][i]
    ax.plot([i - 0.15, i + 0.15], [lru * t["ratio"]] * 2, color="tab:red", linewidth=2,
            label="target at 3M: %.2fx LRU" % t["ratio"])
    ax.set_xticks(x)
    ax.set_xticklabels(["%s\n(%d blocks)" % (lab, b) for lab, b in zip(labels, d["capacity_blocks"])])
    ax.set_xlabel("cache capacity (tokens; 512-token blocks)")
    ax.set_ylabel("prefix hit rate (hit blocks / requested blocks)")
    ax.set_ylim(0, 0.4)
    ax.set_title("Eviction policies on the Mooncake conversation trace (12,031 requests)")
    ax.legend(loc="upper left", fontsize=8)
    fig.text(0.01, 0.01, "source: docs/data/trace_replay_hit_rates.json (%s, %s)"
             % ("//tools:trace_replay --ablations", d["date"]), fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, "hit_rate_by_capacity.png")


def plot_store():
    d = load("store_vs_baselines.json")
    runs = {r["id"]: r for r in d["runs"]}
    tg = d["targets"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))

    # (a) absolute GET 1 MiB throughput per run on two VMs.
    ax = axes[0]
    systems = ["memcached", "redis", "store-tcp"]
    groups = [("zen4_13_runs", "Zen 4 microVM\n13 runs, 2026-12-04"),
              ("epyc_prev_3_runs", "previous EPYC VM\n3 runs, 2026-12-04")]
    width = 0.25
    for gi, (rid, _) in enumerate(groups):
        per_system = runs[rid]["get_1m_items_per_s"]
        for si, system in enumerate(systems):
            gbps = [v * MIB / 1e9 for v in per_system[system]]
            xs = [gi + (si - 1) * width] * len(gbps)
            ax.scatter(xs, gbps, color=COLORS[system], s=14, alpha=0.7,
                       label=system if gi == 0 else None)
            med = sorted(gbps)[len(gbps) // 2]
            ax.plot([xs[0] - width * 0.4, xs[0] + width * 0.4], [med, med],
                    color=COLORS[system], linewidth=2)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[1] for g in groups])
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, 8)
    ax.set_ylabel("GET throughput, GB/s (items/s x 1 MiB / 1e9)")
    ax.set_title("(a) GET 1 MiB, 8 clients, TCP: each run (bar = median)")
    ax.legend(loc="lower right", fontsize=8)

    # (b) store / baseline GET ratio by value size.
    ax = axes[1]
    m = runs["matrix_by_size"]
    sizes = m["sizes"]
    x = list(range(len(sizes)))
    c8 = m["clients_8_batch_1"]
    ax.plot(x, c8["get_tcp_vs_memcached"], "o-", color=COLORS["memcached"],
            label="store-tcp / memcached (matrix run)")
    ax.plot(x, c8["get_tcp_vs_redis"], "s-", color=COLORS["redis"],
            label="store-tcp / Redis (matrix run)")
    z = runs["zen4_13_runs"]["median_ratio"]
    for key, color, marker, name in [("get_vs_memcached", COLORS["memcached"], "*", "memcached"),
                                     ("get_vs_redis", COLORS["redis"], "*", "Redis")]:
        xs = [sizes.index(s) for s in z[key]]
        ax.scatter(xs, list(z[key].values()), color=color, marker=marker, s=120,
                   edgecolor="black", zorder=5,
                   label="store-tcp / %s, Zen 4 microVM median" % name)
    ax.axhline(tg["get_vs_memcached"], color=COLORS["memcached"], linestyle=":",
               label="target vs memcached (1.25x)")
    ax.axhline(tg["get_vs_redis"], color=COLORS["redis"], linestyle=":",
               label="target vs Redis (2x)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels(sizes)
    ax.set_xlabel("value size")
    ax.set_ylabel("store / baseline GET items/s (x)")
    ax.set_title("(b) GET throughput ratio by value size, 8 clients")
    ax.legend(loc="upper left", fontsize=7)

    # (c) GET P99 by value size, store-tcp and memcached, same run.
    ax = axes[2]
    p99 = c8["get_tcp_p99_ms"]
    for system, marker in [("store-tcp", "o"), ("memcached", "s")]:
        ax.plot(x, [v if v is not None else float("nan") for v in p99[system]],
                marker=marker, color=COLORS[system], label=system)
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(sizes)
    ax.set_xlabel("value size")
    ax.set_ylabel("GET P99 latency, ms (log scale)")
    ax.set_title("(c) GET P99 by value size, 8 clients, TCP")
    ax.legend(loc="upper left", fontsize=8)
    ax.text(0.98, 0.03, "memcached (-I 16m) refuses 16 MiB values;\nRedis P99 not recorded in this run",
            transform=ax.transAxes, ha="right", fontsize=7, color="dimgray")

    fig.suptitle("Store against memcached 1.6 and Redis 7.0 over loopback (mooncake_bench)")
    fig.text(0.01, 0.01, "source: docs/data/store_vs_baselines.json; (b, c) lines: default matrix run, "
             "30206d9, 2026-12-02, EPYC VM without AVX-512; (a) and stars: 2026-12-04 runs",
             fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    save(fig, "store_vs_memcached_redis.png")


def plot_transport():
    d = load("transport_vs_baselines.json")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})

    # (a) paired ratios of the two latest full runs, with each target's threshold.
    ax = axes[0]
    names = list(d["paired_ratio_runs"][0]["ratios"].keys())
    y = list(range(len(names)))
    height = 0.35
    for ri, run in enumerate(d["paired_ratio_runs"]):
        vals = [run["ratios"][n] for n in names]
        ax.barh([v + (ri - 0.5) * height for v in y], vals, height=height,
                color=["tab:cyan", "tab:olive"][ri], label="run %s" % run["date"])
    for i, n in enumerate(names):
        if n in d["targets"]:
            op, thr = d["targets"][n]
            ax.plot([thr, thr], [i - 0.45, i + 0.45], color="tab:red", linewidth=2,
                    label="target (>= or <=, see label)" if i == 0 else None)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels(["%s  [%s]" % (n, " ".join(str(t) for t in d["targets"][n]) if n in d["targets"]
                        else "no target") for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("paired ratio, candidate / baseline (x)")
    ax.set_title("(a) transport against memcpy and a plain TCP stream (paired medians)")
    ax.set_xlim(0, 1.8)
    ax.legend(loc="upper right", fontsize=8)

    # (b) absolute GB/s where the record gives them.
    ax = axes[1]
    rows = d["absolute_gb_per_s"]
    labels = ["%s\n%s" % (r["what"], r["date"]) for r in rows]
    y = list(range(len(rows)))
    for i, r in enumerate(rows):
        base = ("memcpy" in r["what"]) or ("plain" in r["what"])
        color = "tab:gray" if base else "tab:green"
        if "gb_per_s" in r:
            ax.barh(i, r["gb_per_s"], color=color)
            ax.text(r["gb_per_s"] + 0.2, i, "%.2f" % r["gb_per_s"], va="center", fontsize=8)
        else:
            lo, hi = r["gb_per_s_range"]
            ax.barh(i, hi - lo, left=lo, color=color, hatch="//", alpha=0.8)
            ax.text(hi + 0.2, i, "%.1f-%.1f" % (lo, hi), va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 16)
    ax.set_xlabel("GB/s (1e9 bytes/s); grey = baseline, green = transport")
    ax.set_title("(b) absolute figures recorded")

    fig.suptitle("Transports (transfer_bench, 2-vCPU VM, loopback)")
    fig.text(0.01, 0.01, "source: docs/data/transport_vs_baselines.json "
             "(bazel run -c opt //mooncake/transport:transfer_bench)", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    save(fig, "transport_vs_memcpy_tcp.png")


def plot_trace():
    """A trace of the transfer path drawn as Perfetto shows it: one row per track."""
    d = load("trace_excerpt.json")
    tracks = list(d["tracks"].keys())
    names = sorted({sp["name"] for sp in d["spans"]})
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:gray"]
    color = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(12, 3.6))
    open_spans = {t: [] for t in tracks}  # per track, the spans enclosing the current one
    for sp in sorted(d["spans"], key=lambda x: (x["ts"], -x["dur"])):
        row = tracks.index(sp["tid"])
        stack = open_spans[sp["tid"]]
        while stack and stack[-1] <= sp["ts"]:
            stack.pop()
        depth = len(stack)  # a nested span (a Scope inside a Scope) is drawn thinner
        stack.append(sp["ts"] + sp["dur"])
        ax.barh(row + 0.12 * depth, sp["dur"], left=sp["ts"], height=0.6 - 0.24 * depth,
                color=color[sp["name"]], edgecolor="black", linewidth=0.4)
        if sp["dur"] >= 20:
            ax.text(sp["ts"] + 0.8, row, "%s  b%d" % (sp["name"], sp["batch"] % 1000),
                    va="center", fontsize=7, color="white", clip_on=True)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([d["tracks"][t] for t in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("microseconds")
    ax.grid(axis="y", alpha=0)
    handles = [plt.Rectangle((0, 0), 1, 1, color=color[n]) for n in names]
    ax.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(names),
              fontsize=8, frameon=False)
    ax.set_title("Five 64 KiB GETs through a Router over loopback TCP (trace::DumpChromeJson, "
                 "drawn per track)")
    fig.text(0.01, 0.01, "source: docs/data/trace_excerpt.json (%s; %s, %s)"
             % (d["command"], d["machine"], d["date"]), fontsize=6, color="dimgray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    save(fig, "transport_trace.png")


def main():
    os.makedirs(IMG, exist_ok=True)
    plot_hit_rates()
    plot_store()
    plot_transport()
    plot_trace()
    return 0


if __name__ == "__main__":
    sys.exit(main())
