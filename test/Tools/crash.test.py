"""Runs TOOL INPUT with LLMOPT_TEST_CRASH=HOW and says how and how fast it ended."""
import os
import subprocess
import sys
import time

tool, model, how = sys.argv[1:4]
env = dict(os.environ, LLMOPT_TEST_CRASH=how)
start = time.time()
try:
    r = subprocess.run([tool, model, "-o", os.devnull], env=env, capture_output=True,
                       text=True, timeout=120)
except subprocess.TimeoutExpired:
    print(f"{how}: still running after 120 s")
    sys.exit(1)
took = time.time() - start
if r.returncode >= 0:
    print(f"{how}: exited with status {r.returncode} after {took:.1f} s")
elif "Stack dump" not in r.stderr:
    print(f"{how}: no stack dump: {r.stderr[-500:]}")
else:
    print(f"{how}: ended by signal {-r.returncode} within {'30' if took < 30 else 'more than 30'} s")
