#!/usr/bin/python3
"""Trains a small CNN on sklearn's 8x8 digits and exports it to digits.onnx (Tessel's example model)."""
import argparse
import os
import random

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 0
HELD_OUT_FRACTION = 0.2
MIN_ACCURACY = 0.95
# load_digits pixels are integers 0..16; the model expects them scaled to [0, 1].
PIXEL_MAX = 16.0


class DigitsNet(nn.Module):
    """Conv-Relu-MaxPool twice, then two Gemms: only ops Tessel supports early."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16x4x4
            nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32x2x2
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, image):
        return self.classifier(self.features(image))


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # reproducible float sums


def load_split():
    digits = load_digits()
    images = (digits.images / PIXEL_MAX).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    return train_test_split(images, labels, test_size=HELD_OUT_FRACTION,
                            random_state=SEED, stratify=labels)


def train(model, images, labels, epochs=60, batch_size=32):
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    generator = torch.Generator().manual_seed(SEED)
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        total = 0.0
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        if (epoch + 1) % 10 == 0:
            print(f"epoch {epoch + 1}: train loss {total / len(x):.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    seed_everything(SEED)

    train_x, test_x, train_y, test_y = load_split()
    model = DigitsNet()
    train(model, train_x, train_y)
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(test_x)).numpy()
    correct = int((logits.argmax(axis=1) == test_y).sum())
    accuracy = correct / len(test_y)
    print(f"PyTorch held-out accuracy: {100 * accuracy:.1f}% ({correct}/{len(test_y)})")
    if accuracy < MIN_ACCURACY:
        raise SystemExit(f"accuracy {accuracy:.3f} is below {MIN_ACCURACY}")

    onnx_path = os.path.join(args.out_dir, "digits.onnx")
    torch.onnx.export(model, torch.zeros(1, 1, 8, 8), onnx_path, opset_version=13,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
    np.save(os.path.join(args.out_dir, "test_images.npy"), test_x)
    np.save(os.path.join(args.out_dir, "test_labels.npy"), test_y)
    np.save(os.path.join(args.out_dir, "torch_logits.npy"), logits)
    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path)} bytes) and {len(test_y)} held-out images")


if __name__ == "__main__":
    main()
