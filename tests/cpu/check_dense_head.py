#!/usr/bin/python3
"""A dense-prediction head as a PyTorch user exports it (a small DeepLabV3 / U-Net mix on an odd 12x13 map):
atrous 3x3 convs of rates 2, 6 and 14 (rate 14 reads the map through its centre tap only: the pass
crop-dead-conv-taps makes it a 1x1; rate 6 leaves most taps on padding: conv2d_nchw_dilated_taps), a 128-channel
rate-2 conv (per-tap GEMMs for long reductions), image pooling upsampled back by a bilinear Resize, a channel
concat, a 4x bilinear and a 2x nearest upsampling (rt::resize_2d), and a skip concat. Compiled for the native ISA,
for AVX2 (`tessel compile --isa`; its default layout runs the convs blocked, NCHWc8, but for the atrous ones whose
taps mostly read padding) and for AVX2 in NCHW, the .so must match PyTorch within 1e-4 of the output's largest
magnitude, and its profile must show the kernels above, so a change that stops selecting them is seen, not only a
wrong number.

usage: tests/cpu/check_dense_head.py --tessel build/tessel
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 1e-4  # max |compiled - torch| / max |torch|
# Kernels the profile must show at least so many times in every variant (rate 6 and the 128-channel rate 2, whose
# taps mostly read padding, run the atrous kernel; rate 14 is a 1x1 after crop-dead-conv-taps).
EXPECTED_KERNELS = {"conv2d_nchw_dilated_taps": 2, "resize_2d": 3}
VARIANTS = (("native", ["--isa", "auto"]), ("avx2", ["--isa", "avx2"]), ("avx2-nchw", ["--isa", "avx2", "--layout", "nchw"]))


class DenseHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv2d
        self.stem = conv(16, 32, 3, padding=1)
        self.rate2 = conv(32, 32, 3, padding=2, dilation=2)
        self.rate6 = conv(32, 32, 3, padding=6, dilation=6)
        self.rate14 = conv(32, 32, 3, padding=14, dilation=14)
        self.pool_conv = conv(32, 32, 1)
        self.project = conv(128, 128, 1)
        self.wide = conv(128, 24, 3, padding=2, dilation=2)
        self.skip = conv(16, 8, 1)
        self.head = conv(32, 5, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.stem(x))
        pooled = F.relu(self.pool_conv(F.adaptive_avg_pool2d(s, 1)))
        pooled = F.interpolate(pooled, size=s.shape[2:], mode="bilinear", align_corners=False)
        aspp = torch.cat([F.relu(self.rate2(s)), F.relu(self.rate6(s)), F.relu(self.rate14(s)), pooled], 1)
        y = F.relu(self.wide(F.relu(self.project(aspp))))
        y = F.interpolate(y, scale_factor=4, mode="bilinear", align_corners=False)
        skip = F.interpolate(self.skip(x), scale_factor=2, mode="nearest")
        skip = F.interpolate(skip, size=y.shape[2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([y, skip], 1))


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tessel"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = DenseHead().eval()
    x = torch.randn(1, 16, 12, 13, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="tessel-dense-head-") as work:
        onnx_path, x_path = os.path.join(work, "dense_head.onnx"), os.path.join(work, "x.npy")
        torch.onnx.export(model, x, onnx_path, opset_version=13, input_names=["x"], output_names=["y"])
        np.save(x_path, x.numpy())
        for name, flags in VARIANTS:
            library = os.path.join(work, f"dense_head.{name}.so")
            out_dir = os.path.join(work, f"out.{name}")
            try:
                run([args.tessel, "compile", onnx_path, *flags, "-o", library])
                run([args.tessel, "run", library, "--input", f"x={x_path}", "-q", "--threads", "2", "--output-dir",
                     out_dir])
                profile = json.loads(run([args.tessel, "bench", library, "--input", f"x={x_path}", "--threads", "1",
                                          "--warmup", "0", "--iterations", "1", "--profile", "--json"]))["profile"]
            except RuntimeError as error:
                print(f"  {name}: FAIL: {error}")
                failures += 1
                continue
            got = np.load(os.path.join(out_dir, "y.npy"))
            rel = float(np.abs(got - expected).max() / np.abs(expected).max())
            kernels = [layer["kernel"] for layer in profile["layers"]]
            blocked = any("nchwc8" in k for k in kernels)
            expected_kernels = EXPECTED_KERNELS
            counts = {k: kernels.count(k) for k in expected_kernels}
            ok = rel <= TOLERANCE and all(counts[k] >= n for k, n in expected_kernels.items())
            failures += not ok
            print(f"  {name}{' (convs blocked in NCHWc8 but the atrous ones)' if blocked else ''}: max|diff|/max|torch| = {rel:.3g}; kernels "
                  f"{counts} (at least {expected_kernels}): {'ok' if ok else 'FAIL'}")
    print(f"dense-prediction head: {'PASS' if failures == 0 else f'{failures} FAILURE(S)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
