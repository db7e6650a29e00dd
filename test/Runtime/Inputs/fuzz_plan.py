"""Mutates a plan directory's plan.json at random (re-signing it, so the
runtime's own validation is what is tested) and runs llm-run on each
mutant: every run must end with an exit status (0, or 1 with an error), never
a signal or a hang.

  fuzz_plan.py LLM_RUN PLAN_DIR DATA WORK_DIR SEED COUNT
"""

import hashlib
import json
import random
import shutil
import subprocess
import sys

llm_run, plan_dir, data, work, seed, count = sys.argv[1:7]
rng = random.Random(int(seed))
base = json.load(open(plan_dir + "/plan.json"))


def paths(v, p=()):
    yield p
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, p + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, p + (i,))


every = [p for p in paths(base) if p]
values = [0, -1, 1, 2**31, 2**62, -2**62, 1.5, "", "x", None, [], {}, True, [1, 2], {"a": 1},
          1e308, -0.0]
bad = []
for n in range(int(count)):
    d = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        p = rng.choice(every)
        cur = d
        try:
            for k in p[:-1]:
                cur = cur[k]
            k = p[-1]
            r = rng.random()
            if r < 0.7:
                cur[k] = rng.choice(values)
            elif r < 0.85 and isinstance(cur, dict):
                del cur[k]
            elif isinstance(cur[k], (int, float)) and not isinstance(cur[k], bool):
                cur[k] = cur[k] * rng.choice([2, 1000, -1]) + rng.choice([0, 1, -1])
        except (KeyError, IndexError, TypeError):
            pass
    mutant = f"{work}/m{n}"
    shutil.rmtree(mutant, ignore_errors=True)
    shutil.copytree(plan_dir, mutant)
    text = json.dumps(d, indent=1) + "\n"
    open(mutant + "/plan.json", "w").write(text)
    sums = open(mutant + "/checksums.sha256").read().splitlines()
    sums[0] = hashlib.sha256(text.encode()).hexdigest() + "  plan.json"
    open(mutant + "/checksums.sha256", "w").write("\n".join(sums) + "\n")
    try:
        rc = subprocess.run([llm_run, mutant, "--data", data, "--steps", "1", "--quiet"],
                            capture_output=True, timeout=30).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    if rc not in (0, 1):
        bad.append((n, rc))
    else:
        shutil.rmtree(mutant)
print(f"{count} mutants, {len(bad)} crashed or hung" + (f": {bad}" if bad else ""))
