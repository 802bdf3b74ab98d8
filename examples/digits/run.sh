#!/usr/bin/env bash
# Classifies the held-out digits with Tessel's compiled model and checks the accuracy (>= 95%).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [OUTPUT_DIR]" >&2
  exit 2
fi
build_dir=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out_dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/tessel-digits.XXXXXX")}
mkdir -p "$out_dir"
"$build_dir/tessel" run "$here/digits.onnx" --input "image=$here/test_images.npy" --output-dir "$out_dir"
/usr/bin/python3 "$here/accuracy.py" "$out_dir/logits.npy" "$here/test_labels.npy"
