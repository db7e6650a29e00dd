"""Checks numeric fields of a JSON document on stdin against expected values.

usage: expect_json.py KEY=VALUE[~REL_TOL] ...   (default tolerance 0.005)
Exits non-zero, naming the field, when one is missing or off by more than the
tolerance.
"""
import json
import sys


def main() -> int:
    doc = json.load(sys.stdin)
    failures = 0
    for arg in sys.argv[1:]:
        key, _, spec = arg.partition("=")
        value, _, tol = spec.partition("~")
        expected = float(value)
        tolerance = float(tol) if tol else 0.005
        if key not in doc:
            print(f"FAIL {key}: missing")
            failures += 1
            continue
        got = float(doc[key])
        rel = abs(got - expected) / abs(expected) if expected else abs(got)
        status = "ok  " if rel <= tolerance else "FAIL"
        failures += rel > tolerance
        print(f"{status} {key}: got {got:.6g}, expected {expected:.6g} "
              f"(off {rel:.3%}, tolerance {tolerance:.3%})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
