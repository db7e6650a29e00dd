"""Checks a plan.json's structure and prints a summary (exits 1 on a problem)."""
import json
import sys

plan = json.load(open(sys.argv[1]))
assert plan["format"] == "llm-opt-plan" and plan["version"] == 1
mesh = plan["mesh"]
params = {p["name"]: p for p in plan["params"]}
print(f"llm-opt-plan v{plan['version']}, world {plan['world_size']}, mesh "
      + " ".join(f"{k}{mesh[k]}" for k in ("dp", "tp", "pp", "cp", "ep"))
      + f", {len(plan['inputs'])} inputs, {len(params)} params")
for prog in plan["programs"]:
    arena = prog["arena_bytes"]
    sizes = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8}
    collectives = []
    for n, ins in enumerate(prog["instructions"]):
        bufs = ins.get("ins", []) + ins.get("outs", []) + ins.get("buffers", [])
        for b in bufs:
            size = sizes[b["dtype"]]
            for d in b["shape"]:
                size *= d
            if b["space"] == "arena":
                assert 0 <= b["offset"] and b["offset"] + size <= arena, (n, b)
            elif b["space"] == "state":
                assert b["name"] in params, b["name"]
                assert params[b["name"]]["shape"] == b["shape"], b
        if "collective" in ins:
            collectives.append((n, ins))
        if ins.get("kernel") == "adamw":
            assert ins["params"]["param"] in params
    print(f"program {prog['name']} ranks {prog['ranks']}: {len(prog['instructions'])} "
          "instructions, every arena buffer inside {} bytes, every state buffer a parameter"
          .format(arena))
    kernels = [i.get("kernel") for i in prog["instructions"]]
    if collectives:
        first, last = collectives[0][0], collectives[-1][0]
        assert kernels[first + 1] == "global_norm"
        assert kernels[last - 1] == "adamw" and last == len(kernels) - 1
        print("all_reduce dp avg before global_norm and after the last adamw")
