"""Checks one llm-opt export with its trainer's own code, then reads back what
the trainer set up and compares it with the plan.

  check_export.py megatron|deepspeed|torchtitan|torchtitan-0.2 EXPORT REPORT.json CONFIG.json

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


# Every field compared (its name without the parenthesized detail): the
# read-back lists them, and docs/planner.md's table is made from them.
COMPARED = set()


def expect(what, got, want):
    COMPARED.add(what.split(" (")[0])
    if got != want:
        raise Mismatch(f"{what}: the trainer set up {got!r}, the plan has {want!r}")


def fake_world(n):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=n, store=FakeStore())


# --- The model, from its config.json ------------------------------------------
#
# What the model's authors trained, read from its Hugging Face config.json
# by transformers' own rules per model_type (not by llm-opt's importer): the
# planner's reading (the report's "model") and the model each trainer builds
# are both compared with it, every field.


def hf_model(hf):
    t = hf.get("model_type", "llama")
    if t == "gpt2":
        hidden = hf["n_embd"]
        act = hf.get("activation_function", "gelu_new")
        return {
            "layers": hf["n_layer"], "hidden": hidden, "heads": hf["n_head"],
            "kv_heads": hf["n_head"], "head_dim": hidden // hf["n_head"],
            "ffn": hf.get("n_inner") or 4 * hidden,
            "activation": "gelu" if act == "gelu" else "gelu_tanh",
            "norm": "layer", "norm_eps": hf.get("layer_norm_epsilon", 1e-5),
            "qkv_bias": True, "out_bias": True, "mlp_bias": True, "window": 0,
            "vocab": hf["vocab_size"], "tied_embeddings": hf.get("tie_word_embeddings", True),
            "positions": hf["n_positions"], "rope_theta": 0, "rope_scaling": "",
            "rope_factor": 0, "rope_low_freq_factor": 0, "rope_high_freq_factor": 0,
            "rope_original_positions": 0, "experts": 0, "top_k": 0, "aux_loss": 0,
            "router_normalize": False,
        }
    heads = hf["num_attention_heads"]
    attention_bias = hf.get("attention_bias", False)
    window = 0
    if t in ("mistral", "mixtral") or (t == "qwen2" and hf.get("use_sliding_window")):
        window = hf.get("sliding_window") or 0
    scaling = hf.get("rope_scaling") or {}
    experts = hf.get("num_local_experts", 0)
    return {
        "layers": hf["num_hidden_layers"], "hidden": hf["hidden_size"], "heads": heads,
        "kv_heads": hf.get("num_key_value_heads") or heads,
        "head_dim": hf.get("head_dim") or hf["hidden_size"] // heads,
        "ffn": hf["intermediate_size"], "activation": "swiglu", "norm": "rms",
        "norm_eps": hf.get("rms_norm_eps", 1e-6),
        "qkv_bias": True if t == "qwen2" else attention_bias,
        "out_bias": False if t == "qwen2" else attention_bias,
        "mlp_bias": hf.get("mlp_bias", False), "window": window, "vocab": hf["vocab_size"],
        "tied_embeddings": hf.get("tie_word_embeddings", False), "positions": 0,
        "rope_theta": hf.get("rope_theta", 10000.0),
        "rope_scaling": scaling.get("rope_type", scaling.get("type", "")),
        "rope_factor": scaling.get("factor", 0),
        "rope_low_freq_factor": scaling.get("low_freq_factor", 0),
        "rope_high_freq_factor": scaling.get("high_freq_factor", 0),
        "rope_original_positions": scaling.get("original_max_position_embeddings", 0),
        "experts": experts, "top_k": hf.get("num_experts_per_tok", 0) if experts else 0,
        # transformers adds the load-balancing loss only with output_router_logits.
        "aux_loss": hf.get("router_aux_loss_coef", 0) if experts and hf.get(
            "output_router_logits") else 0,
        "router_normalize": bool(experts),
    }


def compare_model(built, want):
    """Every field of the model a trainer built against config.json's."""
    for key, value in want.items():
        if key == "rope_scaling" and value == "default":
            value = ""
        expect(f"model: {key}", built[key], value)


def check_planner_model(report, want):
    """The planner's reading of the model (the report's "model") against
    config.json: what was costed is the model its authors trained."""
    m = report["model"]
    got = dict(m["layer"])
    got.update({k: m[k] for k in ("layers", "vocab", "positions", "rope_theta", "rope_scaling",
                                  "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                  "rope_original_positions", "tied_embeddings")})
    for key, value in want.items():
        if key == "rope_scaling" and value == "default":
            value = ""
        expect(f"planned model: {key}", got[key], value)


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
    "--kv-channels": int, "--norm-epsilon": float, "--add-qkv-bias": None,
    "--window-size": "tuple", "--moe-ffn-hidden-size": int, "--moe-router-pre-softmax": None,
    "--moe-router-load-balancing-type": str, "--moe-aux-loss-coeff": float,
    "--expert-tensor-parallel-size": int, "--use-tp-pp-dp-mapping": None,
}
# Switches whose destination is not the flag's name.
MEGATRON_SWITCH_DEST = {"--disable-bias-linear": ("add_bias_linear", False)}
# Values whose destination is not the flag's name.
MEGATRON_DEST = {"--fp8-format": "fp8", "--norm-epsilon": "layernorm_epsilon"}


def megatron_tuple(x):
    """arguments.py's tuple_type: "4095,0" or "(4095, 0)"."""
    return tuple(int(i) for i in x.strip("()").split(","))


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
        kind = megatron_tuple if kind == "tuple" else kind
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
    # validate_args: biases on every linear put them on q/k/v too.
    if a.get("add_bias_linear", True):
        tc["add_qkv_bias"] = True
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
    # The model Megatron builds (TransformerConfig, and the GPTModel
    # arguments pretrain_gpt.py passes), every field that defines it,
    # against config.json.
    want = hf_model(hf)
    check_planner_model(report, want)
    from megatron.core.transformer.utils import openai_gelu

    moe = bool(config.num_moe_experts)
    act = config.activation_func
    built = {
        "layers": config.num_layers, "hidden": config.hidden_size,
        "heads": config.num_attention_heads, "kv_heads": config.num_query_groups,
        "head_dim": config.kv_channels,
        "ffn": config.moe_ffn_hidden_size if moe else config.ffn_hidden_size,
        "activation": ("swiglu" if config.gated_linear_unit and act is F.silu else
                       "gelu" if not config.gated_linear_unit and act is F.gelu else
                       "gelu_tanh" if act is openai_gelu else f"{act.__name__}"
                       f"{' gated' if config.gated_linear_unit else ''}"),
        "norm": {"RMSNorm": "rms", "LayerNorm": "layer"}[config.normalization],
        "norm_eps": config.layernorm_epsilon,
        "qkv_bias": config.add_bias_linear or config.add_qkv_bias,
        "out_bias": config.add_bias_linear, "mlp_bias": config.add_bias_linear,
        "window": (config.window_size[0] + 1) if config.window_size else 0,
        "vocab": a.get("vocab_size"),
        "tied_embeddings": not a.get("untie_embeddings_and_output_weights", False),
        "positions": (a["max_position_embeddings"]
                      if a.get("position_embedding_type", "learned_absolute") ==
                      "learned_absolute" else 0),
        "rope_theta": (a.get("rotary_base", 10000)
                       if a.get("position_embedding_type") == "rope" else 0),
        # GPTModel's rope_scaling is Llama 3.1's with its default factor 8
        # (pretrain_gpt passes no factor).
        "rope_scaling": "llama3" if a.get("use_rope_scaling") else "",
        "rope_factor": 8.0 if a.get("use_rope_scaling") else 0,
        "rope_low_freq_factor": 1.0 if a.get("use_rope_scaling") else 0,
        "rope_high_freq_factor": 4.0 if a.get("use_rope_scaling") else 0,
        "rope_original_positions": 8192 if a.get("use_rope_scaling") else 0,
        "experts": config.num_moe_experts or 0,
        "top_k": config.moe_router_topk if moe else 0,
        "aux_loss": (config.moe_aux_loss_coeff
                     if moe and config.moe_router_load_balancing_type == "aux_loss" else 0),
        # top-k of the logits then a softmax over them: renormalized weights.
        "router_normalize": moe and not config.moe_router_pre_softmax,
    }
    if a.get("use_rope_scaling") and want["rope_factor"] not in (8, 8.0):
        raise Mismatch(f"rope scaling factor: pretrain_gpt builds 8, the model has "
                       f"{want['rope_factor']}")
    compare_model(built, want)
    # What the families here do not have, and Megatron would add.
    expect("q/k norms", config.qk_layernorm, False)
    expect("zero-centered norm weights", config.layernorm_zero_centered_gamma, False)
    expect("softmax scale (1/sqrt(head_dim))", config.softmax_scale, None)
    expect("rotary percent", a.get("rotary_percent", 1.0), 1.0)
    if moe:
        expect("router score", config.moe_router_score_function, "softmax")
        expect("router top-k scaling", config.moe_router_topk_scaling_factor, None)
        expect("shared experts", config.moe_shared_expert_intermediate_size, None)
        expect("expert tensor parallel", config.expert_tensor_parallel_size,
               plan["expert_tensor_parallel"])
    expect("tokenizer", a.get("tokenizer_type"), "NullTokenizer")
    multiple = 128 * tp
    padded = (hf["vocab_size"] + multiple - 1) // multiple * multiple
    if moe:
        expect("token dispatcher", config.moe_token_dispatcher_type, "alltoall")

    # Megatron-Core's own parallel state over a fake world of the plan's
    # size, rank groups included, in the order pretrain_gpt gives it.
    groups = megatron_groups(config, a, gpus, plan)
    return {"tp": tp, "pp": pp, "vpp": config.virtual_pipeline_model_parallel_size or 1,
            "cp": cp, "ep": config.expert_model_parallel_size, "dp": dp, "zero": zero,
            "micro_batch": mbs, "num_micro_batches": gbs // (mbs * dp),
            "recompute": config.recompute_granularity, "fp8": config.fp8,
            "padded_vocab": padded, "order": groups}


def plan_groups(order, sizes, axis):
    """The rank groups of `axis` for a layout whose axes, fastest first,
    are `order` with `sizes`: the ranks that differ only in that axis."""
    strides, stride = {}, 1
    for name in order:
        strides[name] = stride
        stride *= sizes[name]
    world = stride
    out = set()
    for r in range(world):
        base = r - (r // strides[axis]) % sizes[axis] * strides[axis]
        out.add(tuple(base + i * strides[axis] for i in range(sizes[axis])))
    return sorted(out)


def megatron_groups(config, a, gpus, plan):
    """initialize_model_parallel over a fake world of `gpus` ranks (its own
    checks: divisibility, expert groups against the dense ones), then every
    group of RankGenerator, the generator it builds them with, against the
    plan's placement."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    order = "tp-cp-ep-pp-dp" if a.get("use_tp_pp_dp_mapping") else "tp-cp-ep-dp-pp"
    tp, pp, cp = (config.tensor_model_parallel_size, config.pipeline_model_parallel_size,
                  config.context_parallel_size)
    ep, etp = config.expert_model_parallel_size, config.expert_tensor_parallel_size or tp
    if dist.is_initialized():
        dist.destroy_process_group()
    fake_world(gpus)
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=config.virtual_pipeline_model_parallel_size,
            context_parallel_size=cp, expert_model_parallel_size=ep,
            expert_tensor_parallel_size=etp,
            num_distributed_optimizer_instances=a.get("num_distributed_optimizer_instances", 1),
            order=order, create_gloo_process_groups=False)
    except (RuntimeError, AssertionError, ValueError) as e:
        raise Mismatch(f"REFUSED by Megatron-Core's initialize_model_parallel: {e}")
    finally:
        ps.destroy_model_parallel()
    dp = gpus // (tp * pp * cp)
    gen = ps.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    # The plan's placement names its axes fastest first: tp-cp-dp-pp (pp
    # outermost) or tp-cp-pp-dp (pp inside dp).
    placement = plan["placement"].split("-")
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    for axis in ("tp", "cp", "dp", "pp"):
        expect(f"{axis} rank groups (placement {plan['placement']})",
               sorted(tuple(g) for g in gen.get_ranks(axis)),
               plan_groups(placement, sizes, axis))
    return order


# --- DeepSpeed --------------------------------------------------------------


def tiny_model(hf, tp=1):
    """A 2-layer model of config.json's family (transformers' own class),
    hidden 64, 8 heads, vocabulary 256, with the family's attention biases,
    window, kv heads ratio (at least tp kv heads, for AutoTP to split) and
    experts; returns it and its layers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    t = hf.get("model_type", "llama")
    if t == "gpt2":
        cfg = AutoConfig.for_model("gpt2", n_embd=64, n_layer=2, n_head=8, vocab_size=256,
                                   n_positions=64,
                                   activation_function=hf.get("activation_function", "gelu_new"))
        model = AutoModelForCausalLM.from_config(cfg)
        return model, list(model.transformer.h)
    heads = hf["num_attention_heads"]
    kv = hf.get("num_key_value_heads") or heads
    extra = {}
    for key in ("attention_bias", "mlp_bias", "use_sliding_window", "rms_norm_eps",
                "tie_word_embeddings", "output_router_logits", "router_aux_loss_coef"):
        if key in hf:
            extra[key] = hf[key]
    if hf.get("sliding_window"):
        extra["sliding_window"] = 8
    if "num_local_experts" in hf:
        extra.update(num_local_experts=4, num_experts_per_tok=min(2, hf["num_experts_per_tok"]))
    cfg = AutoConfig.for_model(t, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=8, num_key_value_heads=max(tp, 8 * kv // heads),
                               vocab_size=256, max_position_embeddings=64, **extra)
    model = AutoModelForCausalLM.from_config(cfg)
    return model, list(model.model.layers)



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
    # The engine itself, and real training steps, on a tiny model of the
    # same family (transformers' own class for the config's model_type):
    # ZeRO's optimizer wrapper and partitioning over the world, offload, the
    # batch arithmetic, and recomputation as a DeepSpeed training script
    # turns it on: deepspeed.checkpointing.configure with this config (the
    # section deepspeed.initialize never reads), each layer's forward
    # through deepspeed.checkpointing.checkpoint.
    # The export leaves the optimizer to the training script: here DeepSpeed's
    # own AdamW from the config (torch's kernels: no op to compile), which
    # ZeRO-Offload accepts where a client optimizer is refused.
    # ds_config carries no model (the training script builds it): the
    # planner's reading of config.json is what was costed.
    check_planner_model(report, hf_model(hf))
    model, layers = tiny_model(hf, plan["tp"])
    engine_config = dict(config)
    engine_config.setdefault("optimizer", {"type": "AdamW",
                                           "params": {"lr": 1e-4, "torch_adam": True}})
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=engine_config)
    except Exception as e:  # DeepSpeed raises its own exception types too
        raise Mismatch(f"REFUSED by deepspeed.initialize: {type(e).__name__}: {e}")
    # AutoTP's first-batch check compares the batch across the TP group
    # through collectives the fake world does not carry (one process holds
    # every rank's batch): taken off.
    if getattr(engine, "first_dataloader_check", None) is not None:
        engine.first_dataloader_check.remove()
    forwards = [0]
    if "activation_checkpointing" in config:
        import functools

        try:
            deepspeed.checkpointing.configure(None, deepspeed_config=config)
        except (AssertionError, ValueError) as e:
            raise Mismatch(f"REFUSED by deepspeed.checkpointing.configure: {e}")
    for layer in layers:
        inner = layer.forward

        def counted(*args, _inner=inner, **kwargs):
            forwards[0] += 1
            return _inner(*args, **kwargs)

        if "activation_checkpointing" in config:
            def checkpointed(hidden, *args, _f=counted, **kwargs):
                return deepspeed.checkpointing.checkpoint(functools.partial(_f, **kwargs), hidden,
                                                          *args)
            layer.forward = checkpointed
        else:
            layer.forward = counted
    steps = 2
    micro = engine.gradient_accumulation_steps()
    tokens = torch.randint(0, 256, (engine.train_micro_batch_size_per_gpu(), 16))
    try:
        for _ in range(steps * micro):
            loss = engine(input_ids=tokens, labels=tokens).loss
            engine.backward(loss)
            engine.step()
    except Exception as e:
        raise Mismatch(f"REFUSED in DeepSpeed's training step: {type(e).__name__}: {e}")
    expect("optimizer steps taken", engine.global_steps, steps)
    # Each layer runs forward once per micro-batch, and once more in the
    # backward when it is recomputed.
    expect("layer forwards (2 per micro-batch with recomputation)", forwards[0],
           len(layers) * steps * micro * (2 if plan["recompute"] == "full" else 1))
    # ZeRO partitions over every rank but an AutoTP group's (Ulysses ranks
    # included).
    dp_ranks = gpus // plan["tp"]
    if plan["zero"] == 3:
        p = next(model.parameters())
        expect("ZeRO-3 parameter partition (elements on this rank)", p.ds_tensor.numel(),
               -(-p.ds_numel // dp_ranks))
    elif plan["zero"] in (1, 2):
        held = sum(t.numel() for t in engine.optimizer.single_partition_of_fp32_groups)
        total = sum(p.numel() for p in model.parameters())
        if not total // dp_ranks <= held <= -(-total // dp_ranks) + 2 * dp_ranks:
            raise Mismatch(f"ZeRO-{plan['zero']}: this rank holds {held} of {total} optimizer "
                           f"elements, not a 1/{dp_ranks} partition")
    if plan["offload_optimizer"]:
        on_cpu = (engine.optimizer.offload_optimizer if plan["zero"] == 3
                  else engine.optimizer.cpu_offload)
        expect("optimizer state offloaded to the CPU (engine)", bool(on_cpu), True)
    tp = (ds.tensor_parallel_config.autotp_size if ds.tensor_parallel_config else 0) or 1
    if tp > 1:
        # ZeRO-3 keeps the (split) shape in ds_shape.
        w = engine.module.model.layers[0].self_attn.q_proj.weight
        expect("AutoTP split (query projection rows of 64)",
               (getattr(w, "ds_shape", None) or w.shape)[0], 64 // plan["tp"])
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


def titan_parallelized(model, dims, cfg, plan):
    """What torchtitan's parallelize_fn did to (a stage of) the model, and
    the precision it trains in, against the plan."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
    from torchtitan.distributed.utils import maybe_enable_amp

    blocks = list(model.layers.values()) if getattr(model, "layers", None) is not None else []
    # Mixed precision: FSDP's policy, or autocast; neither (TP or PP without
    # FSDP) trains in fp32.
    fsdp = any(isinstance(m, FSDPModule) for m in model.modules())
    amp = maybe_enable_amp(dims, cfg.training.mixed_precision_param, "cuda")
    precision = (cfg.training.mixed_precision_param if fsdp or
                 type(amp).__name__ != "nullcontext" else "float32")
    expect("training precision", precision, "bfloat16")
    expect("FSDP applied", fsdp, plan["zero"] == 3 and plan["dp"] * plan["cp"] > 1)
    # Compiled blocks wrap what parallelize_fn made of them.
    wrapped = sum(isinstance(getattr(b, "_orig_mod", b), CheckpointWrapper) for b in blocks)
    expect("compiled blocks", sum(hasattr(b, "_orig_mod") for b in blocks), len(blocks))
    expect("blocks with activation checkpointing", wrapped,
           len(blocks) if plan["recompute"] in ("full", "selective") else 0)
    if plan["tp"] > 1 and blocks:
        wq = dict(blocks[0].named_parameters())
        w = next(v for k, v in wq.items() if k.endswith("attention.wq.weight"))
        expect("tensor-parallel weights (DTensor over tp)", isinstance(w, DTensor) and
               dims.tp in [w.device_mesh.size(i) for i in range(w.device_mesh.ndim)], True)


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

    # The torchtitan stack's efficiency is that of compiled runs.
    expect("torch.compile (model and loss)",
           (cfg.compile.enable, sorted(cfg.compile.components)), (True, ["loss", "model"]))

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
    args.update_from_config(cfg)
    # The model torchtitan builds (on the meta device), every field that
    # defines it, against config.json.
    want = hf_model(hf)
    check_planner_model(report, want)
    with torch.device("meta"):
        built_model = spec.model_cls(args)
    block = built_model.layers["0"]
    attn, ffn = block.attention, block.feed_forward
    rope = args.rope_scaling_args
    compare_model({
        "layers": len(built_model.layers), "hidden": args.dim, "heads": args.n_heads,
        "kv_heads": args.n_kv_heads or args.n_heads,
        "head_dim": attn.wq.weight.shape[0] // args.n_heads, "ffn": ffn.w1.weight.shape[0],
        "activation": "swiglu", "norm": "rms", "norm_eps": args.norm_eps,
        "qkv_bias": attn.wq.bias is not None, "out_bias": attn.wo.bias is not None,
        "mlp_bias": ffn.w1.bias is not None, "window": 0,
        "vocab": built_model.tok_embeddings.weight.shape[0],
        "tied_embeddings": built_model.output.weight is built_model.tok_embeddings.weight,
        "positions": 0, "rope_theta": args.rope_theta,
        # Llama 3.1's scaling, always (precompute_freqs_cis has no switch).
        "rope_scaling": "llama3", "rope_factor": rope.scaling_factor,
        "rope_low_freq_factor": rope.low_freq_factor,
        "rope_high_freq_factor": rope.high_freq_factor,
        "rope_original_positions": rope.original_max_position_embeddings,
        "experts": 0, "top_k": 0, "aux_loss": 0, "router_normalize": False,
    }, want)
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
                                                     spec.parallelize_fn, loss_fn)
            except (ValueError, AssertionError) as e:
                raise Mismatch(f"REFUSED by torchtitan's pipeline: {e}")
            for part in parts:
                titan_parallelized(part, dims, cfg, plan)
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
        with torch.device("meta"):
            model = spec.model_cls(args)
        try:
            model = spec.parallelize_fn(model, dims, cfg)
        except (ValueError, AssertionError, RuntimeError, NotImplementedError) as e:
            raise Mismatch(f"REFUSED by torchtitan's parallelize_fn: {e}")
        titan_parallelized(model, dims, cfg, plan)
        expect("micro-batch (local batch)", local, plan["micro_batch"])
        expect("accumulation steps", accumulation, plan["num_micro_batches"])
    expect("global batch", gbs, job["global_batch"])
    expect("activation checkpointing", cfg.activation_checkpoint.mode, plan["recompute"])
    expect("async TP", cfg.parallelism.enable_async_tensor_parallel,
           report["stack"].get("variant") == "asynctp" and plan["tp"] > 1)
    return out


# --- torchtitan 0.3 -------------------------------------------------------------
#
# 0.3's command line (`python -m torchtitan.train ARGS`): the model from a
# config function of its module (`--module llama3 --config llama3_8b`),
# overrides as `--section.key VALUE`, booleans as `--section.key` /
# `--section.no-key`, activation checkpointing a subcommand. Runs in its own
# virtual environment (0.3 needs a newer PyTorch than the rest of the tier).


def torchtitan3(text, report, hf):
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    plan, job = report["plans"][0]["config"], report["job"]
    gpus = report["cluster"]["nodes"] * report["cluster"]["gpus_per_node"]
    argv = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            argv += shlex.split(line)
    import torchtitan.distributed.parallel_dims as parallel_dims_module
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    # Meshes on the CPU (torchtitan picks "cuda" when it sees no device).
    parallel_dims_module.device_type = "cpu"
    try:
        cfg = ConfigManager().parse_args(argv)
    except (ValueError, AssertionError, SystemExit) as e:
        raise Mismatch(f"REFUSED by torchtitan's command line: {e}")
    expect("torch.compile", cfg.compile.enable and "model" in cfg.compile.components, True)

    def setup(rank):
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", rank=rank, world_size=gpus, store=FakeStore())
        try:
            dims = ParallelDims.from_config(cfg.parallelism, gpus)
            dims.build_mesh()
        except (ValueError, AssertionError) as e:
            raise Mismatch(f"REFUSED by torchtitan: {e}")
        # As Trainer.__init__ does before building the model.
        dist_utils.set_spmd_backend(cfg.parallelism.spmd_backend)
        return dims

    from torchtitan.distributed import utils as dist_utils

    dims = setup(0)
    # The trainer's batch arithmetic (Trainer.__init__).
    batch_degree = dims.dp_replicate * dims.dp_shard
    local, gbs = cfg.training.local_batch_size, cfg.training.global_batch_size
    if gbs % (local * batch_degree):
        raise Mismatch("torchtitan: global batch is not a multiple of local batch x dp")
    accumulation = gbs // (local * batch_degree)
    seq_div = (dims.tp if cfg.parallelism.enable_sequence_parallel else 1) * (
        2 * dims.cp if dims.cp > 1 else 1)
    if cfg.training.seq_len % seq_div:
        raise Mismatch(f"REFUSED by torchtitan: sequence {cfg.training.seq_len} is not "
                       f"divisible by {seq_div}")
    spec = cfg.model_spec

    def build():
        model_config = spec.model
        model_config.update_from_config(config=cfg)
        with torch.device("meta"):
            return model_config, model_config.build()

    # The model torchtitan builds, every field that defines it, against
    # config.json.
    want = hf_model(hf)
    check_planner_model(report, want)
    model_config, model = build()
    block = model.layers["0"]
    attn, ffn = block.attention, block.feed_forward
    rope = model_config.layers[0].attention.rope
    wqkv = dict(attn.named_parameters())
    compare_model({
        "layers": len(model.layers), "hidden": model_config.dim, "heads": attn.n_heads,
        "kv_heads": attn.n_kv_heads, "head_dim": attn.head_dim,
        "ffn": ffn.w1.weight.shape[0], "activation": "swiglu",
        "norm": "rms" if type(block.attention_norm).__name__ == "RMSNorm" else "?",
        "norm_eps": block.attention_norm.eps,
        "qkv_bias": any(k.endswith("bias") for k in wqkv if "qkv" in k),
        "out_bias": attn.wo.bias is not None, "mlp_bias": ffn.w1.bias is not None,
        "window": 0, "vocab": model.tok_embeddings.weight.shape[0],
        "tied_embeddings": model.lm_head.weight is model.tok_embeddings.weight,
        "positions": 0, "rope_theta": rope.theta,
        "rope_scaling": {"llama": "llama3", "none": ""}.get(rope.scaling, rope.scaling),
        "rope_factor": rope.scaling_factor, "rope_low_freq_factor": rope.low_freq_factor,
        "rope_high_freq_factor": rope.high_freq_factor,
        "rope_original_positions": rope.original_max_position_embeddings,
        "experts": 0, "top_k": 0, "aux_loss": 0, "router_normalize": False,
    }, want)
    expect("data parallel (replicate x shard)", dims.dp_replicate * dims.dp_shard, plan["dp"])
    if plan.get("shard"):
        expect("FSDP group (shard x cp)", dims.dp_shard * dims.cp, plan["shard"])
    expect("tensor parallel", dims.tp, plan["tp"])
    expect("sequence parallel", cfg.parallelism.enable_sequence_parallel or dims.tp == 1,
           bool(plan["sp"]) or plan["tp"] == 1)
    expect("context parallel", dims.cp, plan["cp"])
    expect("pipeline parallel", dims.pp, plan["pp"])
    expect("expert parallel", dims.ep, plan["ep"])
    kwargs = dict(training=cfg.training, parallelism=cfg.parallelism,
                  compile_config=cfg.compile, ac_config=cfg.activation_checkpoint,
                  dump_folder=cfg.dump_folder)
    out = {"dp_replicate": dims.dp_replicate, "dp_shard": dims.dp_shard, "tp": dims.tp,
           "cp": dims.cp, "pp": dims.pp, "local_batch": local, "accumulation": accumulation}
    if dims.pp > 1:
        per_rank, stage_counts = [], []
        for st in range(dims.pp):
            if st:
                dims = setup(st * gpus // dims.pp)
                model_config, model = build()
            loss_fn = cfg.loss.build(compile_config=cfg.compile)
            try:
                schedule, parts, _, _ = spec.pipelining_fn(
                    model, parallel_dims=dims, device=torch.device("meta"),
                    model_config=model_config, parallelize_fn=spec.parallelize_fn,
                    loss_fn=loss_fn, **kwargs)
            except (ValueError, AssertionError, RuntimeError) as e:
                raise Mismatch(f"REFUSED by torchtitan's pipeline: {e}")
            for part in parts:
                titan3_parallelized(part, plan)
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
        out.update(stages=stage_counts, layers=per_rank, schedule=type(schedule).__name__)
    else:
        try:
            model = spec.parallelize_fn(model, parallel_dims=dims, **kwargs)
        except (ValueError, AssertionError, RuntimeError, NotImplementedError) as e:
            raise Mismatch(f"REFUSED by torchtitan's parallelize_fn: {e}")
        titan3_parallelized(model, plan)
        expect("micro-batch (local batch)", local, plan["micro_batch"])
        expect("accumulation steps", accumulation, plan["num_micro_batches"])
    expect("global batch", gbs, job["global_batch"])
    # 0.3 always applies FSDP's mixed-precision policy (also over one rank).
    expect("training precision", cfg.training.mixed_precision_param, "bfloat16")
    expect("activation checkpointing", type(cfg.activation_checkpoint).__qualname__,
           {"none": "NoneType", "full": "FullAC.Config",
            "selective": "SelectiveAC.Config"}.get(plan["recompute"], plan["recompute"]))
    expect("async TP", cfg.compile.enable_async_tensor_parallel,
           report["stack"].get("variant") == "asynctp" and plan["tp"] > 1)
    return out


def titan3_parallelized(model, plan):
    """What 0.3's parallelize_fn did to (a stage of) the model."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    blocks = list(model.layers.values()) if getattr(model, "layers", None) is not None else []
    fsdp = any(isinstance(m, FSDPModule) for m in model.modules())
    expect("FSDP applied", fsdp, True)
    expect("compiled blocks", sum(hasattr(b, "_orig_mod") or "Compiled" in type(b).__name__
                                  or getattr(b, "_compiled_call_impl", None) is not None
                                  for b in blocks), len(blocks))
    if plan["tp"] > 1 and blocks:
        w = next(v for k, v in blocks[0].named_parameters() if "wo" in k)
        expect("tensor-parallel weights (DTensor over tp)", isinstance(w, DTensor) and
               plan["tp"] in [w.device_mesh.size(i) for i in range(w.device_mesh.ndim)], True)


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
        elif target == "torchtitan-0.2":
            got = torchtitan(export, report, hf)
        elif target == "torchtitan":
            got = torchtitan3(text, report, hf)
        else:
            raise SystemExit(f"unknown target {target}")
    except Mismatch as e:
        msg = str(e)
        print(msg if msg.startswith("REFUSED") else "MISMATCH: " + msg, flush=True)
        os._exit(1)
    got["compared"] = sorted(COMPARED)
    print(json.dumps(got), flush=True)
    # Skip interpreter teardown (the fake world and DeepSpeed's comm state).
    os._exit(0)


if __name__ == "__main__":
    main()
