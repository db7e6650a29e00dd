#!/usr/bin/env python3
"""Fits a GPU preset's gemm_half_dim to llm-run kernel profiles.

The cost model prices a GEMM of dimensions (m, k, n) at
gemm_efficiency * prod_d d / (d + h) of peak, with gemm_efficiency set so
that an 8192^3 GEMM reaches ANCHOR of peak (lib/CostModel/Hardware.cpp).
This finds h by time-weighted least squares on the log of each profiled
GEMM's efficiency (linear_fwd / linear_bwd entries of `llm-run --profile`),
leaving out the LM head (its rows are the vocabulary: --skip-n), and prints
h, the rms log error, and the free fit (h and gemm_efficiency both free).

  fit-gemm-half-dim.py PROFILE.json... [--peak-tflops 989.4] [--anchor 0.807]
"""
import argparse
import json
import math

parser = argparse.ArgumentParser()
parser.add_argument("profiles", nargs="+")
parser.add_argument("--peak-tflops", type=float, default=989.4)
parser.add_argument("--anchor", type=float, default=0.807)
parser.add_argument("--skip-n", type=int, action="append", default=[],
                    help="leave out GEMMs with this output width (the LM head's vocabulary)")
args = parser.parse_args()

rows = []
for path in args.profiles:
    for k in json.load(open(path))["kernels"]:
        if k["kernel"] not in ("linear_fwd", "linear_bwd") or k["seconds"] <= 0:
            continue
        dims = k["dims"]
        if len(dims) != 3 or dims[2] in args.skip_n:
            continue
        rows.append((dims, k["flops"] / k["seconds"] / (args.peak_tflops * 1e12), k["seconds"]))
if not rows:
    raise SystemExit("fit-gemm-half-dim.py: no linear_fwd / linear_bwd entries in the profiles")
weight = sum(t for _, _, t in rows)


def shape(dims, h):
    return sum(math.log(d / (d + h)) for d in dims)


def anchored(h):
    log_e0 = math.log(args.anchor) - 3 * math.log(8192 / (8192 + h))
    return sum(t * (math.log(e) - log_e0 - shape(d, h)) ** 2 for d, e, t in rows) / weight


def free(h):
    log_e0 = sum(t * (math.log(e) - shape(d, h)) for d, e, t in rows) / weight
    err = sum(t * (math.log(e) - log_e0 - shape(d, h)) ** 2 for d, e, t in rows) / weight
    return err, math.exp(log_e0)


grid = range(8, 1025, 8)
h = min(grid, key=anchored)
hf = min(grid, key=lambda x: free(x)[0])
err_free, e0 = free(hf)
print("%d GEMM shapes; anchored fit: gemm_half_dim %d, rms log error %.3f" % (
    len(rows), h, math.sqrt(anchored(h))))
print("free fit: gemm_half_dim %d, gemm_efficiency %.3f (8192^3: %.3f), rms log error %.3f" % (
    hf, e0, e0 * (8192 / (8192 + hf)) ** 3, math.sqrt(err_free)))
