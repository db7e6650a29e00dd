"""The ecosystem tier: llm-opt's exports loaded by the trainers' own code.

For a matrix of plans (data parallel with ZeRO-1/2/3 and offload, hybrid
sharding, TP + SP, PP with uneven and interleaved stages, CP, EP, fp8,
recomputation), llm-opt plans for each stack and exports; check_export.py
then loads the export with Megatron-Core's configs, DeepSpeed's config and
engine, or torchtitan's job config, meshes and pipeline builder, over a fake
world of the plan's size, and compares what the trainer set up with the plan.

Run by ctest (`ecosystem`) in the virtual environment that
`scripts/common.sh install_ecosystem` builds from requirements.txt.
"""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(ROOT, "examples", "models")
LLM_OPT = os.environ.get("LLMOPT_OPT", os.path.join(ROOT, "build", "bin", "llm-opt"))
CHECK = os.path.join(HERE, "check_export.py")

# (id, stack, model, gpus, global batch, sequence, fix=, extra options)
CASES = [
    # Megatron-LM
    ("megatron-dp8-zero1", "megatron", "llama3-8b", 8, 64, 8192, "dp:8,tp:1,pp:1,cp:1,zero:1", ""),
    ("megatron-tp2-pp2-uneven-cp2", "megatron", "llama3-8b", 16, 64, 8192, "tp:2,pp:2", ""),
    ("megatron-interleaved", "megatron", "llama3-70b", 64, 512, 8192,
     "dp:2,tp:8,pp:4,vpp:5,sp:1,zero:1,recompute:selective,micro_batch:1", ""),
    ("megatron-fsdp-zero3", "megatron", "llama3-8b", 16, 64, 8192, "zero:3,tp:1,pp:1,cp:1", ""),
    ("megatron-fsdp-zero2", "megatron", "llama3-8b", 16, 64, 8192, "zero:2,tp:1,pp:1,cp:1", ""),
    ("megatron-offload", "megatron", "llama3-8b", 8, 64, 8192, "zero:1,offload:1,tp:1,pp:1", ""),
    ("megatron-hsdp", "megatron", "llama3-8b", 32, 64, 4096, "zero:1,shard:8,tp:1,pp:1,cp:1", ""),
    ("megatron-fp8-tp2", "megatron", "llama3-8b", 16, 64, 8192, "tp:2,pp:1", "fp8=true"),
    ("megatron-full-recompute-fp32-grads", "megatron", "llama3-70b", 64, 512, 8192,
     "tp:8,pp:2,recompute:full", "grad-dtype=fp32"),
    ("megatron-partial-recompute", "megatron", "llama3-70b", 64, 512, 8192,
     "tp:8,pp:4,vpp:1,recompute_layers:2", ""),
    ("megatron-moe-ep8", "megatron", "mixtral-8x7b", 64, 256, 4096, "ep:8", ""),
    # Model settings Megatron must be told: a sliding window and a head dim
    # (Mistral), q/k/v biases (Qwen2); experts kept whole over tp where the
    # expert group takes tensor-parallel ranks (expert tp 1); pipeline stages
    # inside data parallelism (--use-tp-pp-dp-mapping).
    ("megatron-mistral-window", "megatron", "mistral-7b", 16, 64, 8192, "tp:2,pp:2", ""),
    ("megatron-qwen2-qkv-bias", "megatron", "qwen2-7b", 16, 64, 4096, "tp:4,pp:1,cp:1", ""),
    # A head dim that is not hidden / heads (--kv-channels).
    ("megatron-head-dim", "megatron", "mistral-nemo-12b", 16, 64, 4096, "tp:2,pp:2", ""),
    ("megatron-moe-experts-whole", "megatron", "mixtral-8x7b", 16, 64, 4096,
     "tp:4,pp:1,cp:1,ep:8", ""),
    ("megatron-pp-inside-dp", "megatron", "llama3-8b", 16, 64, 4096,
     "tp:2,pp:2,cp:1,placement:tp-cp-pp-dp", ""),
    # DeepSpeed
    ("deepspeed-zero1", "deepspeed", "llama3-8b", 16, 64, 4096, "zero:1,tp:1,cp:1", ""),
    ("deepspeed-zero2-offload", "deepspeed", "llama3-8b", 16, 64, 4096,
     "zero:2,offload:1,tp:1,cp:1", ""),
    ("deepspeed-zero3-ulysses", "deepspeed", "llama3-8b", 16, 64, 8192,
     "zero:3,micro_batch:2,cp:2", ""),
    ("deepspeed-autotp", "deepspeed", "llama3-8b", 16, 64, 4096, "zero:1,tp:2,cp:1", ""),
    ("deepspeed-full-recompute", "deepspeed", "llama3-70b", 32, 64, 4096,
     "zero:3,recompute:full", ""),
    # torchtitan
    ("torchtitan-fsdp", "torchtitan", "llama3.1-8b", 16, 64, 8192, "zero:3,tp:1,pp:1,cp:1", ""),
    ("torchtitan-hsdp-cp2", "torchtitan", "llama3.1-8b", 32, 64, 4096, "zero:3,shard:8,cp:2,tp:1,pp:1", ""),
    ("torchtitan-asynctp", "torchtitan:asynctp", "llama3.1-8b", 16, 64, 8192, "tp:2,pp:1", ""),
    ("torchtitan-pp-1f1b", "torchtitan", "llama3.1-8b", 16, 64, 8192,
     "tp:2,pp:2,vpp:1,schedule:1f1b", ""),
    ("torchtitan-interleaved", "torchtitan", "llama3.1-70b", 64, 512, 8192,
     "tp:8,pp:4,vpp:5,micro_batch:1", ""),
    ("torchtitan-selective", "torchtitan", "llama3.1-8b", 8, 32, 8192,
     "tp:1,pp:1,recompute:selective", ""),
    # torchtitan 0.3 (what pip installs), its command line.
    ("torchtitan3-fsdp", "torchtitan@0.3", "llama3.1-8b", 16, 64, 8192,
     "zero:3,tp:1,pp:1,cp:1", ""),
    ("torchtitan3-hsdp-cp2", "torchtitan@0.3", "llama3.1-8b", 32, 64, 4096,
     "zero:3,shard:8,cp:2,tp:1,pp:1", ""),
    ("torchtitan3-tp2", "torchtitan@0.3", "llama3.1-8b", 16, 64, 8192, "tp:2,pp:1,cp:1", ""),
    ("torchtitan3-asynctp-full", "torchtitan:asynctp@0.3", "llama3.1-70b", 64, 512, 8192,
     "tp:8,pp:1,cp:1,recompute:full,micro_batch:1", ""),
    ("torchtitan3-selective", "torchtitan@0.3", "llama3.1-8b", 8, 32, 8192,
     "tp:1,pp:1,recompute:selective", ""),
]

# Plans the tier was not written for: each stack's free-search pick for
# models of each kind (dense, GQA, sliding window, biases, MoE) from 8 to
# 2048 GPUs. A pick the trainer cannot run as planned is a defect of the
# search (the stack's rules) or of the export.
FREE = [
    ("megatron", "llama3-8b", 8, 64, 8192),
    ("megatron", "mistral-7b", 64, 256, 8192),
    ("megatron", "qwen2-7b", 512, 1024, 4096),
    ("megatron", "mixtral-8x7b", 2048, 4096, 4096),
    ("megatron", "llama3.1-70b", 256, 512, 8192),
    ("deepspeed", "llama3-8b", 8, 64, 4096),
    ("deepspeed", "mistral-7b", 64, 256, 4096),
    ("deepspeed", "qwen2-7b", 16, 64, 4096),
    ("deepspeed", "llama3.1-70b", 64, 128, 4096),
    ("torchtitan", "llama3.1-8b", 8, 64, 8192),
    ("torchtitan", "llama3.1-70b", 512, 1024, 8192),
    ("torchtitan", "llama3.1-8b", 2048, 4096, 8192),
]
CASES += [(f"free-{stack}-{model}-{gpus}", stack, model, gpus, batch, seq, "", "")
          for stack, model, gpus, batch, seq in FREE]

# A stack's export format; "@0.3" picks torchtitan 0.3's command line over
# 0.2's TOML.
FORMAT = {"megatron": "megatron", "deepspeed": "deepspeed", "torchtitan": "torchtitan-0.2"}
TITAN_PYTHON = os.environ.get("LLMOPT_TITAN_PYTHON")


def format_of(stack):
    return "torchtitan" if stack.endswith("@0.3") else FORMAT[stack.split(":")[0]]


def plan(tmp, stack, model, gpus, batch, seq, fix, extra):
    fmt = format_of(stack)
    stack = stack.split("@")[0]
    export = os.path.join(tmp, "export." + {"deepspeed": "json", "torchtitan-0.2": "toml"}.get(fmt, "txt"))
    report = os.path.join(tmp, "report.json")
    opts = (f"stack={stack} cluster=dgx-h100 gpus={gpus} global-batch={batch} seq-len={seq} "
            f"{'fix=' + fix if fix else ''} top-k=1 compare=false report={report} export={fmt} "
            f"export-file={export} {extra}")
    r = subprocess.run([LLM_OPT, os.path.join(MODELS, model + ".json"), "-o", os.devnull,
                        "--llm-auto-parallel=" + opts.strip()],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return fmt, export, report


def run_check(fmt, export, report, model):
    python = TITAN_PYTHON if fmt == "torchtitan" else sys.executable
    r = subprocess.run([python, CHECK, fmt, export, report,
                        os.path.join(MODELS, model + ".json")],
                       capture_output=True, text=True, timeout=900)
    last = (r.stdout.strip().splitlines() or [""])[-1]
    return r.returncode, last, r.stderr


# The checks take seconds each (the trainers' imports): before the first test
# asks for one, every selected case's and tamper's check runs concurrently,
# keyed by exactly what it checks (the export's and the report's text); a
# test then gets the result of the same inputs, or runs the check itself.
SELECTED = []
_CHECKS = None


def _key(fmt, export, report, model):
    with open(export) as f, open(report) as g:
        return fmt, f.read(), g.read(), model


def _prefetch():
    import concurrent.futures
    import tempfile

    root = tempfile.mkdtemp(prefix="llmopt-ecosystem-")
    jobs = []
    names = set(SELECTED)
    for c in CASES:
        if f"test_export_runs_as_planned[{c[0]}]" in names:
            jobs.append((c, None))
    for t in TAMPER:
        if f"test_checker_refuses_a_tampered_export[{t[0]}]" in names:
            jobs.append((next(c for c in CASES if c[0] == t[1]), t[2]))
    inputs = []
    for i, (case, edit) in enumerate(jobs):
        _, stack, model, gpus, batch, seq, fix, extra = case
        tmp = os.path.join(root, str(i))
        os.makedirs(tmp)
        try:
            fmt, export, report = plan(tmp, stack, model, gpus, batch, seq, fix, extra)
        except AssertionError:
            continue  # the test reports it
        if fmt == "torchtitan" and not TITAN_PYTHON:
            continue
        if edit:
            with open(export) as f:
                text = f.read()
            with open(export, "w") as f:
                f.write(edit(text))
        inputs.append((fmt, export, report, model))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {_key(*i): pool.submit(run_check, *i) for i in inputs}
        return {k: f.result() for k, f in futures.items()}


def check(fmt, export, report, model):
    global _CHECKS
    if fmt == "torchtitan" and not TITAN_PYTHON:
        pytest.skip("no torchtitan 0.3 environment (scripts/test.sh installs it)")
    if _CHECKS is None:
        _CHECKS = _prefetch()
    done = _CHECKS.get(_key(fmt, export, report, model))
    return done if done is not None else run_check(fmt, export, report, model)


# What each passing case's checker compared, and each refusal's words: the
# table in docs/planner.md is made from them (test_docs_table_is_the_checkers).
CHECKED = {}
REFUSALS_SEEN = {}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_export_runs_as_planned(case, tmp_path):
    _, stack, model, gpus, batch, seq, fix, extra = case
    fmt, export, report = plan(str(tmp_path), stack, model, gpus, batch, seq, fix, extra)
    code, last, err = check(fmt, export, report, model)
    assert code == 0, f"{last}\n{err[-3000:]}"
    got = json.loads(last)
    CHECKED[case[0]] = (fmt, got["compared"])
    with open(report) as f:
        config = json.load(f)["plans"][0]["config"]
    # The read-back names the layout the plan has (check_export.py compares
    # every field; these make the result visible in the test log).
    for key in ("tp", "pp", "cp"):
        if key in got:
            assert got[key] == config[key], key


def without_fqns(toml, instead=""):
    start = toml.index("module_fqns_per_model_part")
    return toml[:start] + instead + toml[toml.index("]\n]\n", start) + 4:]


# The checker can fail: exports tampered with after planning are refused by
# the trainer's own code or read back as another layout than the plan's.
TAMPER = [
    ("megatron-tp-changed", "megatron-tp2-pp2-uneven-cp2",
     lambda t: t.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 4"),
     "MISMATCH"),
    ("megatron-heads-not-divisible", "megatron-tp2-pp2-uneven-cp2",
     lambda t: t.replace("--num-attention-heads 32", "--num-attention-heads 31"),
     "REFUSED by Megatron-Core"),
    ("megatron-unknown-flag", "megatron-dp8-zero1",
     lambda t: t.replace("--bf16", "--bf16 --use-torch-fsdp3"), "not a Megatron-LM argument"),
    ("megatron-offload-alone", "megatron-offload",
     lambda t: t.replace(" --use-precision-aware-optimizer", ""),
     "--optimizer-cpu-offload needs --use-precision-aware-optimizer"),
    # A model setting dropped: Megatron then builds another model.
    ("megatron-window-dropped", "megatron-mistral-window",
     lambda t: t.replace(" --window-size 4095,0", ""), "MISMATCH: model: window"),
    ("megatron-qkv-bias-dropped", "megatron-qwen2-qkv-bias",
     lambda t: t.replace(" --add-qkv-bias", ""), "MISMATCH: model: qkv_bias"),
    ("megatron-eps-changed", "megatron-qwen2-qkv-bias",
     lambda t: t.replace("--norm-epsilon 1e-06", "--norm-epsilon 1e-05"),
     "MISMATCH: model: norm_eps"),
    ("megatron-kv-channels-dropped", "megatron-head-dim",
     lambda t: t.replace(" --kv-channels 128", ""), "MISMATCH: model: head_dim"),
    ("megatron-expert-tp-dropped", "megatron-moe-experts-whole",
     lambda t: t.replace(" --expert-tensor-parallel-size 1", ""), "MISMATCH: expert tensor parallel"),
    ("megatron-mapping-dropped", "megatron-pp-inside-dp",
     lambda t: t.replace(" --use-tp-pp-dp-mapping", ""), "MISMATCH: dp rank groups"),
    # Recomputation that configure refuses, or none where the plan has it.
    ("deepspeed-contiguous", "deepspeed-full-recompute",
     lambda t: t.replace('"contiguous_memory_optimization": false',
                         '"contiguous_memory_optimization": true'),
     "REFUSED by deepspeed.checkpointing.configure"),
    ("deepspeed-no-recompute", "deepspeed-full-recompute",
     lambda t: re.sub(r'"activation_checkpointing": \{[^}]*\},?', "", t),
     "MISMATCH: layer forwards"),
    ("torchtitan-no-compile", "torchtitan-selective",
     lambda t: t.replace("enable = true", "enable = false"), "MISMATCH: torch.compile"),
    ("deepspeed-mics", "deepspeed-zero3-ulysses",
     lambda t: t.replace('"stage": 3', '"stage": 3, "mics_shard_size": 8'),
     "REFUSED by DeepSpeedConfig"),
    ("deepspeed-batch", "deepspeed-zero1",
     lambda t: re.sub(r'"gradient_accumulation_steps": (\d+)',
                      lambda m: f'"gradient_accumulation_steps": {int(m.group(1)) + 1}', t),
     "REFUSED by DeepSpeedConfig"),
    # torchtitan's own split counts the embedding and the output as a layer
    # each: it cannot cut Llama 3 70B into 4 x 5 stages of 4 layers, and it
    # cuts 8B's two stages other than the plan's.
    ("torchtitan3-no-compile", "torchtitan3-selective",
     lambda t: t.replace("--compile.enable ", ""), "MISMATCH: torch.compile"),
    ("torchtitan3-degrees", "torchtitan3-fsdp",
     lambda t: re.sub(r"data_parallel_shard_degree (\d+)",
                      lambda m: f"data_parallel_shard_degree {int(m.group(1)) // 2}", t),
     "REFUSED by torchtitan"),
    ("torchtitan3-unknown-flag", "torchtitan3-tp2",
     lambda t: t.replace("--compile.enable", "--compile.enable --parallelism.disable_loss_parallel"),
     "REFUSED by torchtitan's command line"),
    ("torchtitan-own-split", "torchtitan-interleaved",
     lambda t: without_fqns(t, "pipeline_parallel_layers_per_stage = 4\n"),
     "REFUSED by torchtitan's pipeline"),
    ("torchtitan-default-split", "torchtitan-pp-1f1b", lambda t: without_fqns(t),
     "MISMATCH: layers per pipeline rank"),
    ("torchtitan-degrees", "torchtitan-fsdp",
     lambda t: re.sub(r"data_parallel_shard_degree = (\d+)",
                      lambda m: f"data_parallel_shard_degree = {int(m.group(1)) // 2}", t),
     "REFUSED by torchtitan"),
]


@pytest.mark.parametrize("tamper", TAMPER, ids=[t[0] for t in TAMPER])
def test_checker_refuses_a_tampered_export(tamper, tmp_path):
    _, base, edit, expected = tamper
    case = next(c for c in CASES if c[0] == base)
    _, stack, model, gpus, batch, seq, fix, extra = case
    fmt, export, report = plan(str(tmp_path), stack, model, gpus, batch, seq, fix, extra)
    with open(export) as f:
        text = f.read()
    changed = edit(text)
    assert changed != text, "the tamper did not apply"
    with open(export, "w") as f:
        f.write(changed)
    code, last, err = check(fmt, export, report, model)
    assert code == 1, last
    assert expected in last, f"{last}\n{err[-2000:]}"


# What the exporter refuses by name (nothing written): a setting the trainer
# cannot carry. (id, stack, model, gpus, batch, seq, fix, extra, words)
REFUSALS = [
    ("megatron-gelu-tanh", "megatron", "gpt2-124m", 8, 64, 1024, "", "",
     "GeLU's tanh approximation"),
    ("megatron-rope-factor", "megatron", "llama3.2-1b", 8, 64, 8192, "", "",
     "Llama 3 rope scaling with factor 32.00"),
    ("deepspeed-pipeline", "deepspeed", "llama3-8b", 16, 64, 8192, "pp:2", "",
     "pipeline parallelism"),
    ("deepspeed-experts", "deepspeed", "mixtral-8x7b", 64, 256, 4096, "ep:8", "",
     "expert parallelism"),
    ("torchtitan-llama3-rope", "torchtitan", "llama3-8b", 16, 64, 8192, "", "",
     "rotary embedding"),
    ("torchtitan-no-flavor", "torchtitan", "mistral-7b", 16, 64, 4096, "", "",
     "torchtitan trains the Llama 3.1 flavors"),
    ("torchtitan-fp8", "torchtitan", "llama3.1-8b", 16, 64, 8192, "", "fp8=true", "fp8 GEMMs"),
    ("torchtitan3-pipeline", "torchtitan@0.3", "llama3.1-8b", 16, 64, 8192,
     "tp:2,pp:2,cp:1", "", "pipeline parallelism"),
    ("torchtitan3-405b", "torchtitan@0.3", "llama3.1-405b", 512, 512, 8192,
     "tp:8,pp:1", "", "converts its linears to float8"),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_exporter_refuses_by_name(refusal, tmp_path):
    rid, stack, model, gpus, batch, seq, fix, extra, words = refusal
    export = tmp_path / "export"
    fmt = format_of(stack)
    stack = stack.split("@")[0]
    opts = (f"stack={stack} cluster=dgx-h100 gpus={gpus} global-batch={batch} seq-len={seq} "
            f"{'fix=' + fix if fix else ''} top-k=1 compare=false export={fmt} "
            f"export-file={export} {extra}")
    r = subprocess.run([LLM_OPT, os.path.join(MODELS, model + ".json"), "-o", os.devnull,
                        "--llm-auto-parallel=" + opts.strip()], capture_output=True, text=True)
    assert r.returncode != 0 and not export.exists(), r.stderr
    line = next(x for x in r.stderr.splitlines() if "export:" in x)
    assert words in line and "cannot run it as planned" in line, line
    what = line.split("export: ", 1)[1].rsplit("; ", 1)[0]
    REFUSALS_SEEN[rid] = (fmt, model, what)


TRAINERS = {
    "megatron": "Megatron-LM pretrain_gpt.py (Megatron-Core 0.16.1)",
    "deepspeed": "DeepSpeed 0.19.8 ds_config",
    "torchtitan": "torchtitan 0.3.0 command line (PyTorch 2.14)",
    "torchtitan-0.2": "torchtitan 0.2.2 job config TOML",
}


def docs_table():
    """The export table of docs/planner.md, from this run's results."""
    out = ["| trainer | plans checked | fields the trainer built and the checker compared "
           "| refused by the exporter (examples run) |", "|---|---|---|---|"]
    for fmt, title in TRAINERS.items():
        cases = [c for c, (f, _) in CHECKED.items() if f == fmt]
        fields = sorted(set().union(*(set(CHECKED[c][1]) for c in cases)))
        refused = [f"{model}: {what}" for stack, model, what in
                   (REFUSALS_SEEN[r[0]] for r in REFUSALS) if stack == fmt]
        out.append(f"| {title} | {len(cases)} | {', '.join(fields)} | "
                   f"{'; '.join(refused)} |")
    return "\n".join(out) + "\n"


BEGIN, END = "<!-- export-table: begin", "<!-- export-table: end -->"


def test_docs_table_is_the_checkers():
    """docs/planner.md's table is this tier's results (LLMOPT_UPDATE_DOCS=1
    rewrites it); skipped when the run did not include every case."""
    if len(CHECKED) != len(CASES) or len(REFUSALS_SEEN) != len(REFUSALS):
        pytest.skip("not every case ran (a -k selection or a failure)")
    path = os.path.join(ROOT, "docs", "planner.md")
    with open(path) as f:
        text = f.read()
    start = text.index(BEGIN)
    start = text.index("\n", start) + 1
    end = text.index(END)
    table = docs_table()
    if os.environ.get("LLMOPT_UPDATE_DOCS") == "1":
        with open(path, "w") as f:
            f.write(text[:start] + table + text[end:])
        return
    assert text[start:end] == table, (
        "docs/planner.md's export table is not this run's: regenerate it with "
        "LLMOPT_UPDATE_DOCS=1 ctest -R ecosystem")
