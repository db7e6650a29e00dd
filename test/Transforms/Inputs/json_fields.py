"""Checks fields of a JSON document on stdin, addressed by dotted paths.

usage: json_fields.py PATH=VALUE ...   (plans.0.config.tp=1, stack.name=megatron)
A path step that is a number indexes a list. Values compare as numbers when
both parse as numbers, else as strings. Prints "ok" when every field matches;
otherwise names each field that is missing or different and exits 1.
"""
import json
import sys


def lookup(doc, path):
    for step in path.split("."):
        if isinstance(doc, list):
            doc = doc[int(step)]
        else:
            doc = doc[step]
    return doc


def same(got, want):
    try:
        return float(got) == float(want)
    except (TypeError, ValueError):
        return str(got) == want


def main() -> int:
    doc = json.load(sys.stdin)
    bad = 0
    for arg in sys.argv[1:]:
        path, _, want = arg.partition("=")
        try:
            got = lookup(doc, path)
        except (KeyError, IndexError, ValueError):
            print(f"FAIL {path}: missing")
            bad += 1
            continue
        if not same(got, want):
            print(f"FAIL {path}: got {got!r}, expected {want}")
            bad += 1
    if not bad:
        print("ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
