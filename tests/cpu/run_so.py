#!/usr/bin/python3
"""Runs a model compiled by `tessel compile` through its C ABI with ctypes (independent of the tessel CLI).

usage: run_so.py MODEL.so INPUT.npy... [--threads N] [--compare EXPECTED.npy] [--time R]
Prints the max |diff| relative to the expected output's largest magnitude; exits 1 above --tol."""
import argparse
import ctypes
import sys
import time

import numpy as np


# TESSEL_DTYPE_* (ONNX codes) -> numpy element types.
NUMPY = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
         10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


class Desc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("so")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--time", type=int, default=0)
    a = ap.parse_args()
    lib = ctypes.CDLL(a.so)
    lib.tessel_model_input.restype = ctypes.POINTER(Desc)
    lib.tessel_model_output.restype = ctypes.POINTER(Desc)
    lib.tessel_model_create.restype = ctypes.c_void_p
    lib.tessel_model_hash.restype = ctypes.c_char_p
    lib.tessel_model_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.tessel_model_destroy.argtypes = [ctypes.c_void_p]
    lib.tessel_model_error.argtypes = [ctypes.c_void_p]
    lib.tessel_model_error.restype = ctypes.c_char_p
    outs = []
    for i in range(lib.tessel_model_num_outputs()):
        d = lib.tessel_model_output(i).contents
        outs.append(np.zeros([d.dims[k] for k in range(d.rank)], NUMPY[d.dtype]))
    ins = [np.ascontiguousarray(np.load(p), NUMPY[lib.tessel_model_input(i).contents.dtype])
           for i, p in enumerate(a.inputs)]
    in_ptrs = (ctypes.c_void_p * len(ins))(*[x.ctypes.data for x in ins])
    out_ptrs = (ctypes.c_void_p * len(outs))(*[y.ctypes.data for y in outs])
    m = lib.tessel_model_create(a.threads)
    if lib.tessel_model_run(m, in_ptrs, out_ptrs) != 0:
        sys.exit(f"{a.so}: {lib.tessel_model_error(m).decode()}")
    if a.time:
        ts = []
        for _ in range(a.time):
            t = time.perf_counter()
            lib.tessel_model_run(m, in_ptrs, out_ptrs)
            ts.append((time.perf_counter() - t) * 1e3)
        print(f"median {np.median(ts):.2f} ms min {min(ts):.2f} ms")
    lib.tessel_model_destroy(m)
    if a.compare:
        ref = np.load(a.compare)
        rel = float(np.abs(outs[0] - ref).max() / np.abs(ref).max())
        print(f"{a.so}: hash {lib.tessel_model_hash().decode()} max|diff|/max|ref| = {rel:.3g}")
        sys.exit(0 if rel <= a.tol else 1)


if __name__ == "__main__":
    main()
