"""Checks one llm-opt export with its trainer's own code, then reads back what
the trainer set up and compares it with the plan.

  check_export.py megatron|deepspeed|torchtitan EXPORT REPORT.json CONFIG.json

EXPORT is what `export=FORMAT export-file=EXPORT` wrote, REPORT.json the
planner's JSON report of the same run (`report=`), CONFIG.json the model's
Hugging Face config. Prints the read-back as one JSON line and exits 0 when
the trainer accepted the export and set up the plan; otherwise prints
`MISMATCH: ...` or `REFUSED: ...` (the trainer's own error) and exits 1.

Runs in the ecosystem virtual environment (test/Ecosystem/requirements.txt).
The distributed world is torch's fake process group of the plan's size in
this one process: the trainers build their meshes, groups and batch
arithmetic for N ranks without N processes.
"""

import json
import os
import shlex
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("LOCAL_RANK", "0")


class Mismatch(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise Mismatch(f"{what}: the trainer set up {got!r}, the plan has {want!r}")


def fake_world(n):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=n, store=FakeStore())


# --- Megatron-LM -----------------------------------------------------------
#
# Megatron-LM's pretrain_gpt.py arguments are parsed by megatron/training
# (not on PyPI); Megatron-Core's config dataclasses, which validate the model
# and parallel layout in __post_init__, are. Each flag the export may write,
# its value type (None: a switch) and where Megatron-LM puts it (arguments.py
# and core_transformer_config_from_args, main, read 2026-11; see
# docs/planner.md): TC TransformerConfig, DDP DistributedDataParallelConfig,
# OPT OptimizerConfig, or the model / training loop. A flag missing here fails
# the check: add it with its Megatron meaning.
MEGATRON_FLAGS = {
    "--num-layers": int, "--hidden-size": int, "--num-attention-heads": int,
    "--ffn-hidden-size": int, "--seq-length": int, "--max-position-embeddings": int,
    "--group-query-attention": None, "--num-query-groups": int, "--swiglu": None,
    "--position-embedding-type": str, "--normalization": str,
    "--disable-bias-linear": None, "--rotary-base": int,
    "--use-rope-scaling": None, "--untie-embeddings-and-output-weights": None,
    "--tokenizer-type": str, "--vocab-size": int,
    "--attention-dropout": float, "--hidden-dropout": float,
    "--tensor-model-parallel-size": int, "--pipeline-model-parallel-size": int,
    "--context-parallel-size": int, "--expert-model-parallel-size": int,
    "--num-virtual-stages-per-pipeline-rank": int, "--sequence-parallel": None,
    "--decoder-first-pipeline-num-layers": int, "--decoder-last-pipeline-num-layers": int,
    "--account-for-embedding-in-pipeline-split": None,
    "--account-for-loss-in-pipeline-split": None,
    "--micro-batch-size": int, "--global-batch-size": int,
    "--recompute-granularity": str, "--recompute-method": str, "--recompute-num-layers": int,
    "--use-distributed-optimizer": None, "--overlap-grad-reduce": None,
    "--overlap-param-gather": None, "--num-distributed-optimizer-instances": int,
    "--use-megatron-fsdp": None, "--data-parallel-sharding-strategy": str,
    "--ckpt-format": str, "--optimizer-cpu-offload": None,
    "--use-precision-aware-optimizer": None,
    "--num-experts": int, "--moe-router-topk": int, "--moe-token-dispatcher-type": str,
    "--moe-grouped-gemm": None, "--bf16": None, "--fp8-format": str, "--fp8-recipe": str,
    "--accumulate-allreduce-grads-in-fp32": None, "--grad-reduce-in-bf16": None,
    "--attention-backend": str, "--clip-grad": float, "--optimizer": str,
}
# Switches whose destination is not the flag's name.
MEGATRON_SWITCH_DEST = {"--disable-bias-linear": ("add_bias_linear", False)}
# Values whose destination is not the flag's name.
MEGATRON_DEST = {"--fp8-format": "fp8"}


def parse_megatron(text):
    env, argv = {}, []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            env[name] = value
            continue
        argv += shlex.split(line)
    args, i = {}, 0
    while i < len(argv):
        flag = argv[i]
        if flag not in MEGATRON_FLAGS:
            raise Mismatch(f"{flag}: not a Megatron-LM argument the checker knows")
        kind = MEGATRON_FLAGS[flag]
        if kind is None:
            dest, value = MEGATRON_SWITCH_DEST.get(flag, (flag[2:].replace("-", "_"), True))
            args[dest] = value
            i += 1
            continue
        if i + 1 >= len(argv):
            raise Mismatch(f"{flag}: no value")
        args[MEGATRON_DEST.get(flag, flag[2:].replace("-", "_"))] = kind(argv[i + 1])
        i += 2
    return env, args


def megatron(text, report, hf):
    import dataclasses

    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.enums import AttnBackend

    # Transformer Engine is a GPU package, absent here: its version check in
    # OptimizerConfig (the precision-aware optimizer) answers as a GPU
    # environment with a current TE would.
    import megatron.core.optimizer.optimizer_config as optimizer_config

    optimizer_config.is_te_min_version = lambda version, *args, **kwargs: True

    env, a = parse_megatron(text)
    plan, job = report["plans"][0]["config"], report["job"]
    gpus = report["cluster"]["nodes"] * report["cluster"]["gpus_per_node"]

    # Megatron-Core's configs, filled as core_transformer_config_from_args,
    # get_megatron_ddp_config and get_megatron_optimizer_config fill them.
    def fill(cls):
        names = {f.name for f in dataclasses.fields(cls)}
        return {k: v for k, v in a.items() if k in names}

    tc = fill(TransformerConfig)
    tc["num_moe_experts"] = a.get("num_experts")
    tc["num_layers_in_first_pipeline_stage"] = a.get("decoder_first_pipeline_num_layers")
    tc["num_layers_in_last_pipeline_stage"] = a.get("decoder_last_pipeline_num_layers")
    tc["num_query_groups"] = a.get("num_query_groups") if a.get("group_query_attention") else None
    vpp = a.get("num_virtual_stages_per_pipeline_rank")
    tc["virtual_pipeline_model_parallel_size"] = vpp if vpp and vpp > 1 else None
    if a.get("swiglu"):
        tc["gated_linear_unit"], tc["activation_func"] = True, F.silu
    dtype = torch.bfloat16 if a.get("bf16") else torch.float32
    tc["params_dtype"] = tc["pipeline_dtype"] = dtype
    if "attention_backend" in a:
        tc["attention_backend"] = AttnBackend[a["attention_backend"]]
    ddp = fill(DistributedDataParallelConfig)
    # bf16 reduces gradients in fp32 unless --grad-reduce-in-bf16.
    ddp["grad_reduce_in_fp32"] = bool(a.get("accumulate_allreduce_grads_in_fp32")) or (
        bool(a.get("bf16")) and not a.get("grad_reduce_in_bf16"))
    if a.get("use_megatron_fsdp"):
        ddp["use_custom_fsdp"] = True
    opt = fill(OptimizerConfig)
    opt["params_dtype"] = dtype
    try:
        config = TransformerConfig(**tc)
        ddp_config = DistributedDataParallelConfig(**ddp)
        opt_config = OptimizerConfig(**opt)
    except (ValueError, AssertionError, TypeError) as e:
        raise Mismatch(f"REFUSED by Megatron-Core: {e}")

    # validate_args and the micro-batch calculator, restated (megatron/training
    # is not on PyPI): the rules an export can break.
    tp, pp, cp = config.tensor_model_parallel_size, config.pipeline_model_parallel_size, \
        config.context_parallel_size
    if gpus % (tp * pp * cp):
        raise Mismatch(f"validate_args: {gpus} GPUs are not divisible by tp x pp x cp")
    dp = gpus // (tp * pp * cp)
    mbs, gbs = a["micro_batch_size"], a["global_batch_size"]
    if gbs % (mbs * dp):
        raise Mismatch(f"micro-batch calculator: global batch {gbs} % (micro {mbs} x dp {dp})")
    if cp > 1 and a["seq_length"] % (2 * cp):
        raise Mismatch("validate_args: seq_length must be divisible by 2 x cp")
    fsdp = bool(a.get("use_megatron_fsdp"))
    if (tp > 1 or cp > 1) and not fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
        raise Mismatch("validate_args: tp or cp needs CUDA_DEVICE_MAX_CONNECTIONS=1")
    if fsdp and env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
        raise Mismatch("validate_args: Megatron FSDP must not run with CUDA_DEVICE_MAX_CONNECTIONS=1")
    if fsdp and (a.get("ckpt_format") != "fsdp_dtensor" or a.get("optimizer") not in ("adam", "sgd")):
        raise Mismatch("validate_args: Megatron FSDP needs --ckpt-format fsdp_dtensor and adam/sgd")
    if a.get("overlap_param_gather") and not (
            (a.get("use_distributed_optimizer") or fsdp) and a.get("overlap_grad_reduce")):
        raise Mismatch("validate_args: --overlap-param-gather needs the distributed optimizer "
                       "(or FSDP) and --overlap-grad-reduce")
    if opt_config.optimizer_cpu_offload and not opt_config.use_precision_aware_optimizer:
        raise Mismatch("validate_args: --optimizer-cpu-offload needs --use-precision-aware-optimizer")
    if a.get("grad_reduce_in_bf16") and a.get("accumulate_allreduce_grads_in_fp32"):
        raise Mismatch("validate_args: --grad-reduce-in-bf16 with fp32 accumulation")

    # What was set up, against the plan.
    expect("tensor parallel", tp, plan["tp"])
    expect("pipeline parallel", pp, plan["pp"])
    expect("virtual stages", config.virtual_pipeline_model_parallel_size or 1, plan["vpp"])
    expect("context parallel", cp, plan["cp"])
    expect("expert parallel", config.expert_model_parallel_size, plan["ep"])
    expect("sequence parallel", config.sequence_parallel, bool(plan["sp"]) and tp > 1)
    expect("data parallel", dp, plan["dp"])
    expect("micro-batch", mbs, plan["micro_batch"])
    expect("micro-batches per step", gbs // (mbs * dp), plan["num_micro_batches"])
    expect("global batch", gbs, job["global_batch"])
    zero = 0
    if fsdp:
        zero = {"optim_grads": 2, "optim_grads_params": 3}.get(
            ddp_config.data_parallel_sharding_strategy, -1)
    elif ddp_config.use_distributed_optimizer:
        zero = 1
    expect("ZeRO stage", zero, plan["zero"])
    if plan.get("shard"):
        expect("distributed optimizer instances", ddp_config.num_distributed_optimizer_instances,
               plan["dp"] * plan["cp"] // plan["shard"])
    expect("optimizer offload", opt_config.optimizer_cpu_offload, plan["offload_optimizer"])
    rc = plan["recompute"]
    want = {"none": None, "selective": "selective", "full": "full"}.get(rc, rc)
    expect("recompute granularity", config.recompute_granularity, want)
    if rc == "full":
        expect("recomputed layers", config.recompute_num_layers,
               plan["recompute_layers"] or 1)
    if pp > 1 and plan["vpp"] == 1:
        layers = plan["stage_layers"]
        first = config.num_layers_in_first_pipeline_stage
        last = config.num_layers_in_last_pipeline_stage
        got = [first if first is not None else config.num_layers // pp]
        middle = (config.num_layers - got[0] - (last if last is not None else config.num_layers // pp))
        got += [middle // (pp - 2)] * (pp - 2) if pp > 2 else []
        got += [last if last is not None else config.num_layers // pp]
        expect("layers per stage", got, layers)
    expect("fp8", config.fp8, "hybrid" if job["fp8"] else None)
    if job["fp8"]:
        expect("fp8 recipe", config.fp8_recipe, "tensorwise")
    expect("bf16", config.bf16, job["dtype"] == "bf16")
    expect("fp32 gradient reduction", ddp_config.grad_reduce_in_fp32, job["grad_bytes"] == 4)
    dropout = 0.1 if job["dropout"] else 0.0
    expect("hidden dropout", config.hidden_dropout, dropout)
    expect("attention dropout", config.attention_dropout, dropout)
    # The model, against its config.json.
    expect("layers", config.num_layers, hf["num_hidden_layers"])
    expect("hidden size", config.hidden_size, hf["hidden_size"])
    expect("attention heads", config.num_attention_heads, hf["num_attention_heads"])
    expect("query groups", config.num_query_groups,
           hf.get("num_key_value_heads", hf["num_attention_heads"]))
    expect("ffn size", config.ffn_hidden_size, hf["intermediate_size"])
    if "rope_theta" in hf:
        expect("rotary base", a.get("rotary_base"), int(hf["rope_theta"]))
    # The vocabulary (NullTokenizer's size) and Megatron's padding of it to a
    # multiple of make_vocab_size_divisible_by (128) x tp.
    expect("tokenizer", a.get("tokenizer_type"), "NullTokenizer")
    expect("vocabulary", a.get("vocab_size"), hf["vocab_size"])
    multiple = 128 * tp
    padded = (hf["vocab_size"] + multiple - 1) // multiple * multiple
    if "num_local_experts" in hf:
        expect("experts", config.num_moe_experts, hf["num_local_experts"])
        expect("router top-k", config.moe_router_topk, hf["num_experts_per_tok"])
        expect("token dispatcher", config.moe_token_dispatcher_type, "alltoall")
    return {"tp": tp, "pp": pp, "vpp": config.virtual_pipeline_model_parallel_size or 1,
            "cp": cp, "ep": config.expert_model_parallel_size, "dp": dp, "zero": zero,
            "micro_batch": mbs, "num_micro_batches": gbs // (mbs * dp),
            "recompute": config.recompute_granularity, "fp8": config.fp8,
            "padded_vocab": padded}


# --- DeepSpeed --------------------------------------------------------------


def deepspeed_check(text, report, hf):
    import torch

    plan, job = report["plans"][0]["config"], report["job"]
    gpus = report["cluster"]["nodes"] * report["cluster"]["gpus_per_node"]
    config = json.loads(text)
    fake_world(gpus)
    import deepspeed
    import deepspeed.comm as dscomm
    from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError

    dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    try:
        ds = DeepSpeedConfig(config)
    except (DeepSpeedConfigError, AssertionError, ValueError) as e:
        raise Mismatch(f"REFUSED by DeepSpeedConfig: {e}")
    # The engine itself, on a small stand-in model: ZeRO's optimizer wrapper,
    # its partitioning over the world, the batch arithmetic.
    # The export leaves the optimizer to the training script: here DeepSpeed's
    # own AdamW from the config (torch's kernels: no op to compile), which
    # ZeRO-Offload accepts where a client optimizer is refused.
    tp = config.get("tensor_parallel", {}).get("autotp_size", 1)
    if tp > 1:
        # AutoTP splits Hugging Face models it recognizes: a small Llama.
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=8, vocab_size=256))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    engine_config = dict(config)
    engine_config.setdefault("optimizer", {"type": "AdamW",
                                           "params": {"lr": 1e-4, "torch_adam": True}})
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=engine_config)
    except Exception as e:  # DeepSpeed raises its own exception types too
        raise Mismatch(f"REFUSED by deepspeed.initialize: {type(e).__name__}: {e}")
    tp = (ds.tensor_parallel_config.autotp_size if ds.tensor_parallel_config else 0) or 1
    if tp > 1:
        expect("AutoTP split (query projection rows of 64)",
               model.model.layers[0].self_attn.q_proj.weight.shape[0], 64 // plan["tp"])
        expect("data-parallel ranks (engine)", engine.dp_world_size, gpus // plan["tp"])
    sp = config.get("sequence_parallel_size", 1)
    expect("ZeRO stage", engine.zero_optimization_stage(), plan["zero"])
    expect("optimizer wrapper", type(engine.optimizer).__name__,
           {0: "BF16_Optimizer" if job["dtype"] == "bf16" else "FP16_Optimizer",
            1: "DeepSpeedZeroOptimizer", 2: "DeepSpeedZeroOptimizer",
            3: "DeepSpeedZeroOptimizer_Stage3"}.get(plan["zero"], "?")
           if plan["zero"] else type(engine.optimizer).__name__)
    expect("micro-batch", engine.train_micro_batch_size_per_gpu(), plan["micro_batch"])
    expect("accumulation steps", engine.gradient_accumulation_steps(), plan["num_micro_batches"])
    # Every rank but the Ulysses group counts as data parallel (AutoTP ranks
    # too): samples per step over the plan's dp x tp x cp ranks.
    expect("data-parallel ranks (DeepSpeed's count)", int(ds.world_size), gpus // sp)
    expect("global batch (sequences)", engine.train_batch_size() // tp, job["global_batch"])
    expect("AutoTP size", tp, plan["tp"])
    expect("Ulysses degree", sp, plan["cp"])
    offload = ds.zero_config.offload_optimizer
    expect("optimizer offload", bool(offload and str(offload.device).endswith("cpu")),
           plan["offload_optimizer"])
    expect("bf16", engine.bfloat16_enabled(), job["dtype"] == "bf16" or job["fp8"])
    expect("activation checkpointing", "activation_checkpointing" in config,
           plan["recompute"] == "full")
    return {"zero": engine.zero_optimization_stage(), "optimizer": type(engine.optimizer).__name__,
            "world": gpus, "dp": int(ds.world_size), "micro_batch": engine.train_micro_batch_size_per_gpu(),
            "accumulation": engine.gradient_accumulation_steps(), "tp": tp, "sp": sp}


# --- torchtitan ---------------------------------------------------------------


def torchtitan(path, report, hf):
    import torch
    import torch.distributed as dist

    plan, job = report["plans"][0]["config"], report["job"]
    gpus = report["cluster"]["nodes"] * report["cluster"]["gpus_per_node"]
    import torchtitan.distributed.parallel_dims as parallel_dims_module
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.pipeline_parallel import pipeline_llm
    from torchtitan.protocols.train_spec import get_train_spec

    # Meshes on the CPU (torchtitan picks "cuda" when it sees no device).
    parallel_dims_module.device_type = "cpu"
    try:
        cfg = ConfigManager().parse_args(["--job.config_file", path])
    except (ValueError, AssertionError, SystemExit) as e:
        raise Mismatch(f"REFUSED by torchtitan's job config: {e}")

    def setup(rank):
        """The trainer's parallel dims and meshes as world rank `rank` sees them."""
        if dist.is_initialized():
            dist.destroy_process_group()
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", rank=rank, world_size=gpus, store=FakeStore())
        p = cfg.parallelism
        try:
            dims = ParallelDims(dp_shard=p.data_parallel_shard_degree,
                                dp_replicate=p.data_parallel_replicate_degree,
                                cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                                pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
                                etp=p.expert_tensor_parallel_degree, world_size=gpus)
            dims.build_mesh()
        except (ValueError, AssertionError) as e:
            raise Mismatch(f"REFUSED by torchtitan: {e}")
        return dims

    dims = setup(0)
    # The trainer's batch arithmetic (Trainer.__init__).
    batch_degree = dims.dp_replicate * dims.dp_shard
    local, gbs = cfg.training.local_batch_size, cfg.training.global_batch_size
    if gbs % (local * batch_degree):
        raise Mismatch("torchtitan: global batch is not a multiple of local batch x dp")
    accumulation = gbs // (local * batch_degree)
    spec = get_train_spec(cfg.model.name)
    if cfg.model.flavor not in spec.model_args:
        raise Mismatch(f"torchtitan has no flavor {cfg.model.flavor!r} of {cfg.model.name}")
    args = spec.model_args[cfg.model.flavor]
    expect("layers", args.n_layers, hf["num_hidden_layers"])
    expect("hidden size", args.dim, hf["hidden_size"])
    expect("attention heads", args.n_heads, hf["num_attention_heads"])
    expect("kv heads", args.n_kv_heads, hf.get("num_key_value_heads", hf["num_attention_heads"]))
    expect("vocabulary", args.vocab_size, hf["vocab_size"])
    expect("rope theta", args.rope_theta, hf.get("rope_theta", args.rope_theta))
    expect("data parallel (replicate x shard)", dims.dp_replicate * dims.dp_shard, plan["dp"])
    if plan.get("shard"):
        expect("FSDP group (shard x cp)", dims.dp_shard * dims.cp, plan["shard"])
    expect("tensor parallel", dims.tp, plan["tp"])
    expect("context parallel", dims.cp, plan["cp"])
    expect("pipeline parallel", dims.pp, plan["pp"])
    expect("expert parallel", dims.ep, plan["ep"])
    expect("FSDP", dims.fsdp_enabled, plan["zero"] > 0 and plan["dp"] * plan["cp"] > 1)
    out = {"dp_replicate": dims.dp_replicate, "dp_shard": dims.dp_shard, "tp": dims.tp,
           "cp": dims.cp, "pp": dims.pp, "ep": dims.ep, "local_batch": local,
           "accumulation": accumulation}
    if dims.pp > 1:
        # The pipeline as torchtitan builds it on each pipeline rank (pp is
        # the outermost mesh dimension): the model on the meta device, split
        # into stages, and the schedule over its micro-batches.
        per_rank, stage_counts = [], []
        for s in range(dims.pp):
            if s:
                dims = setup(s * gpus // dims.pp)
            with torch.device("meta"):
                model = spec.model_cls(args)
            loss_fn = spec.build_loss_fn(cfg, parallel_dims=dims)
            try:
                schedule, parts, _, _ = pipeline_llm(model, dims, cfg, torch.device("meta"), args,
                                                     lambda m, d, c: m, loss_fn)
            except (ValueError, AssertionError) as e:
                raise Mismatch(f"REFUSED by torchtitan's pipeline: {e}")
            stage_counts.append(len(parts))
            per_rank.append(sum(len(m.layers) for m in parts if getattr(m, "layers", None)
                                is not None))
        expect("stages per pipeline rank", stage_counts, [plan["vpp"]] * plan["pp"])
        expect("layers per pipeline rank", per_rank, plan["stage_layers"])
        expect("micro-batches", schedule._n_microbatches, plan["num_micro_batches"])
        expect("micro-batch", cfg.parallelism.pipeline_parallel_microbatch_size,
               plan["micro_batch"])
        expect("schedule", type(schedule).__name__,
               {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe",
                "interleaved-1f1b": "ScheduleInterleaved1F1B"}.get(plan["schedule"],
                                                                  plan["schedule"]))
        expect("accumulation (the pipeline's micro-batches instead)", accumulation, 1)
        out.update(stages=stage_counts, layers=per_rank, microbatches=schedule._n_microbatches,
                   schedule=type(schedule).__name__)
    else:
        expect("micro-batch (local batch)", local, plan["micro_batch"])
        expect("accumulation steps", accumulation, plan["num_micro_batches"])
    expect("global batch", gbs, job["global_batch"])
    expect("activation checkpointing", cfg.activation_checkpoint.mode, plan["recompute"])
    expect("async TP", cfg.parallelism.enable_async_tensor_parallel,
           report["stack"].get("variant") == "asynctp" and plan["tp"] > 1)
    return out


def main():
    target, export, report_path, config_path = sys.argv[1:5]
    with open(report_path) as f:
        report = json.load(f)
    with open(config_path) as f:
        hf = json.load(f)
    with open(export) as f:
        text = f.read()
    try:
        if target == "megatron":
            got = megatron(text, report, hf)
        elif target == "deepspeed":
            got = deepspeed_check(text, report, hf)
        elif target == "torchtitan":
            got = torchtitan(export, report, hf)
        else:
            raise SystemExit(f"unknown target {target}")
    except Mismatch as e:
        msg = str(e)
        print(msg if msg.startswith("REFUSED") else "MISMATCH: " + msg, flush=True)
        os._exit(1)
    print(json.dumps(got), flush=True)
    # Skip interpreter teardown (the fake world and DeepSpeed's comm state).
    os._exit(0)


if __name__ == "__main__":
    main()
