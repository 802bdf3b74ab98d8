#!/usr/bin/env bash
# Classifies the held-out digits three ways and checks each accuracy (>= 95%):
#   1. the reference interpreter          (tessel run digits.onnx)
#   2. the compiled CPU library           (tessel compile -> digits.so, tessel run digits.so)
#   3. the virtual NPU, on its simulator  (tessel compile --target npu -> digits.tnpu, tessel run digits.tnpu)
# The compiled outputs must also match the interpreter's within 1e-4 of their largest magnitude.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [OUTPUT_DIR]" >&2
  exit 2
fi
build_dir=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out_dir=${2:-$(mktemp -d "${TMPDIR:-/tmp}/tessel-digits.XXXXXX")}
mkdir -p "$out_dir"
tessel=$build_dir/tessel
images=$here/test_images.npy
labels=$here/test_labels.npy
# The model's batch dimension is symbolic; compiled code wants static shapes: the 360 test images.
shape=image:360x1x8x8

echo "-- reference interpreter"
"$tessel" run "$here/digits.onnx" --input "image=$images" --output-dir "$out_dir/ref"
/usr/bin/python3 "$here/accuracy.py" "$out_dir/ref/logits.npy" "$labels"

echo "-- compiled for this CPU"
"$tessel" compile "$here/digits.onnx" --input-shape "$shape" -o "$out_dir/digits.so"
"$tessel" run "$out_dir/digits.so" --input "image=$images" --output-dir "$out_dir/cpu"
/usr/bin/python3 "$here/accuracy.py" "$out_dir/cpu/logits.npy" "$labels" --reference "$out_dir/ref/logits.npy"

echo "-- compiled for the virtual NPU (configs/default.json), run on its simulator"
"$tessel" compile "$here/digits.onnx" --input-shape "$shape" --target npu --hw "$repo/configs/default.json" \
  -o "$out_dir/digits.tnpu"
"$tessel" run "$out_dir/digits.tnpu" --input "image=$images" --output-dir "$out_dir/npu"
/usr/bin/python3 "$here/accuracy.py" "$out_dir/npu/logits.npy" "$labels" --reference "$out_dir/ref/logits.npy"
