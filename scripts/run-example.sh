#!/usr/bin/env bash
# The main job: installs Debian dependencies, builds Tessel, and classifies the bundled held-out digits
# with the bundled CNN (examples/digits): with the reference interpreter, compiled for this CPU, and
# compiled for the virtual NPU (run on its simulator), printing each accuracy.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TESSEL_BUILD_DIR:-$repo/build}
TESSEL_SKIP_NPM=1 bash "$repo/scripts/install-deps.sh"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target tessel
echo "== tessel info examples/digits/digits.onnx"
"$build/tessel" info "$repo/examples/digits/digits.onnx"
echo "== classifying the held-out digits"
bash "$repo/examples/digits/run.sh" "$build"
