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
    instructions = prog["micro_batch_instructions"] + prog["step_instructions"]
    for n, ins in enumerate(instructions):
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
            elif b["space"] == "accum":
                name = b["name"]
                assert name == "loss" or params[name[len("grad:"):]]["shape"] == b["shape"], b
        if "collective" in ins:
            collectives.append((n, ins))
        if ins.get("kernel") == "adamw":
            assert ins["params"]["param"] in params
    print(f"program {prog['name']} ranks {prog['ranks']}, {prog['num_micro_batches']} "
          f"micro-batches: {len(instructions)} instructions, every arena buffer inside "
          f"{arena} bytes, every state buffer a parameter")
    step = prog["step_instructions"]
    kernels = [i.get("kernel") for i in step]
    if collectives:
        # Gradient buckets start in the micro-batch phase; the step waits for
        # them, all-reduces the rest, then takes the norm.
        started = {i["bucket"]: i for _, i in collectives
                   if i["collective"] == "bucket_all_reduce"}
        norm = kernels.index("global_norm")
        assert kernels[-1] == "adamw"
        reduced = set()
        for i in step[:norm]:
            if i.get("collective") == "all_reduce":
                reduced |= {b["name"] for b in i["buffers"]}
            elif i.get("collective") == "bucket_wait":
                reduced |= {b["name"] for b in started.pop(i["bucket"])["buffers"]}
        assert not started, "a bucket is never waited for"
        assert reduced == {b["name"] for i in step if i.get("kernel") == "adamw" for b in i["ins"][:1]} | {"loss"}
        print("all_reduce dp avg of every gradient and the loss, before global_norm")
