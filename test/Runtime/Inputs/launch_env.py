"""Starts N copies of a command the way torchrun does: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT (a free port) in the environment.
Waits for all of them (at most --timeout seconds), prints their stderr, and
exits non-zero if any failed or the time ran out.

  launch_env.py -n 2 [--timeout 60] [--env RANK:NAME=VALUE] -- llm-run PLAN ...
"""

import argparse
import os
import socket
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("-n", type=int, required=True)
parser.add_argument("--timeout", type=float, default=60)
parser.add_argument("--env", action="append", default=[],
                    help="RANK:NAME=VALUE, an extra variable for one rank")
parser.add_argument("cmd", nargs=argparse.REMAINDER)
args = parser.parse_args()
cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]

procs = []
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
    procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))

deadline = time.time() + args.timeout
failed = False
for r, p in enumerate(procs):
    try:
        _, err = p.communicate(timeout=max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        for q in procs:
            q.kill()
        print(f"launch_env: rank {r} still running after {args.timeout} s", file=sys.stderr)
        sys.exit(2)
    sys.stderr.write(err)
    failed |= p.returncode != 0
sys.exit(1 if failed else 0)
