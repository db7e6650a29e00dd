"""Edits a plan directory's plan.json with a Python statement on `d` (the
parsed JSON) and re-signs it, so that the runtime's own validation, not the
checksum, has to catch the change.

  tamper.py PLAN_DIR 'd["programs"][0]["chunks"][0]["begin"] = 10**6'
"""

import hashlib
import json
import sys

plan_dir, statement = sys.argv[1], sys.argv[2]
path = plan_dir + "/plan.json"
d = json.load(open(path))
exec(statement, {"d": d})
text = json.dumps(d, indent=1) + "\n"
open(path, "w").write(text)
sums = open(plan_dir + "/checksums.sha256").read().splitlines()
sums[0] = hashlib.sha256(text.encode()).hexdigest() + "  plan.json"
open(plan_dir + "/checksums.sha256", "w").write("\n".join(sums) + "\n")
