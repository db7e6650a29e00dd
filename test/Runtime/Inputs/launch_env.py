"""Starts N copies of a command the way torchrun does: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT (a free port) in the environment.
Waits for all of them (at most --timeout seconds; after a rank fails, the
others at most --grace seconds more), prints their stderr, and exits non-zero
if any failed or the time ran out.

  launch_env.py -n 2 [--timeout 60] [--env RANK:NAME=VALUE] -- llm-run PLAN ...
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

parser = argparse.ArgumentParser()
parser.add_argument("-n", type=int, required=True)
parser.add_argument("--timeout", type=float, default=60)
parser.add_argument("--grace", type=float, default=10,
                    help="seconds the other ranks get after one fails")
parser.add_argument("--env", action="append", default=[],
                    help="RANK:NAME=VALUE, an extra variable for one rank")
parser.add_argument("cmd", nargs=argparse.REMAINDER)
args = parser.parse_args()
cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]

procs, logs = [], []
for r in range(args.n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.n),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    for e in args.env:
        rank, assign = e.split(":", 1)
        if int(rank) == r:
            name, value = assign.split("=", 1)
            env[name] = value
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"):
        env.pop(name, None)
    # stderr into a file (a pipe read only at the end could fill and block).
    logs.append(tempfile.TemporaryFile(mode="w+"))
    procs.append(subprocess.Popen(cmd, env=env, stderr=logs[-1], text=True))

deadline = time.time() + args.timeout
# As torchrun's agent: once a rank fails, the others get a few seconds to
# report (their own errors name what they saw) and are then ended.
failed_at = None
codes = [None] * args.n
while None in codes:
    for r, p in enumerate(procs):
        if codes[r] is None and p.poll() is not None:
            codes[r] = p.returncode
            if p.returncode != 0 and failed_at is None:
                failed_at = time.time()
    now = time.time()
    if now > deadline or (failed_at is not None and now > failed_at + args.grace):
        for r, p in enumerate(procs):
            if codes[r] is None:
                p.kill()
                p.wait()
                codes[r] = "killed"
                if failed_at is None:
                    print(f"launch_env: rank {r} still running after {args.timeout} s",
                          file=sys.stderr)
        break
    time.sleep(0.02)
for log in logs:
    log.seek(0)
    sys.stderr.write(log.read())
if failed_at is None and "killed" in codes:
    sys.exit(2)
sys.exit(1 if any(c != 0 for c in codes) else 0)
