"""Edits a checkpoint's step directory the way a person or a script could:
a Python statement on `m` (its parsed manifest.json), and/or two files
swapped (their digests in the manifest with them). The manifest's line in
checksums.sha256 is then re-sealed (unless --no-reseal), so that the
runtime's own checks, not the checksum, have to catch the change.

  ckpt_edit.py STEP_DIR 'm["loss_scale"] = 0'
  ckpt_edit.py STEP_DIR --swap rank-0.bin rank-1.bin
  ckpt_edit.py STEP_DIR --no-reseal 'm["loss_scale"] = 0'
"""

import argparse
import hashlib
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("step_dir")
parser.add_argument("statement", nargs="?", default="")
parser.add_argument("--swap", nargs=2, metavar="FILE")
parser.add_argument("--no-reseal", action="store_true")
args = parser.parse_intermixed_args()

path = os.path.join(args.step_dir, "manifest.json")
m = json.load(open(path))
if args.swap:
    a, b = (os.path.join(args.step_dir, f) for f in args.swap)
    os.rename(a, a + ".swap")
    os.rename(b, a)
    os.rename(a + ".swap", b)
    fa, fb = args.swap
    m["files"][fa], m["files"][fb] = m["files"][fb], m["files"][fa]
if args.statement:
    exec(args.statement, {"m": m})
text = json.dumps(m, indent=2) + "\n"
open(path, "w").write(text)
if not args.no_reseal:
    sums_path = os.path.join(args.step_dir, "checksums.sha256")
    lines = [l for l in open(sums_path).read().splitlines() if not l.endswith("  manifest.json")]
    lines.append(hashlib.sha256(text.encode()).hexdigest() + "  manifest.json")
    open(sums_path, "w").write("\n".join(lines) + "\n")
