#!/usr/bin/env bash
# Generates the ONNX 1.12 backend node test suite (922 tests) into OUTDIR/node from Debian's python3-onnx.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR   (writes OUTDIR/node/<test>/{model.onnx,test_data_set_0/*.pb})" >&2
  exit 2
fi
out_dir=$1
expected_count=922
# Written last, so a half-finished run is never mistaken for a complete one.
marker="$out_dir/node/.complete"

count_tests() { find "$1" -mindepth 1 -maxdepth 1 -type d | wc -l; }

if [[ -f "$marker" ]] && [[ $(count_tests "$out_dir/node") -eq $expected_count ]]; then
  echo "node suite already generated: $expected_count tests in $out_dir/node"
  exit 0
fi

mkdir -p "$out_dir"
staging=$(mktemp -d "$out_dir/.gen-node-suite.XXXXXX")
trap 'rm -rf "$staging"' EXIT

# numpy 1.24 removed the np.float/np.int/... aliases that onnx 1.12's test cases still use,
# so put them back before onnx.backend.test is imported.
/usr/bin/python3 - "$staging" <<'PY'
import sys
import warnings
import numpy as np
warnings.simplefilter("ignore")
for alias, builtin in (("float", float), ("int", int), ("bool", bool),
                       ("object", object), ("complex", complex)):
    if not hasattr(np, alias):
        setattr(np, alias, builtin)
from onnx.backend.test import cmd_tools
sys.argv = ["backend-test-tools", "generate-data", "-o", sys.argv[1]]
cmd_tools.main()
PY

count=$(count_tests "$staging/node")
if [[ $count -ne $expected_count ]]; then
  echo "error: generated $count node tests, expected $expected_count (is python3-onnx 1.12 installed?)" >&2
  exit 1
fi
rm -rf "$out_dir/node"
mv "$staging/node" "$out_dir/node"
touch "$marker"
echo "generated $count node tests in $out_dir/node"
