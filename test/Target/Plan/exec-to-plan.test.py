"""Keeps the exec part of an IR dump after convert-llm-to-exec: drops the dump's
header line, the module's attributes, every func.func (the llm functions) and
the llm.grid (the mesh the llm parallel ops name).

usage: exec-to-plan.test.py DUMP.mlir OUT.mlir
"""
import sys

lines = open(sys.argv[1]).read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("module"))
out, skipping, funcs = ["module {"], False, 0
for line in lines[start + 1:]:
    if line.startswith("  func.func") or line.startswith("  llm.grid"):
        skipping, funcs = True, funcs + line.startswith("  func.func")
        continue
    if skipping:
        if line == "  }":
            skipping = False
        continue
    out.append(line)
open(sys.argv[2], "w").write("\n".join(out))
text = "\n".join(out)
print("kept exec.plan, %d exec.param, %d exec.program; cut %d llm functions"
      % (text.count("exec.param "), text.count("exec.program "), funcs))
