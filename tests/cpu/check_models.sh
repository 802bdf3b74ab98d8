#!/bin/bash
# cpu target end to end: the four torchvision models compiled to .so match the reference interpreter
# (1e-4 of the output's largest magnitude), and MobileNetV2 and SqueezeNet also when compiled for AVX2 only; an --emit-app build reproduces `tessel run x.so` bit for bit
# (and its command line refuses malformed numbers and unknown options, and creates its output directory);
# bad input gives one clear error (exit status 2).
# usage: tests/cpu/check_models.sh [TESSEL] [MODELS_DIR]   (defaults: build/tessel, bench/models)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tessel=$(realpath "${1:-$root/build/tessel}")
models=${2:-$root/bench/models}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
"$py" "$root/scripts/export-models.py" "$models" >/dev/null

compare() {  # compare ACTUAL.npy EXPECTED.npy TOL (TOL 0: bit for bit)
  "$py" - "$@" <<'PY'
import sys, numpy as np
a, e, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
rel = float(np.abs(a - e).max() / np.abs(e).max())
ok = a.tobytes() == e.tobytes() if tol == 0 else rel <= tol
print(f"  {sys.argv[1].split('/')[-2]}: max|diff|/max|ref| = {rel:.3g} {'(bit for bit)' if tol == 0 else ''} {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}

fail=0
for m in resnet18 resnet50 mobilenet_v2 squeezenet1_1; do
  start=$(date +%s.%N)
  "$tessel" compile "$models/$m.onnx" -o "$work/$m.so" >/dev/null 2>&1 || { echo "  $m: compile FAILED"; fail=1; continue; }
  echo "  $m: compiled in $(echo "$(date +%s.%N) - $start" | bc) s"
  "$tessel" run "$work/$m.so" --input "input=$models/$m.input.npy" -o "$work/$m.so.out" -q --threads 2
  "$tessel" run "$models/$m.onnx" --input "input=$models/$m.input.npy" -o "$work/$m.ref" -q
  mkdir -p "$work/$m"; cp "$work/$m.so.out/output.npy" "$work/$m/output.npy"
  compare "$work/$m/output.npy" "$work/$m.ref/output.npy" 1e-4 || fail=1
done

# The default --march=native takes the runtime's AVX-512 paths on a machine that has them; the AVX2 paths
# get the same end-to-end check through an AVX2-only target (MobileNetV2: stem, depthwise, GEMM, FC;
# SqueezeNet 1.1: Winograd with 16-64 input channels, the fused stem + MaxPool, in-place Concat).
# Without AVX-512 the default layout (auto) blocks MobileNetV2's depthwise regions in NCHWc8; SqueezeNet
# is also compiled with every conv region blocked (--layout nchwc8: Concat and MaxPool in NCHWc8).
for case in mobilenet_v2:auto squeezenet1_1:auto squeezenet1_1:nchwc8; do
  m=${case%%:*} layout=${case#*:}
  echo "AVX2-only build (--march haswell --layout $layout): $m"
  "$tessel" compile "$models/$m.onnx" --march haswell --layout "$layout" -o "$work/$m.$layout.avx2.so" >/dev/null 2>&1 ||
    { echo "  $m: --march haswell --layout $layout compile FAILED"; fail=1; continue; }
  "$tessel" run "$work/$m.$layout.avx2.so" --input "input=$models/$m.input.npy" -o "$work/$m.$layout.avx2.out" -q --threads 2
  mkdir -p "$work/$m-avx2-$layout"; cp "$work/$m.$layout.avx2.out/output.npy" "$work/$m-avx2-$layout/output.npy"
  compare "$work/$m-avx2-$layout/output.npy" "$work/$m.ref/output.npy" 1e-4 || fail=1
done

echo "emit-app (squeezenet1_1): build with CMake, compare with tessel run at 1 thread"
"$tessel" compile "$models/squeezenet1_1.onnx" --emit-app "$work/app" >/dev/null 2>&1
cmake -S "$work/app" -B "$work/app/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/app/build" -j2 >/dev/null
mkdir -p "$work/app-out" "$work/app-ref"
"$work/app/build/model_app" --threads 1 -o "$work/app-out" "$models/squeezenet1_1.input.npy" >/dev/null
"$tessel" compile "$models/squeezenet1_1.onnx" -o "$work/sq.so" >/dev/null 2>&1
"$tessel" run "$work/sq.so" --threads 1 --input "input=$models/squeezenet1_1.input.npy" -o "$work/app-ref" -q
compare "$work/app-out/output.npy" "$work/app-ref/output.npy" 0 || fail=1
# The app's command line: numbers are checked (no atoi), unknown options refused, -o DIR created.
expect_app() {  # STATUS FRAGMENT ARGS...
  local want=$1 fragment=$2 rc=0
  shift 2
  "$work/app/build/model_app" "$@" > "$work/app.err" 2>&1 || rc=$?
  if [[ $rc -ne $want ]] || ! grep -qF -- "$fragment" "$work/app.err"; then
    echo "  app $*: exit $rc (expected $want), output: $(head -c 300 "$work/app.err")"
    fail=1
  fi
}
expect_app 2 "--threads expects a whole number from 1 to 1024, got 'abc'" --threads abc "$models/squeezenet1_1.input.npy"
expect_app 2 "got '0'" --threads 0 "$models/squeezenet1_1.input.npy"
expect_app 2 "--iterations expects a whole number" --iterations 5x "$models/squeezenet1_1.input.npy"
expect_app 2 "unknown option '--frobnicate'" --frobnicate "$models/squeezenet1_1.input.npy"
expect_app 2 "--threads needs a value" "$models/squeezenet1_1.input.npy" --threads
expect_app 0 "outputs written to $work/app-new/a/b" -o "$work/app-new/a/b" "$models/squeezenet1_1.input.npy"
[[ -f "$work/app-new/a/b/output.npy" ]] || { echo "  app -o: $work/app-new/a/b/output.npy not written"; fail=1; }

# A pre-norm transformer block exported by PyTorch (decomposed LayerNorm, 2-head attention, Erf GELU):
# the cpu pipeline fuses its patterns and every node gets a kernel (no host-interpreter fallback).
echo "transformer block: compiled vs the interpreter, no node through the host interpreter"
"$py" -c "import sys; sys.path.insert(0, '$root/tests/models'); import check_pipeline; check_pipeline.export_transformer_block('$work')"
"$tessel" compile "$work/transformer_block.onnx" -o "$work/tb.so" > "$work/tb.log" 2>&1 || { echo "  transformer_block: compile FAILED"; cat "$work/tb.log"; fail=1; }
if [[ -f "$work/tb.so" ]]; then
  if grep -qi "interpreter" "$work/tb.log"; then echo "  transformer_block: nodes through the host interpreter:"; cat "$work/tb.log"; fail=1; fi
  "$tessel" run "$work/tb.so" --input "input=$work/transformer_block.input.npy" -o "$work/tb.out" -q --threads 2
  "$tessel" run "$work/transformer_block.onnx" --input "input=$work/transformer_block.input.npy" -o "$work/tb.ref" -q
  mkdir -p "$work/transformer_block"; cp "$work/tb.out/output.npy" "$work/transformer_block/output.npy"
  compare "$work/transformer_block/output.npy" "$work/tb.ref/output.npy" 1e-4 || fail=1
fi

# A BERT-style encoder exported by PyTorch: int64 token ids and padding mask, an embedding Gather, the
# mask as Equal/Where/Expand (bool tensors), torch.nn.TransformerEncoder layers. Compiled with no host
# fallback, it matches the interpreter and PyTorch; its --emit-app reads the int64 .npy inputs and
# reproduces tessel run bit for bit; an out-of-range token id is one error naming the Gather.
echo "tiny BERT (int64 ids): compiled vs the interpreter and PyTorch, --emit-app, an out-of-range id"
mkdir -p "$work/bert"
"$py" -c "import sys; sys.path.insert(0, '$root/tests/models'); import check_pipeline; check_pipeline.export_tiny_bert('$work/bert')"
b=$work/bert
"$tessel" compile "$b/tiny_bert.onnx" -o "$b/bert.so" > "$b/log" 2>&1 || { echo "  tiny_bert: compile FAILED"; cat "$b/log"; fail=1; }
if [[ -f "$b/bert.so" ]]; then
  if grep -qi "interpreter" "$b/log"; then echo "  tiny_bert: nodes through the host interpreter:"; cat "$b/log"; fail=1; fi
  "$tessel" run "$b/bert.so" --input "ids=$b/ids.npy" --input "mask=$b/mask.npy" -o "$b/so" -q --threads 1
  "$tessel" run "$b/tiny_bert.onnx" --input "ids=$b/ids.npy" --input "mask=$b/mask.npy" -o "$b/ref" -q
  mkdir -p "$b/tiny_bert" "$b/tiny_bert-vs-pytorch"; cp "$b/so/logits.npy" "$b/tiny_bert/logits.npy"
  cp "$b/so/logits.npy" "$b/tiny_bert-vs-pytorch/logits.npy"
  compare "$b/tiny_bert/logits.npy" "$b/ref/logits.npy" 1e-4 || fail=1
  compare "$b/tiny_bert-vs-pytorch/logits.npy" "$b/logits.npy" 1e-4 || fail=1
  "$tessel" compile "$b/tiny_bert.onnx" --emit-app "$b/app" >/dev/null 2>&1 &&
    cmake -S "$b/app" -B "$b/app/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$b/app/build" -j2 >/dev/null || { echo "  tiny_bert: --emit-app build FAILED"; fail=1; }
  mkdir -p "$b/app-out"
  "$b/app/build/model_app" --threads 1 -o "$b/app-out" "$b/ids.npy" "$b/mask.npy" >/dev/null
  mkdir -p "$b/bert-app"; cp "$b/app-out/logits.npy" "$b/bert-app/logits.npy"
  compare "$b/bert-app/logits.npy" "$b/so/logits.npy" 0 || fail=1
  "$py" -c "import numpy as np; ids = np.load('$b/ids.npy'); ids[0, 3] = 100; np.save('$b/bad_ids.npy', ids)"
  for runner in so app; do
    rc=0
    if [[ $runner == so ]]; then
      "$tessel" run "$b/bert.so" --input "ids=$b/bad_ids.npy" --input "mask=$b/mask.npy" -q > "$b/err" 2>&1 || rc=$?
    else
      "$b/app/build/model_app" -o "$b/app-out" "$b/bad_ids.npy" "$b/mask.npy" > "$b/err" 2>&1 || rc=$?
    fi
    if [[ $rc == 2 ]] && grep -q "Gather.*out of range" "$b/err"; then echo "  out-of-range id ($runner): ok ($(tail -1 "$b/err"))"
    else echo "  out-of-range id ($runner): FAIL (exit $rc: $(cat "$b/err"))"; fail=1; fi
  done
fi

echo "bad input: one error line, exit status 2"
expect_error() {  # expect_error WHAT COMMAND...
  local what=$1; shift
  set +e; out=$("$@" 2>&1 >/dev/null); rc=$?; set -e
  if [[ $rc -eq 2 && $(grep -c "error" <<<"$out") -eq 1 ]]; then echo "  $what: ok ($out)"; else echo "  $what: FAIL (rc $rc: $out)"; fail=1; fi
}
expect_error "unsupported --march" "$tessel" compile "$models/squeezenet1_1.onnx" -o "$work/x.so" --march no-such-cpu
expect_error "missing C++ compiler" env CXX=/nonexistent/g++ "$tessel" compile "$models/squeezenet1_1.onnx" -o "$work/x.so"
expect_error "unwritable output" "$tessel" compile "$models/squeezenet1_1.onnx" -o /nonexistent-dir/x.so
expect_error "not a compiled model" "$tessel" run "$models/squeezenet1_1.input.npy.so"
exit $fail
