"""Every plan the llm-run-cpu planner offers lowers: for small models on odd
GPU counts and sequence lengths, each of the search's top plans, fixed
whole, goes through --llm-lower-to-plan without an error (the planner knows
every divisibility rule the lowering applies).

  plan-lowers.test.py LLM_OPT INPUTS_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys

opt, inputs, out = sys.argv[1:4]
KEYS = ("dp", "tp", "pp", "vpp", "cp", "ep", "sp", "zero", "micro_batch", "recompute",
        "schedule", "shard")
tried, failed = 0, []
for model in ("byte-llama", "byte-gpt2", "byte-mixtral"):
    for gpus in (2, 3, 4, 6, 8):
        for seq in (24, 40):
            job = (f"stack=llm-run-cpu cluster=dgx-h100 gpus={gpus} global-batch=12 "
                   f"seq-len={seq}")
            r = subprocess.run([opt, os.path.join(inputs, model + ".json"), "--hf-dtype=f32",
                                "-o", os.devnull,
                                f"--llm-auto-parallel={job} top-k=6 compare=false report=-"],
                               capture_output=True, text=True)
            if r.returncode:
                failed.append(f"{model} gpus={gpus} seq={seq}: no plan: {r.stderr[:200]}")
                continue
            for plan in json.loads(r.stdout)["plans"]:
                c = plan["config"]
                fix = ",".join(f"{k}:{int(c[k]) if isinstance(c[k], bool) else c[k]}"
                               for k in KEYS if k in c)
                tried += 1
                r2 = subprocess.run([opt, os.path.join(inputs, model + ".json"),
                                     "--hf-dtype=f32", "-o", os.devnull,
                                     f"--llm-auto-parallel={job} fix={fix} top-k=1 compare=false",
                                     f"--llm-lower-to-plan=dir={out}/plan lr=0.003"],
                                    capture_output=True, text=True)
                if r2.returncode:
                    failed.append(f"{model} gpus={gpus} seq={seq} fix={fix}: "
                                  + (r2.stderr.strip().splitlines() or [""])[0][:300])
print(f"{tried} plans lowered, {len(failed)} failed")
for f in failed:
    print("FAILED:", f)
