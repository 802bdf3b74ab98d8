#!/usr/bin/python3
"""The pictures of the CLI, for ResNet-18 (TESSEL_MODELS_DIR) and the bundled digits CNN:
  bench --profile --plot   per-layer bar chart (matplotlib): the slowest call of the profile and the folded rest
  partition --render       the partitioned graph through Graphviz, a fill colour per device, a legend
  sim --plot               per-unit busy lanes and SRAM use over time (matplotlib), titled with the run's cycles
each checked as SVG against the command's own --json facts; --json of partition; and a missing tool (dot,
Python, matplotlib) is exit 2 naming what to install. Usage: test_plots.py --tessel build/tessel"""
import argparse
import json
import os
import stat
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))


def svg_text(path):
    """The text of an SVG file, or None when it is not one."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return None
    if not root.tag.endswith("svg"):
        return None
    return open(path).read()


def check_model(c, d, model, tag):
    j = lambda n: os.path.join(d, f"{tag}-{n}")
    code, out, err = c.run(["compile", model, "-o", j("model.so")])
    c.check(f"{tag}: compile", code == 0, out + err)
    # bench: the chart shows the slowest call and folds the rest.
    code, out, err = c.run(["bench", j("model.so"), "--profile", "--json", "--plot", j("layers.svg"), "--plot-top", "5",
                            "--iterations", "3", "--warmup", "1", "--threads", "1"])
    svg = svg_text(j("layers.svg"))
    ok = code == 0 and svg is not None
    if ok:
        layers = json.loads(out)["profile"]["layers"]
        slowest = max(layers, key=lambda r: r["ms"])
        ok = (slowest["node"] in svg and "median ms per inference" in svg and
              (len(layers) <= 5 or f"the other {len(layers) - 5} calls" in svg))
    c.check(f"{tag}: bench --profile --plot draws the slowest layer and folds the rest", ok, err or out)
    # partition: --json facts, the rendered graph with a colour per device.
    code, out, err = c.run(["partition", model, "--hw", "default", "--json", "--dot", j("parts.dot"),
                            "--render", j("parts.svg")])
    svg = svg_text(j("parts.svg"))
    ok = code == 0 and svg is not None
    if ok:
        facts = json.loads(out)
        keys = {"model", "hw_config", "hw_hash", "placements", "nodes_per_device", "subgraphs", "transfer_values",
                "transfer_bytes"}
        npu_nodes = [p["node"] for p in facts["placements"] if p["device"] == "npu0"]
        dot = open(j("parts.dot")).read()
        ok = (keys <= set(facts) and npu_nodes and all(n in svg for n in npu_nodes[:5]) and 'fill="lightblue"' in svg
              and "devices" in svg and sum(facts["nodes_per_device"].values()) == len(facts["placements"])
              and "\\\\n" not in dot)
    c.check(f"{tag}: partition --json and --render (npu nodes drawn, coloured, legend)", ok, err or out[:400])
    # sim: the chart's title carries the run's cycles; the four units and the SRAM panel are drawn.
    code, out, err = c.run(["compile", model, "--target", "npu", "--hw", "default", "-o", j("model.tnpu")])
    code, out, err = c.run(["sim", j("model.tnpu"), "--json", "--plot", j("sim.svg")])
    svg = svg_text(j("sim.svg"))
    ok = code == 0 and svg is not None
    if ok:
        cycles = json.loads(out)["cycles"]
        ok = f"{cycles} cycles" in svg and all(u in svg for u in ("LD", "MM", "VEC", "ST")) and "SRAM live" in svg
    c.check(f"{tag}: sim --plot draws the units and SRAM, titled with the run's cycles", ok, err or out[:400])
    return j("model.so"), j("model.tnpu")


def check_missing_tools(c, d, model, so, tnpu):
    fake = os.path.join(d, "python-without-matplotlib")
    with open(fake, "w") as f:  # -S leaves out the site directories where Debian's matplotlib lives
        f.write("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
    cases = [
        ("partition --render without graphviz", ["partition", model, "--hw", "default", "--render", f"{d}/x.svg"],
         {"PATH": "/nonexistent"}, "apt-get install graphviz"),
        ("sim --plot without matplotlib", ["sim", tnpu, "--plot", f"{d}/y.svg"], {"TESSEL_PYTHON": fake},
         "python3-matplotlib"),
        ("bench --plot without Python", ["bench", so, "--plot", f"{d}/z.svg", "--iterations", "1"],
         {"TESSEL_PYTHON": "/nonexistent/python3"}, "Python 3"),
    ]
    for name, args, env, fragment in cases:
        code, out, err = c.run(args, env)
        c.check(name + ": exit 2 naming what to install", code == 2 and fragment in err and "tessel: error:" in err,
                f"exit {code}: {out}{err}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", default=os.path.join(REPO, "build/tessel"))
    c = Checks(os.path.abspath(ap.parse_args().tessel))
    with tempfile.TemporaryDirectory() as d:
        digits = os.path.join(REPO, "examples/digits/digits.onnx")
        so, tnpu = check_model(c, d, digits, "digits")
        check_missing_tools(c, d, digits, so, tnpu)
        resnet = os.path.join(os.environ.get("TESSEL_MODELS_DIR", ""), "resnet18.onnx")
        if os.path.exists(resnet):
            check_model(c, d, resnet, "resnet18")
        else:
            print("note: TESSEL_MODELS_DIR has no resnet18.onnx; the ResNet-18 pictures were not drawn")
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
