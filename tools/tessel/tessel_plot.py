#!/usr/bin/python3
"""Charts for the tessel CLI, drawn with matplotlib (installed with tessel; tessel runs it, users need not).

usage: tessel_plot.py KIND DATA.json OUT.{svg,png,pdf}
KIND layers        (tessel bench --profile --plot): horizontal bars, largest first.
                   DATA {"title", "xlabel", "rows": [{"label", "value", "group"}], "folded": {"label", "value"}|null}
KIND npu-timeline  (tessel sim --plot): per-unit busy fraction over time, and SRAM use per buffer.
                   DATA {"title", "bin_edges": [cycle...], "units": [{"name", "busy": [fraction per bin]}],
                         "sram": [{"name", "capacity", "bytes": [peak live bytes per bin]}],
                         "calls": [{"name", "start"}]}
KIND convergence   (tessel tune): best and median fitness per generation of each search, and the untuned line.
                   DATA {"title", "unit", "label", "untuned", "series": [{"label", "best": [...], "median": [...]}]}
Exit status: 0 drawn, 3 matplotlib missing, 2 bad arguments or data.
"""
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:  # tessel turns status 3 into "install python3-matplotlib"
    print(f"tessel_plot: matplotlib is not available: {e}", file=sys.stderr)
    sys.exit(3)

# Same picture for the same data: no dates, fixed ids in the SVG; text stays text (searchable, smaller).
matplotlib.rcParams["svg.hashsalt"] = "tessel"
matplotlib.rcParams["svg.fonttype"] = "none"
METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": {}}


def save(fig, out):
    fmt = out.rsplit(".", 1)[-1].lower()
    fig.savefig(out, format=fmt, bbox_inches="tight", metadata=METADATA.get(fmt, {}))


def layers(data, out):
    rows = list(data["rows"])
    folded = data.get("folded")
    if folded and folded["value"] > 0:
        rows.append({"label": folded["label"], "value": folded["value"], "group": ""})
    groups = sorted({r["group"] for r in rows if r["group"]})
    palette = plt.get_cmap("tab10")
    colour = {g: palette(i % 10) for i, g in enumerate(groups)}
    total = sum(r["value"] for r in rows) or 1.0
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.6))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r["value"] for r in rows], color=[colour.get(r["group"], "lightgrey") for r in rows])
    ax.set_yticks(y, [r["label"] for r in rows], fontsize=8)
    for yi, r in zip(y, rows):
        ax.text(r["value"], yi, f" {r['value']:.3f} ({100 * r['value'] / total:.1f}%)", va="center", fontsize=7)
    ax.set_xlabel(data.get("xlabel", ""))
    ax.set_title(data.get("title", ""), fontsize=10)
    ax.margins(x=0.18)
    if groups:
        handles = [plt.Rectangle((0, 0), 1, 1, color=colour[g]) for g in groups]
        ax.legend(handles, groups, fontsize=7, loc="lower right", title="kernel", title_fontsize=7)
    save(fig, out)


def npu_timeline(data, out):
    edges = data["bin_edges"]
    mids = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
    units, sram = data["units"], data["sram"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    palette = plt.get_cmap("tab10")
    for i, u in enumerate(units):
        base = len(units) - 1 - i
        top.fill_between(mids, base, [base + 0.85 * b for b in u["busy"]], step="mid", color=palette(i % 10),
                         linewidth=0)
        top.axhline(base, color="grey", linewidth=0.4)
    top.set_yticks([len(units) - 1 - i + 0.42 for i in range(len(units))], [u["name"] for u in units])
    top.set_ylim(0, len(units))
    top.set_ylabel("busy fraction per unit")
    for call in data.get("calls", []):
        for ax in (top, bottom):
            ax.axvline(call["start"], color="black", linewidth=0.4, linestyle=":")
    top.set_title(data.get("title", ""), fontsize=10)
    for i, b in enumerate(sram):
        cap = b["capacity"] or 1
        bottom.step(mids, [100.0 * v / cap for v in b["bytes"]], where="mid", color=palette(i % 10),
                    label=f"{b['name']} (capacity {b['capacity'] / 1024:.0f} KiB)")
    bottom.set_ylabel("SRAM live, % of capacity")
    bottom.set_ylim(0, 105)
    bottom.set_xlabel("cycle")
    bottom.legend(fontsize=7, loc="upper right")
    save(fig, out)


def convergence(data, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    palette = plt.get_cmap("tab10")
    for i, s in enumerate(data["series"]):
        gens = list(range(1, len(s["best"]) + 1))
        ax.plot(gens, s["best"], color=palette(i % 10), marker="o", markersize=3, label=f"{s['label']}: best")
        med = [m for m in s["median"]]
        ax.plot(gens, med, color=palette(i % 10), linestyle="--", linewidth=1, label=f"{s['label']}: population median")
    if data.get("untuned"):
        ax.axhline(data["untuned"], color="black", linewidth=0.8, linestyle=":", label="untuned compile (simulated or measured)")
    ax.set_xlabel("generation")
    ax.set_ylabel(data.get("label", data.get("unit", "")))
    ax.set_title(data.get("title", ""), fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save(fig, out)


CHARTS = {"layers": layers, "npu-timeline": npu_timeline, "convergence": convergence}


def main(argv):
    if len(argv) != 4 or argv[1] not in CHARTS:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[2]) as f:
        data = json.load(f)
    CHARTS[argv[1]](data, argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
