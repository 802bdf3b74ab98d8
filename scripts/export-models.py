#!/usr/bin/python3
"""Exports torchvision classifiers (random weights) to ONNX with a seeded input and PyTorch's output on it."""
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
INPUT_SHAPE = (1, 3, 224, 224)
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


def export_model(name, out_dir):
    paths = files_for(out_dir, name)
    torch.manual_seed(SEED)
    model = getattr(torchvision.models, name)(weights=None).eval()
    # torchvision initialises ViT's classifier to zeros, so every output would be 0 whatever the network
    # computed: random weights instead, so that comparing outputs checks the whole network.
    head = getattr(getattr(model, "heads", None), "head", None)
    if head is not None:
        with torch.no_grad():
            torch.nn.init.normal_(head.weight, std=0.02)
            torch.nn.init.normal_(head.bias, std=0.02)
    # The input has its own seed so it does not depend on how many weights the model drew.
    generator = torch.Generator().manual_seed(SEED + 1)
    example = torch.randn(*INPUT_SHAPE, generator=generator)
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
    parser.add_argument("--models", nargs="+", choices=MODELS + MORE_MODELS, default=list(MODELS))
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
