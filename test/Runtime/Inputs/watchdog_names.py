"""Checks that every watchdog report of a failed llm-run job names the stopped rank.

usage: watchdog_names.py --rank R OUTPUT.txt [OUTPUT.txt ...]
Each file is one job's output (mpirun's stdout and stderr). Every `llm-run: rank N: error:` line
of it must name rank R as the rank the others waited for: as a member that did not arrive, a rank
further along that did not answer, a rank that came late, did not run or answered late, or (rank
R's own line) as the rank that did not run or came late while the others' watchdog fired. No line may say that every rank of
the group is in the operation. Prints one summary line; exits 1 naming the first report that
fails.
"""
import argparse
import re
import sys

p = argparse.ArgumentParser()
p.add_argument("--rank", type=int, required=True)
p.add_argument("outputs", nargs="+")
args = p.parse_args()

r = str(args.rank)
others = r"(?:\d+, )*" + r + r"(?:, \d+)*"
names = [
    re.compile(r"rank\(s\) " + others + r" did not arrive"),
    re.compile(r"rank\(s\) " + others + r", which the ranks named wait for, did not answer"),
    re.compile(r"rank " + r + r" came to "),
    re.compile(r"rank " + r + r" did not run for "),
    re.compile(r"rank " + r + r" said where it waits only "),
]
own = re.compile(r"^llm-run: rank " + r + r": error: .*(: this rank did not run for |"
                 r"\(this rank was stopped, hung or slow before it\))")
report = re.compile(r"^llm-run: rank \d+: error: ")

reports = 0
for path in args.outputs:
    lines = [l for l in open(path, errors="replace").read().splitlines() if report.match(l)]
    if not lines:
        print(f"FAIL: {path}: no llm-run error")
        sys.exit(1)
    for line in lines:
        reports += 1
        if "every rank of the group is in it" in line:
            print(f"FAIL: {path}: says every rank is in it: {line}")
            sys.exit(1)
        if not own.match(line) and not any(n.search(line) for n in names):
            print(f"FAIL: {path}: does not name rank {r}: {line}")
            sys.exit(1)
print(f"rank {r} named in all {reports} reports of {len(args.outputs)} runs")
