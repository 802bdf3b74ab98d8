"""docs/python.md's worked example (torchvision ResNet-18 -> compile cpu and npu -> run -> compare with PyTorch ->
NPU simulate -> plot), run as written: its code blocks, one after the other, in a fresh interpreter."""
import os
import re
import subprocess
import sys

import tessel
from conftest import REPO


def example_code():
    text = open(os.path.join(REPO, "docs", "python.md")).read()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 4
    return "\n".join(blocks)


def test_worked_example_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example_code())
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(tessel.__file__)))
    env = dict(os.environ, PYTHONPATH=package_dir, MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    print(p.stdout)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "max abs error vs PyTorch" in p.stdout and "cycles" in p.stdout
    png = tmp_path / "resnet18-npu-units.png"
    assert png.stat().st_size > 5000 and open(png, "rb").read(4) == b"\x89PNG"
    assert (tmp_path / "resnet18-npu.trace.json").stat().st_size > 1000
    assert (tmp_path / "resnet18.so").exists() and (tmp_path / "resnet18.tnpu").exists()
