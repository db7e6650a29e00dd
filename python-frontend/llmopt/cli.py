"""The ``llmopt`` command (also ``python -m llmopt``).

::

    llmopt plan MODEL --cluster dgx-h100 --gpus 64 --global-batch 512 --seq-len 8192
    llmopt plan MODEL ... --fix tp:8,pp:4 --top-k 3 --html plan.html --export megatron
    llmopt stats MODEL [--json]
    llmopt mlir MODEL [-o FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

from . import __version__
from ._tool import LLMOptError
from .cluster import PRESETS, Cluster, Job
from .model import Model
from .plan import EXPORT_FORMATS, plan


def _cluster(args: argparse.Namespace) -> Cluster:
    spec: str = args.cluster
    if spec.endswith(".json") or Path(spec).is_file():
        cluster = Cluster.from_json(spec, gpus=args.gpus)
    else:
        cluster = Cluster.preset(spec, gpus=args.gpus)
    overrides = {}
    for item in args.set or []:
        for kv in item.split(","):
            key, sep, value = kv.partition("=")
            if not sep or not key or not value:
                raise ValueError(f"--set {kv!r}: write path=value, e.g. gpu.hbm_gib=96")
            overrides[key] = _scalar(value)
    return cluster.with_(**overrides) if overrides else cluster


def _output_path(option: str, path: Optional[str]) -> None:
    """Refuses an output path that cannot be written, before the search runs:
    a directory, or one in a directory that does not exist."""
    if path is None or path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{option} {path}: is a directory; give a file path")
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: the directory {str(parent)!r} does not exist")


def _write(path: str, text: str) -> None:
    """Writes `text` to `path` whole or not at all: to a temporary beside it,
    then renamed into place (a failure leaves the target as it was)."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        # mkstemp makes the file 0600; give it the mode a plain write would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _scalar(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _cmd_plan(args: argparse.Namespace) -> int:
    _output_path("--export-file", args.export_file)
    _output_path("--html", args.html)
    job = Job(
        global_batch=args.global_batch,
        seq_len=args.seq_len,
        dtype=args.dtype,
        fp8=args.fp8,
        grad_dtype=args.grad_dtype,
        flash_attention=args.flash_attention,
        dropout=args.dropout,
        stack=args.stack,
        stack_profile=args.stack_profile,
    )
    result = plan(
        Model(args.model), _cluster(args), job, fix=args.fix, top_k=args.top_k, html=args.html
    )
    out = sys.stdout
    exported = result.export(args.export) if args.export else None
    if exported is not None and args.export_file is None:
        # Only the export on standard output (`> ds.json` is the config);
        # the table goes to standard error.
        sys.stderr.write(result.table())
        out.write(exported)
    else:
        if args.json:
            out.write(json.dumps(result.report, indent=2) + "\n")
        else:
            out.write(result.table())
        if exported is not None:
            _write(args.export_file, exported)
            print(f"llmopt: wrote {args.export_file}", file=sys.stderr)
    if args.html:
        print(f"llmopt: wrote {args.html}", file=sys.stderr)
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    model = Model(args.model)
    if args.json:
        stats = model.stats(seq_len=args.seq_len, micro_batch=args.micro_batch)
        sys.stdout.write(json.dumps(stats.raw, indent=2) + "\n")
    else:
        sys.stdout.write(model.stats_table(seq_len=args.seq_len, micro_batch=args.micro_batch))
    return 0


def _cmd_mlir(args: argparse.Namespace) -> int:
    _output_path("-o", args.output)
    text = Model(args.model).to_mlir(dtype=args.dtype)
    if args.output and args.output != "-":
        _write(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmopt",
        description="Plan how to train a transformer on a GPU cluster (llm-opt's planner).",
    )
    p.add_argument("--version", action="version", version=f"llmopt {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    pl = sub.add_parser(
        "plan",
        help="search the parallel plans of a training job",
        description="Search data/tensor/pipeline/context/expert parallelism, ZeRO, "
        "recomputation and micro-batching; print the top plans.",
    )
    pl.add_argument("model", metavar="MODEL", help="a Hugging Face config.json or an llm .mlir file")
    pl.add_argument("--cluster", required=True,
                    help=f"a preset ({', '.join(PRESETS)}) or a cluster JSON file")
    pl.add_argument("--gpus", type=int, help="number of GPUs (sets the node count)")
    pl.add_argument("--set", action="append", metavar="PATH=VALUE",
                    help="override a cluster field: gpu.hbm_gib=96 (repeat or comma-separate)")
    pl.add_argument("--global-batch", type=int, required=True, help="sequences per step")
    pl.add_argument("--seq-len", type=int, help="tokens per sequence (default: the model's)")
    pl.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    pl.add_argument("--fp8", action="store_true", help="fp8 GEMMs in the linear layers")
    pl.add_argument("--grad-dtype", default="bf16", choices=["bf16", "fp32"])
    pl.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                    help="no fused attention kernel")
    pl.add_argument("--dropout", action="store_true", help="dropout layers")
    pl.add_argument("--stack", metavar="NAME[:VARIANT]",
                    help="the training stack that will run the plan: megatron (default), "
                    "torchtitan, deepspeed, llm-foundry, llm-run, llm-run-cpu")
    pl.add_argument("--stack-profile", metavar="PATH",
                    help="a stack profile JSON file instead of --stack")
    pl.add_argument("--fix", metavar="KEY:VALUE,...",
                    help="fix dimensions: dp tp pp vpp cp ep sp zero offload recompute "
                    "micro_batch num_micro_batches schedule placement")
    pl.add_argument("--top-k", type=int, default=5, help="plans to report (5)")
    pl.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    pl.add_argument("--html", metavar="PATH", help="write the HTML report here")
    pl.add_argument("--export", choices=EXPORT_FORMATS,
                    help="the best plan for Megatron-LM, DeepSpeed or torchtitan (plan with "
                    "that --stack): only it on standard output, the table on standard error")
    pl.add_argument("--export-file", metavar="PATH",
                    help="write the export here instead (the table stays on standard output)")
    pl.set_defaults(run=_cmd_plan)

    st = sub.add_parser("stats", help="parameters, training FLOPs per token and bytes")
    st.add_argument("model", metavar="MODEL")
    st.add_argument("--seq-len", type=int)
    st.add_argument("--micro-batch", type=int, default=1)
    st.add_argument("--json", action="store_true")
    st.set_defaults(run=_cmd_stats)

    ml = sub.add_parser("mlir", help="print the model as llm dialect IR")
    ml.add_argument("model", metavar="MODEL")
    ml.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ml.add_argument("-o", "--output", metavar="FILE")
    ml.set_defaults(run=_cmd_mlir)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command; returns the exit status (1: llm-opt or input error)."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (LLMOptError, ValueError) as e:
        # llm-opt's messages already say `error:`; this line says it once.
        message = str(e).strip()
        if message.startswith("error: "):
            message = message[len("error: "):]
        print(f"llmopt: error: {message or type(e).__name__}", file=sys.stderr)
        return 1
    except OSError as e:  # a file that cannot be read or written
        where = f"{e.filename}: " if e.filename else ""
        print(f"llmopt: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
