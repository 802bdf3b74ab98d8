#!/usr/bin/python3
"""Prints the classification accuracy of LOGITS.npy against LABELS.npy; exits 1 below 95%."""
import argparse
import sys

import numpy as np

MIN_ACCURACY = 0.95


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("logits", help="[N,10] float scores, e.g. tessel's logits.npy")
    parser.add_argument("labels", help="[N] int64 true classes (test_labels.npy)")
    parser.add_argument("--min", type=float, default=MIN_ACCURACY, help="lowest accepted accuracy")
    parser.add_argument("--reference", help="logits of the reference interpreter: LOGITS must match them "
                        "within 1e-4 of their largest magnitude")
    args = parser.parse_args()
    logits = np.load(args.logits)
    labels = np.load(args.labels)
    if logits.ndim != 2 or logits.shape[0] != labels.shape[0]:
        print(f"error: logits shape {logits.shape} does not match labels shape {labels.shape}"
              " (expected [N, classes] and [N])", file=sys.stderr)
        return 2
    if not np.all(np.isfinite(logits)):
        print("error: logits contain NaN or Inf", file=sys.stderr)
        return 1
    if args.reference:
        ref = np.load(args.reference)
        if ref.shape != logits.shape:
            print(f"error: logits shape {logits.shape} differs from the reference's {ref.shape}", file=sys.stderr)
            return 1
        rel = float(np.abs(logits - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        print(f"max |logits - reference| / max |reference| = {rel:.2e}")
        if rel > 1e-4:
            print("error: outputs differ from the reference interpreter by more than 1e-4", file=sys.stderr)
            return 1
    correct = int((logits.argmax(axis=1) == labels).sum())
    accuracy = correct / len(labels)
    print(f"accuracy: {100 * accuracy:.1f}% ({correct}/{len(labels)} held-out digits)")
    if accuracy < args.min:
        print(f"error: accuracy is below {100 * args.min:.0f}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
