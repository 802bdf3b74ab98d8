"""From a fresh install prefix (`cmake --install BUILD --prefix P`), `python3 -c "import tessel; ..."` run outside
the source tree finds the package and its data in P, compiles ResNet-18 for cpu and npu, and both match PyTorch
within 1e-4."""
import os
import subprocess
import sys
import textwrap

import tessel
from conftest import REPO, build_dir, models_dir

SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import tessel
    prefix, models = sys.argv[1], sys.argv[2]
    assert os.path.abspath(tessel.__file__).startswith(prefix + os.sep), tessel.__file__
    paths = tessel.data_paths()
    assert paths["installed"] and paths["runtime"].startswith(prefix + os.sep), paths
    model = tessel.load(os.path.join(models, "resnet18.onnx"))
    x = np.load(os.path.join(models, "resnet18.input.npy"))
    expected = np.load(os.path.join(models, "resnet18.torch_output.npy"))
    for target in ("cpu", "npu"):
        out = tessel.compile(model, target).run({"input": x})["output"]
        error = float(np.abs(out - expected).max())
        print(f"{target}: max abs error vs PyTorch {error:.2e}")
        assert error <= 1e-4, (target, error)
""")


def test_fresh_prefix_compiles_resnet18_for_cpu_and_npu(tmp_path):
    prefix = str(tmp_path / "prefix")
    p = subprocess.run(["cmake", "--install", build_dir(), "--prefix", prefix], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    site = [os.path.join(root) for root, dirs, files in os.walk(prefix) if "__init__.py" in files
            and os.path.basename(root) == "tessel"]
    assert len(site) == 1, site
    package_parent = os.path.dirname(site[0])
    assert package_parent.startswith(os.path.join(prefix, "lib", "python3"))
    assert os.path.exists(os.path.join(site[0], "__init__.pyi")) and os.path.exists(os.path.join(site[0], "py.typed"))
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = package_parent
    p = subprocess.run([sys.executable, "-c", SCRIPT, prefix, models_dir()], cwd=work, env=env, capture_output=True,
                       text=True, timeout=900)
    print(p.stdout)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "cpu: max abs error" in p.stdout and "npu: max abs error" in p.stdout
    assert REPO not in p.stdout + p.stderr  # nothing refers back to the source tree
