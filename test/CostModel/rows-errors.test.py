"""Writes rows files for rows-errors.test: the first published row with one
field changed, one file per case."""

import copy
import json
import sys
from pathlib import Path

published = json.loads(Path(sys.argv[1]).read_text())
out = Path(sys.argv[2])
row = published["rows"][0]


def write(name, rows, top=None):
    doc = {"rows": rows} if top is None else top
    (out / f"{name}.json").write_text(json.dumps(doc))


def changed(name, **fields):
    r = copy.deepcopy(row)
    for key, value in fields.items():
        if value is None:
            r.pop(key)
        else:
            r[key] = value
    write(name, [r])


changed("tp0", tp=0)
changed("pp0", pp=0)
changed("cp0", cp=0)
changed("mb0", micro_batch=0)
changed("zero-text", zero="3")
changed("zero4", zero=4)
changed("precision", precision="fp16")
changed("recompute", recompute="ful")
changed("tp-fraction", tp=1.5)
changed("sp2", sp=2)
changed("no-gpus", gpus=None)
changed("no-id", id=None)
changed("indivisible", tp=3)
changed("batch", global_batch=12)
r = copy.deepcopy(row)
r["micro_bach"] = r.pop("micro_batch")
write("misspelt", [r])
write("twice", [row, row])
write("top", None, {"rows": [row], "row": []})
# Models resolve beside the rows unless --models says where.
write("ok", [row])
