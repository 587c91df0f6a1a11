#!/usr/bin/python3
"""Export scikit-learn's handwritten-digits set to examples/data/digits.csv.

The data set (sklearn.datasets.load_digits: 1797 images of 8x8 pixels, values 0..16,
labels 0..9) is exported once and committed, so the C++ examples and tests need neither
Python nor scikit-learn. Needs Debian's python3-sklearn.

The file is CSV with a header line `split,label,p0,...,p63`, one image per row:
  split    train or test: the rows are in a seeded random order (numpy's legacy
           RandomState(SEED).permutation, stable across numpy versions) and the first
           TRAIN_ROWS rows (80%, rounded up) are the training set, the other 359 the test set
  label    the digit, 0..9
  p0..p63  the pixels row by row (p0 top left, p7 top right), integers 0..16

usage: export_digits.py [--out FILE] [--check]
  --check  regenerate in memory and compare with FILE (exit 1 if it differs)
"""
import argparse
import io
import os
import sys

SEED = 11
TRAIN_ROWS = 1438  # ceil(0.8 * 1797)


def export_text():
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.reshape(len(digits.images), 64)
    if not np.array_equal(pixels, np.round(pixels)) or pixels.min() < 0 or pixels.max() > 16:
        raise ValueError("load_digits: expected integer pixels 0..16")
    order = np.random.RandomState(SEED).permutation(len(digits.target))
    out = io.StringIO()
    out.write(",".join(["split", "label"] + [f"p{i}" for i in range(64)]) + "\n")
    for row, i in enumerate(order):
        split = "train" if row < TRAIN_ROWS else "test"
        out.write(",".join([split, str(int(digits.target[i]))] + [str(int(v)) for v in pixels[i]]) + "\n")
    return out.getvalue()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "examples", "data", "digits.csv")))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()
    text = export_text()
    if args.check:
        with open(args.out) as f:
            same = f.read() == text
        print(f"{args.out}: {'matches' if same else 'DIFFERS FROM'} a fresh export")
        return 0 if same else 1
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}: {text.count(chr(10)) - 1} images, first {TRAIN_ROWS} rows train")
    return 0


if __name__ == "__main__":
    sys.exit(main())
