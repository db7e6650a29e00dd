"""Compares two llm-run metrics files step by step.

usage: compare_metrics.py A.jsonl B.jsonl [--rel TOL] [--from STEP] [--to STEP] [--keys loss,grad_norm]
Loss and gradient norm (or the keys named) must agree within TOL relative (0: bit-exact) at every
step both files have from --from on (to --to). Prints a summary; exits 1 on a mismatch.
"""
import argparse
import json
import sys

p = argparse.ArgumentParser()
p.add_argument("a")
p.add_argument("b")
p.add_argument("--rel", type=float, default=1e-5)
p.add_argument("--from", dest="start", type=int, default=1)
p.add_argument("--to", dest="end", type=int, default=None)
p.add_argument("--keys", default="loss,grad_norm")
args = p.parse_args()


def load(path):
    return {r["step"]: r for r in map(json.loads, open(path))}


a, b = load(args.a), load(args.b)
steps = sorted(s for s in a if s in b and s >= args.start and (args.end is None or s <= args.end))
if not steps:
    print("FAIL: no common steps")
    sys.exit(1)
worst = 0.0
for s in steps:
    for key in args.keys.split(","):
        x, y = a[s][key], b[s][key]
        err = abs(x - y) / max(abs(x), 1e-30)
        worst = max(worst, err)
        if err > args.rel:
            print(f"FAIL step {s} {key}: {x!r} vs {y!r} (relative {err:.3g})")
            sys.exit(1)
first, last = a[steps[0]]["loss"], a[steps[-1]]["loss"]
print(f"steps {steps[0]}-{steps[-1]} agree (worst relative difference {worst:.3g}); "
      f"loss {first:.4f} -> {last:.4f}")
