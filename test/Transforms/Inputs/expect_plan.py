"""Checks the best plan of an --llm-auto-parallel JSON report on stdin.

usage: expect_plan.py FIELD=VALUE~TOL ...   (FIELD: step_time_s, tokens_per_s,
mfu, peak_memory_gib)
"""
import json
import sys

report = json.load(sys.stdin)
best = report["plans"][0]
values = dict(best)
values["peak_memory_gib"] = best["peak_memory_bytes"] / 2**30
failed = False
for arg in sys.argv[1:]:
    key, _, spec = arg.partition("=")
    want, _, tol = spec.partition("~")
    want, tol = float(want), float(tol)
    got = values[key]
    err = abs(got - want) / want
    ok = err <= tol
    failed |= not ok
    print(f"{'ok  ' if ok else 'FAIL'} {key}: predicted {got:.4g}, published {want:.4g}, "
          f"error {err:.1%} (tolerance {tol:.0%})")
sys.exit(1 if failed else 0)
