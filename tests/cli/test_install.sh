#!/usr/bin/env bash
# The installed Tessel works on its own: `cmake --install BUILD --prefix P` into a temporary prefix, then, from
# a directory outside the source tree, P/bin/tessel compiles the bundled digits CNN for the CPU (.so) and the
# NPU (.tnpu, with the installed configuration named "default"), runs both and compares them with the
# interpreter; it reads its data from P (tessel --version says where), also after the prefix is moved; the
# installed runtime library and headers link a program around a model emitted as C++; the installed Python package
# (P/lib/python3.X/site-packages/tessel) imports, reads its data from P and compiles the CNN for the CPU and the NPU.
# usage: tests/cli/test_install.sh BUILD_DIR
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "${1:-$repo/build}")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessel-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0 count=0
check() {  # NAME COMMAND...: the command must succeed
  local name=$1
  shift
  count=$((count + 1))
  local rc=0
  "$@" >"$tmp/out" 2>&1 || rc=$?
  cat "$tmp/out" >>"$tmp/all.log"
  if [[ $rc -eq 0 ]]; then
    echo "ok   $name"
  else
    echo "FAIL $name"
    sed 's/^/  /' "$tmp/out" | tail -20
    failures=$((failures + 1))
  fi
}

prefix=$tmp/prefix
work=$tmp/work
mkdir -p "$work"
cp "$repo/examples/digits/digits.onnx" "$work/"
check "cmake --install into a temporary prefix" cmake --install "$build" --prefix "$prefix"
for f in bin/tessel lib/libtessel_runtime.a lib/cmake/TesselRuntime/TesselRuntimeConfig.cmake \
  include/tessel/rt/conv.h include/tessel/targets/cpu/abi.h share/tessel/configs/default.json \
  share/tessel/scripts/tessel_plot.py share/tessel/runtime/src/gemm.cpp share/doc/tessel/README.md; do
  check "installed: $f" test -f "$prefix/$f"
done
tessel=$prefix/bin/tessel
cd "$work" || exit 1
version_ok() { "$tessel" --version | tee "$tmp/version" && grep -q "^tessel .* (git " "$tmp/version" && grep -qx "data: $prefix/share/tessel" "$tmp/version"; }
check "--version names the commit and the installed data" version_ok
check "compile for the CPU from $work" "$tessel" compile digits.onnx -o digits.so
check "compile for the NPU with the installed config 'default'" "$tessel" compile digits.onnx --target npu --hw default -o digits.tnpu
check "run the .so and the .tnpu" bash -c "'$tessel' run digits.so -q -o so && '$tessel' run digits.tnpu -q -o npu && test -f so/logits.npy -a -f npu/logits.npy"
check "compare: .so and .tnpu match the interpreter" bash -c "'$tessel' compare digits.onnx digits.so && '$tessel' compare digits.onnx digits.tnpu"
site=$(cd "$prefix" && ls -d lib/python3*/site-packages 2>/dev/null | head -1)
check "installed: the Python package tessel in $site" test -f "$prefix/$site/tessel/__init__.py"
python_ok() {
  PYTHONPATH="$prefix/$site" /usr/bin/python3 -c "
import sys, numpy as np, tessel
assert tessel.__file__.startswith('$prefix/'), tessel.__file__
assert tessel.data_paths()['runtime'] == '$prefix/share/tessel/runtime', tessel.data_paths()
model = tessel.load('digits.onnx', input_shapes={'image': [1, 1, 8, 8]})
x = {'image': np.full((1, 1, 8, 8), 0.5, np.float32)}
for target in ('cpu', 'npu'):
    assert tessel.compare(model, tessel.compile(model, target), inputs=x, atol=1e-4)['pass'], target
print('python: ok')"
}
check "python3 -c 'import tessel' from the prefix: data from P, digits compiled for cpu and npu" python_ok
check "no path into the source tree in what it printed" bash -c "! grep -F '$repo' '$tmp/all.log'"
# Moved elsewhere, the prefix still finds its own data.
mv "$prefix" "$tmp/moved"
moved_ok() {
  "$tmp/moved/bin/tessel" --version | grep -qx "data: $tmp/moved/share/tessel" && "$tmp/moved/bin/tessel" compile digits.onnx -o moved.so &&
    PYTHONPATH="$tmp/moved/$site" /usr/bin/python3 -c "import tessel; assert tessel.data_paths()['configs'] == '$tmp/moved/share/tessel/configs'"
}
check "a moved prefix uses its own data" moved_ok
mv "$tmp/moved" "$prefix"
# The installed runtime library + headers link a program around a model emitted as C++.
cat > main.cpp <<'EOF'
#include <cstdio>
#include <vector>
#include "tessel/targets/cpu/abi.h"
int main() {  // runs the model once on an input of 0.5s and prints the outputs
  long n = 1, m = 1;
  for (int i = 0; i < tessel_model_input(0)->rank; ++i) n *= tessel_model_input(0)->dims[i];
  for (int i = 0; i < tessel_model_output(0)->rank; ++i) m *= tessel_model_output(0)->dims[i];
  std::vector<float> x(n, 0.5f), y(m);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  tessel_model* model = tessel_model_create(1);
  if (!model || tessel_model_run(model, in, out) != 0) return 1;
  for (float v : y) std::printf("%.9g\n", v);
  tessel_model_destroy(model);
}
EOF
linked_ok() {
  "$tessel" compile digits.onnx --emit=cpp -o digits.cpp &&
    g++ -std=c++20 -O2 -mavx2 -mfma -mf16c -I"$prefix/include" -I. -Wa,-I. main.cpp digits.cpp \
      "$prefix/lib/libtessel_runtime.a" -pthread -o app && ./app > app.txt &&
    /usr/bin/python3 -c "import numpy as np; np.save('half.npy', np.full((1, 1, 8, 8), 0.5, np.float32))" &&
    "$tessel" run digits.onnx --input image=half.npy -o ref -q &&
    /usr/bin/python3 -c "import numpy as np, sys; a = np.loadtxt('app.txt'); r = np.load('ref/logits.npy').ravel(); \
sys.exit(0 if np.allclose(a, r, atol=1e-4) else f'app {a} vs interpreter {r}')"
}
check "the installed runtime links an emitted model; it matches the interpreter" linked_ok
echo "$((count - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
