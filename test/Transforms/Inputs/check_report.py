"""Checks an --llm-auto-parallel JSON report (a path, or - for stdin).

usage: check_report.py REPORT [key=value ...]
Prints what it verified; exits non-zero naming the first problem. Extra
key=value arguments must hold in every plan's config.
"""
import json
import sys

CONFIG_KEYS = {"dp", "tp", "pp", "vpp", "cp", "ep", "sp", "zero", "recompute",
               "micro_batch", "num_micro_batches", "schedule"}
PLAN_KEYS = {"config", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu",
             "peak_memory_bytes", "memory_breakdown", "memory_by_stage",
             "time_breakdown", "equivalents"}
# What tells two rows apart; equivalents differ only in the rest (vpp,
# schedule, placement, stage_layers).
FAMILY_KEYS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero", "offload_optimizer",
               "recompute", "stage_recompute", "micro_batch", "num_micro_batches")


def family(config: dict) -> tuple:
    return tuple(json.dumps(config[k]) for k in FAMILY_KEYS)


def fail(msg: str) -> None:
    print("FAIL " + msg)
    sys.exit(1)


def main() -> None:
    src = sys.stdin if sys.argv[1] == "-" else open(sys.argv[1])
    report = json.load(src)
    plans = report["plans"]
    if not plans:
        fail("no plans")
    tie = report["ranking"]["tie_tolerance"]
    same = report["ranking"]["equivalent_tolerance"]
    families = set()
    for i, p in enumerate(plans):
        missing = PLAN_KEYS - p.keys()
        if missing:
            fail(f"plan {i} lacks {sorted(missing)}")
        missing = CONFIG_KEYS - p["config"].keys()
        if missing:
            fail(f"plan {i} config lacks {sorted(missing)}")
        c = p["config"]
        gpus = report["cluster"]["gpus_per_node"] * report["cluster"]["nodes"]
        if c["dp"] * c["tp"] * c["pp"] * c["cp"] != gpus:
            fail(f"plan {i} uses {c['dp'] * c['tp'] * c['pp'] * c['cp']} of {gpus} GPUs")
        if not 0 < p["mfu"] < 1:
            fail(f"plan {i} has MFU {p['mfu']}")
        if p["peak_memory_bytes"] > report["cluster"]["gpu"]["hbm_gib"] * 2**30:
            fail(f"plan {i} does not fit in memory")
        t = p["time_breakdown"]
        total = (t["compute"] + t["recompute"] + t["bubble"] + t["optimizer"] +
                 sum(t["exposed_communication"].values()))
        if abs(total - p["step_time_s"]) > 1e-6 * p["step_time_s"]:
            fail(f"plan {i} breakdown adds to {total}, step is {p['step_time_s']}")
        if i and plans[i - 1]["step_time_s"] > p["step_time_s"] * (1 + tie):
            fail(f"plan {i} is faster than plan {i - 1}")
        if family(c) in families:
            fail(f"plan {i} repeats an earlier row with another pipeline layout")
        families.add(family(c))
        for e in p["equivalents"]:
            if family(e["config"]) != family(c):
                fail(f"plan {i} lists a different plan as its equivalent")
            if not (p["step_time_s"] * (1 - tie) <= e["step_time_s"] <=
                    p["step_time_s"] * (1 + same)):
                fail(f"plan {i} lists an equivalent at {e['step_time_s']} s")
        tokens = report["job"]["global_batch"] * report["job"]["seq_len"]
        if abs(p["tokens_per_s"] * p["step_time_s"] - tokens) > 1e-6 * tokens:
            fail(f"plan {i} tokens/s does not match the step time")
    print(f"plans {len(plans)}, sorted, complete")
    fixed = [a.split("=", 1) for a in sys.argv[2:]]
    for key, value in fixed:
        for i, p in enumerate(plans):
            for c in [p["config"]] + [e["config"] for e in p["equivalents"]]:
                if str(c[key]) != value:
                    fail(f"plan {i} has {key}={c[key]}, fixed {value}")
    if fixed:
        print("fixed " + " ".join(f"{k}={v}" for k, v in fixed) + " hold")
    print("rejected: " + " ".join(sorted(report["rejected"])))


if __name__ == "__main__":
    main()
