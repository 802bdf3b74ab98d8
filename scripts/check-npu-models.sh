#!/usr/bin/env bash
# NPU end-to-end check: compiles each torchvision model for each shipped configuration (tessel compile
# --target npu), runs the .tnpu (NPU parts on the simulator) and compares with the reference interpreter
# (max |diff| <= 1e-4 * max |reference|), and checks via `tessel sim --json` that no hazard was reported
# and that peak SRAM never exceeds capacity.
#   usage: scripts/check-npu-models.sh TESSEL MODELS_DIR [WORK_DIR]    (MODELS_DIR from scripts/export-models.py)
#   TESSEL_NPU_MODELS / TESSEL_NPU_CONFIGS select subsets (default: all four models; default tiny no-grouped-conv)
set -uo pipefail
tessel=$1
models=$2
work=${3:-$(mktemp -d)}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=/usr/bin/python3
names=${TESSEL_NPU_MODELS:-"resnet18 squeezenet1_1 mobilenet_v2 resnet50"}
configs=${TESSEL_NPU_CONFIGS:-"default tiny no-grouped-conv"}
mkdir -p "$work"
fail=0
for m in $names; do
  "$tessel" run "$models/$m.onnx" --input "input=$models/$m.input.npy" -o "$work/$m.ref" -q || { echo "FAIL $m: reference run"; fail=1; continue; }
  for c in $configs; do
    out="$work/$m.$c"
    start=$SECONDS
    if ! "$tessel" compile "$models/$m.onnx" --target npu --hw "$repo/configs/$c.json" -o "$out.tnpu" >"$out.compile.txt"; then
      echo "FAIL $m/$c: compile"; fail=1; continue
    fi
    # One simulation gives both the report and the outputs (tessel run OUT.tnpu computes the same outputs).
    if ! "$tessel" sim "$out.tnpu" --json --input "input=$models/$m.input.npy" -o "$out.run" >"$out.sim.json"; then
      echo "FAIL $m/$c: sim"; fail=1; continue
    fi
    $py - "$work/$m.ref" "$out.run" "$out.sim.json" "$m/$c" "$((SECONDS - start))" <<'PYEOF' || fail=1
import json, os, sys
import numpy as np
ref_dir, run_dir, sim_path, label, seconds = sys.argv[1:6]
ok = True
for f in sorted(os.listdir(ref_dir)):
    a, b = np.load(os.path.join(run_dir, f)), np.load(os.path.join(ref_dir, f))
    rel = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    ok &= rel <= 1e-4
sim = json.load(open(sim_path))
over = [k for k, v in sim["peak_sram_bytes"].items() if v > sim["sram_capacity_bytes"][k]]
ok &= sim["hazards"] == 0 and not over
print(f"{'PASS' if ok else 'FAIL'} {label}: rel err {rel:.2e}, cycles {sim['cycles']} (bound {sim['lower_bound_cycles']}, "
      f"x{sim['cycles'] / max(sim['lower_bound_cycles'], 1):.2f}), mm util {100 * sim['mm_utilization']:.1f}%, "
      f"hazards {sim['hazards']}, peak SRAM {sim['peak_sram_bytes']} of {sim['sram_capacity_bytes']}, "
      f"NPU calls {sim['npu_calls']}, {seconds} s")
sys.exit(0 if ok else 1)
PYEOF
  done
done
exit $fail
