"""Reads llm-plan-memory's report (stdin) and checks that every stage's
lowered activations are within TOL percent of the cost model's prediction;
prints one line per stage and `within TOL%` or the stages that are not.

  ... --llm-plan-memory=report=- | check_activations.py 10
"""

import re
import sys

tol = float(sys.argv[1])
rows = [(int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)))
        for m in re.finditer(r"activations, stage (\d+): lowered ([\d.]+) MiB, predicted "
                             r"([\d.]+) MiB \(([-+\d.]+)%\)", sys.stdin.read())]
if not rows:
    print("no activation lines in the report")
    sys.exit(1)
off = [s for s, _, _, pct in rows if abs(pct) > tol]
for s, lowered, predicted, pct in rows:
    print(f"stage {s}: lowered {lowered:.0f} MiB, predicted {predicted:.0f} MiB ({pct:+.1f}%)")
print(f"within {tol:g}%" if not off else f"stages {off} off by more than {tol:g}%")
