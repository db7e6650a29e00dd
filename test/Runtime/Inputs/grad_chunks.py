"""Compares the gradient accumulators of two plans of one model: WHOLE's
`grad:<param>` (whole gradients) and CHUNKED's `grad_shard:<param>` (ZeRO-2/3
chunks); prints how many of the latter hold ceil(n / dp) elements.

  grad_chunks.py WHOLE/plan.json CHUNKED/plan.json
"""

import json
import math
import sys


def accumulators(path, prefix):
    plan = json.load(open(path))
    found = {}
    for program in plan["programs"]:
        for phase in ("micro_batch_instructions", "step_instructions"):
            for ins in program[phase]:
                for key in ("ins", "outs", "buffers"):
                    for buf in ins.get(key, []):
                        name = buf.get("name", "")
                        if buf.get("space") == "accum" and name.startswith(prefix):
                            found[name[len(prefix):]] = math.prod(buf["shape"])
    return found, plan["mesh"]["dp"]


whole, _ = accumulators(sys.argv[1], "grad:")
chunks, dp = accumulators(sys.argv[2], "grad_shard:")
good = sum(1 for p, n in chunks.items() if p in whole and n == -(-whole[p] // dp))
print(f"{good} of {len(whole)} gradient accumulators are chunks of ceil(n / {dp})")
