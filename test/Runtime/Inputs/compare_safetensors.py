"""Compares two safetensors files tensor by tensor (pure Python).

usage: compare_safetensors.py A B [--rel TOL]
Same names, shapes and dtypes, values within TOL relative to max(1, |a|).
Prints a summary; exits 1 on a mismatch.
"""
import argparse
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], struct.unpack("<%df" % ((e - b) // 4), data[b:e]))
    return meta, tensors


p = argparse.ArgumentParser()
p.add_argument("a")
p.add_argument("b")
p.add_argument("--rel", type=float, default=1e-5)
args = p.parse_args()
(ma, a), (mb, b) = load(args.a), load(args.b)
if sorted(a) != sorted(b):
    print("FAIL: names differ:", sorted(set(a) ^ set(b)))
    sys.exit(1)
worst = 0.0
for name in sorted(a):
    (da, sa, va), (db, sb, vb) = a[name], b[name]
    if (da, sa) != (db, sb):
        print("FAIL: %s is %s %s vs %s %s" % (name, da, sa, db, sb))
        sys.exit(1)
    for x, y in zip(va, vb):
        worst = max(worst, abs(x - y) / max(1.0, abs(x)))
if worst > args.rel:
    print("FAIL: worst relative difference %.3g" % worst)
    sys.exit(1)
print("%d tensors agree at step %s/%s (worst relative difference %.3g)"
      % (len(a), ma.get("step"), mb.get("step"), worst))
