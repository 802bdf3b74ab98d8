#!/usr/bin/python3
"""Exports torchvision classifiers and dense-prediction networks (random weights) to ONNX with a seeded input and
PyTorch's output on it."""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1")
# torchvision 0.14's other CNN classifiers that export at opset 13 (issue 18's wider set) and a ViT-B/16 (issue
# 16's); not exported by default.
MORE_MODELS = ("mobilenet_v3_small", "mobilenet_v3_large", "shufflenet_v2_x1_0", "densenet121", "googlenet", "mnasnet1_0",
               "efficientnet_b0", "regnet_y_400mf", "resnext50_32x4d", "vit_b_16")
# Dense prediction at large inputs (issue 16: upsampling, concat, atrous convolutions): torchvision 0.14's
# segmentation networks at 520x520 (their 'out' map) and a U-Net (bilinear upsampling and skip concats) at 512x512.
DENSE_MODELS = ("lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "unet")
INPUT_SHAPE = (1, 3, 224, 224)
DENSE_INPUT_SHAPES = {"unet": (1, 3, 512, 512)}
DENSE_INPUT_SHAPE = (1, 3, 520, 520)
OPSET = 13
SEED = 0


def files_for(out_dir, name):
    return {"onnx": os.path.join(out_dir, f"{name}.onnx"),
            "input": os.path.join(out_dir, f"{name}.input.npy"),
            "output": os.path.join(out_dir, f"{name}.torch_output.npy")}


def save_atomically(path, write):
    """Writes through a temporary file so an interrupted run leaves no half file behind."""
    directory = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(fd)
    try:
        write(temporary)
        os.chmod(temporary, 0o644)  # mkstemp makes files private; these are shared artifacts
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def save_npy(path, array):
    with open(path, "wb") as f:  # a file object, so np.save does not append ".npy"
        np.save(f, array)


class SegmentationOut(torch.nn.Module):
    """torchvision's segmentation networks return a dict; the export takes its 'out' map."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def unet_block(cin, cout):
    conv = lambda i, o: torch.nn.Conv2d(i, o, 3, padding=1, bias=False)
    return torch.nn.Sequential(conv(cin, cout), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True),
                               conv(cout, cout), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True))


class UNet(torch.nn.Module):
    """A U-Net: four 2x2 max-pool levels down (32-512 channels), bilinear 2x upsampling and a skip concat per
    level up, two classes; batch norms with random statistics so that folding them is checked."""

    def __init__(self, width=32, classes=2):
        super().__init__()
        w = width
        self.down = torch.nn.ModuleList([unet_block(3, w), unet_block(w, 2 * w), unet_block(2 * w, 4 * w),
                                         unet_block(4 * w, 8 * w), unet_block(8 * w, 16 * w)])
        self.up = torch.nn.ModuleList([unet_block(24 * w, 8 * w), unet_block(12 * w, 4 * w), unet_block(6 * w, 2 * w),
                                       unet_block(3 * w, w)])
        self.head = torch.nn.Conv2d(w, classes, 1)
        for m in self.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = torch.nn.functional.max_pool2d(x, 2)
        for block in self.up:
            x = torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skips.pop()], 1))
        return self.head(x)


def build_model(name):
    if name == "unet":
        return UNet().eval()
    if name in DENSE_MODELS:
        return SegmentationOut(getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)).eval()
    return getattr(torchvision.models, name)(weights=None).eval()


def export_model(name, out_dir):
    paths = files_for(out_dir, name)
    torch.manual_seed(SEED)
    model = build_model(name)
    # torchvision initialises ViT's classifier to zeros, so every output would be 0 whatever the network
    # computed: random weights instead, so that comparing outputs checks the whole network.
    head = getattr(getattr(model, "heads", None), "head", None)
    if head is not None:
        with torch.no_grad():
            torch.nn.init.normal_(head.weight, std=0.02)
            torch.nn.init.normal_(head.bias, std=0.02)
    # The input has its own seed so it does not depend on how many weights the model drew.
    generator = torch.Generator().manual_seed(SEED + 1)
    shape = DENSE_INPUT_SHAPES.get(name, DENSE_INPUT_SHAPE) if name in DENSE_MODELS else INPUT_SHAPE
    example = torch.randn(*shape, generator=generator)
    with torch.no_grad():
        output = model(example).numpy()
    save_atomically(paths["onnx"], lambda p: torch.onnx.export(
        model, example, p, opset_version=OPSET, input_names=["input"], output_names=["output"],
        do_constant_folding=True))
    # .npy last: their presence marks the model as done.
    save_atomically(paths["input"], lambda p: save_npy(p, example.numpy()))
    save_atomically(paths["output"], lambda p: save_npy(p, output))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", help="writes <name>.onnx, <name>.input.npy, <name>.torch_output.npy")
    parser.add_argument("--models", nargs="+", choices=MODELS + MORE_MODELS + DENSE_MODELS, default=list(MODELS))
    parser.add_argument("--force", action="store_true", help="export even if the files exist")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    for name in args.models:
        if not args.force and all(os.path.exists(p) for p in files_for(args.out_dir, name).values()):
            print(f"{name}: already exported")
            continue
        started = time.monotonic()
        export_model(name, args.out_dir)
        size_mib = os.path.getsize(files_for(args.out_dir, name)["onnx"]) / 2**20
        print(f"{name}: exported in {time.monotonic() - started:.1f} s ({size_mib:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
