"""Running the planner (``--llm-auto-parallel``) and its results as objects."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._tool import quote_option as _quote, run_llm_opt
from .cluster import Cluster, Job
from .model import Model, _from_dict

__all__ = [
    "ExposedCommunication",
    "MemoryBreakdown",
    "ModelSummary",
    "Plan",
    "PlanConfig",
    "PlanResult",
    "Rejection",
    "SearchStats",
    "StageMemory",
    "StageTime",
    "TimeBreakdown",
    "EXPORT_FORMATS",
    "FIX_KEYS",
    "evaluate",
    "plan",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Formats :meth:`PlanResult.export` writes.
EXPORT_FORMATS: Tuple[str, ...] = ("megatron", "deepspeed", "torchtitan", "torchtitan-0.2")

#: Configuration keys ``fix`` accepts (the report's ``config`` keys;
#: ``offload`` is ``offload_optimizer``).
FIX_KEYS: Tuple[str, ...] = (
    "dp", "tp", "pp", "vpp", "cp", "ep", "sp", "zero", "shard", "offload", "recompute",
    "recompute_layers", "micro_batch", "num_micro_batches", "schedule", "placement",
)


# --- the report, as dataclasses ------------------------------------------------
@dataclass(frozen=True)
class PlanConfig:
    """One point of the search space (the report's ``config``)."""

    dp: int
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    sp: bool
    zero: int
    offload_optimizer: bool
    recompute: str
    micro_batch: int
    num_micro_batches: int
    schedule: str
    placement: str
    #: With ``recompute == "per-stage"``, each stage's level.
    stage_recompute: Tuple[str, ...] = ()
    #: Layers per pipeline stage.
    stage_layers: Tuple[int, ...] = ()
    #: Hybrid sharding: ZeRO over groups of this many dp x cp ranks,
    #: replicated across them (0: over all of them).
    shard: int = 0
    #: With ``recompute == "full"``: only the first this many layers of each
    #: model chunk are recomputed (Megatron's block method); 0: all.
    recompute_layers: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PlanConfig":
        return _from_dict(
            cls,
            d,
            stage_recompute=tuple(d.get("stage_recompute", ())),
            stage_layers=tuple(d.get("stage_layers", ())),
        )

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def describe(self) -> str:
        """The planner's one-line notation: ``dp8 tp8 pp4 vpp2 sp zero1 ...``."""
        s = f"dp{self.dp} tp{self.tp} pp{self.pp}"
        if self.vpp > 1:
            s += f" vpp{self.vpp}"
        if self.cp > 1:
            s += f" cp{self.cp}"
        if self.ep > 1:
            s += f" ep{self.ep}"
        if self.sp:
            s += " sp"
        s += f" zero{self.zero}"
        if self.shard:
            s += f" shard{self.shard}"
        if self.offload_optimizer:
            s += " offload"
        s += f" rc:{self.recompute}"
        if self.recompute_layers:
            s += f"({self.recompute_layers}/chunk)"
        if self.stage_recompute:
            s += "(" + ",".join(r[:4] for r in self.stage_recompute) + ")"
        s += f" mb{self.micro_batch}x{self.num_micro_batches}"
        if self.pp > 1:
            s += f" {self.schedule}"
        if self.placement == "tp-cp-pp-dp":
            s += " pp-inside-dp"
        return s

    def as_fix(self) -> Dict[str, Any]:
        """Every searched dimension, as :func:`plan`'s ``fix`` takes it."""
        return {
            "dp": self.dp, "tp": self.tp, "pp": self.pp, "vpp": self.vpp,
            "cp": self.cp, "ep": self.ep, "sp": self.sp, "zero": self.zero,
            "shard": self.shard, "offload": self.offload_optimizer, "recompute": self.recompute,
            "recompute_layers": self.recompute_layers,
            "micro_batch": self.micro_batch,
            "num_micro_batches": self.num_micro_batches,
            "schedule": self.schedule, "placement": self.placement,
        }


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU by what they hold."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    comm_buffers: float
    reserved: float
    total: float


@dataclass(frozen=True)
class StageMemory(MemoryBreakdown):
    """Bytes per GPU of one pipeline stage."""

    stage: int = 0
    layers: int = 0
    #: Micro-batches whose activations the stage holds at its peak.
    in_flight_micro_batches: float = 0


@dataclass(frozen=True)
class StageTime:
    """Seconds one micro-batch spends in a stage, forward and backward."""

    stage: int
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class ExposedCommunication:
    """Seconds of communication not hidden behind compute, by parallelism."""

    tp: float
    cp: float
    ep: float
    pp: float
    dp: float

    @property
    def total(self) -> float:
        return self.tp + self.cp + self.ep + self.pp + self.dp


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds per step by cause; they add up to the step time."""

    compute: float
    recompute: float
    bubble: float
    optimizer: float
    exposed_communication: ExposedCommunication

    @property
    def total(self) -> float:
        return (self.compute + self.recompute + self.bubble + self.optimizer +
                self.exposed_communication.total)


@dataclass(frozen=True)
class Equivalent:
    """The same plan with another pipeline layout (vpp, schedule, placement),
    predicted within the report's ``ranking.equivalent_tolerance``."""

    config: PlanConfig
    step_time_s: float
    peak_memory_bytes: float


@dataclass(frozen=True)
class Plan:
    """A scored configuration: the prediction for one training step."""

    config: PlanConfig
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    #: Model FLOPs utilization (6N + attention, no recomputation, against
    #: the dense 16-bit peak).
    mfu: float
    peak_memory_bytes: float
    peak_memory_stage: int
    #: The peak stage's memory.
    memory_breakdown: MemoryBreakdown
    memory_by_stage: Tuple[StageMemory, ...]
    time_breakdown: TimeBreakdown
    time_by_stage: Tuple[StageTime, ...] = ()
    #: Its other pipeline layouts that the search ranks as this plan.
    equivalents: Tuple[Equivalent, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Plan":
        tb = d["time_breakdown"]
        return _from_dict(
            cls,
            d,
            config=PlanConfig.from_json(d["config"]),
            memory_breakdown=_from_dict(MemoryBreakdown, d["memory_breakdown"]),
            memory_by_stage=tuple(_from_dict(StageMemory, s) for s in d["memory_by_stage"]),
            time_breakdown=_from_dict(
                TimeBreakdown,
                tb,
                exposed_communication=_from_dict(
                    ExposedCommunication, tb["exposed_communication"]
                ),
            ),
            time_by_stage=tuple(_from_dict(StageTime, s) for s in d.get("time_by_stage", ())),
            equivalents=tuple(
                _from_dict(Equivalent, e, config=PlanConfig.from_json(e["config"]))
                for e in d.get("equivalents", ())
            ),
        )

    @property
    def peak_memory_gib(self) -> float:
        return self.peak_memory_bytes / 2**30

    def describe(self) -> str:
        return self.config.describe()


@dataclass(frozen=True)
class Rejection:
    """Configurations rejected for one reason, with an example."""

    reason: str
    count: int
    example: str


@dataclass(frozen=True)
class ModelSummary:
    name: str
    params: float
    layers: int
    train_flops_per_token: float


@dataclass(frozen=True)
class SearchStats:
    evaluated: int
    feasible: int
    seconds: float


# --- running the search --------------------------------------------------------
def _fix_text(fix: Union[None, str, Mapping[str, Any], PlanConfig]) -> str:
    if fix is None:
        return ""
    if isinstance(fix, PlanConfig):
        fix = fix.as_fix()
    if isinstance(fix, str):
        return fix.strip()
    items = []
    for key, value in fix.items():
        if key == "offload_optimizer":
            key = "offload"
        if key in ("stage_layers", "stage_recompute"):
            continue  # derived by the evaluation, not chosen
        if key not in FIX_KEYS:
            raise ValueError(f"fix: unknown key {key!r}: use {', '.join(FIX_KEYS)}")
        if isinstance(value, bool):
            value = int(value)
        text = str(value)
        if not text or any(c in text for c in ", :\"'{}"):
            raise ValueError(f"fix: bad value {text!r} for {key}")
        items.append(f"{key}:{text}")
    return ",".join(items)


@dataclass(frozen=True)
class _Request:
    model: Model
    cluster: Cluster
    job: Job
    fix: str
    top_k: int


def _run(
    request: _Request,
    tmp: Path,
    *,
    report: Optional[Path] = None,
    html: Optional[Path] = None,
    export: Optional[Tuple[str, Path]] = None,
    fix: Optional[str] = None,
    top_k: Optional[int] = None,
    compare: bool = False,
    extra: Sequence[str] = (),
    before: Sequence[str] = (),
) -> str:
    with request.model._file() as model_path, request.cluster._options(tmp) as cluster_opts:
        options = list(cluster_opts)
        options += request.job._options()
        fix_text = request.fix if fix is None else fix
        if fix_text:
            options.append(f"fix={fix_text}")
        options.append(f"top-k={request.top_k if top_k is None else top_k}")
        options.append(f"compare={'true' if compare and fix_text else 'false'}")
        if report is not None:
            options.append(f"report={_quote(str(report))}")
        if html is not None:
            options.append(f"report-html={_quote(str(html))}")
        if export is not None:
            options += [f"export={export[0]}", f"export-file={_quote(str(export[1]))}"]
        return run_llm_opt(
            [model_path, *before, "-o", os.devnull,
             "--llm-auto-parallel=" + " ".join(options), *extra]
        )


@dataclass
class PlanResult:
    """What a search found: the top plans (best first) and what it rejected.

    ``report`` is the JSON report as a dict (docs/planner.md has the schema).
    """

    model: ModelSummary
    cluster: Dict[str, Any]
    job: Dict[str, Any]
    #: The training stack the plans are for: its profile as the report has it.
    stack: Dict[str, Any]
    search: SearchStats
    plans: List[Plan]
    rejected: Dict[str, Rejection]
    report: Dict[str, Any] = field(repr=False)
    #: With ``fix``: the free search's best plan against the first plan, as
    #: the report has it (``best``, ``gain``, ``changes``, ``by_category``,
    #: ``verdict``); ``None`` without ``fix``.
    versus_free_search: Optional[Dict[str, Any]] = None
    _table: str = field(repr=False, default="")
    _request: Optional[_Request] = field(repr=False, default=None)

    @classmethod
    def from_json(cls, report: Mapping[str, Any], table: str = "",
                  request: Optional[_Request] = None) -> "PlanResult":
        examples = report.get("rejected_examples", {})
        return cls(
            model=_from_dict(ModelSummary, report["model"]),
            cluster=dict(report["cluster"]),
            job=dict(report["job"]),
            stack=dict(report.get("stack", {})),
            search=_from_dict(SearchStats, report["search"]),
            plans=[Plan.from_json(p) for p in report["plans"]],
            rejected={
                reason: Rejection(reason, count, examples.get(reason, ""))
                for reason, count in report.get("rejected", {}).items()
            },
            versus_free_search=report.get("versus_free_search"),
            report=dict(report),
            _table=table,
            _request=request,
        )

    @property
    def best(self) -> Plan:
        """The fastest plan (the simplest among equally fast ones)."""
        return self.plans[0]

    def table(self) -> str:
        """The table ``llm-opt`` prints: the top plans, the best plan's time
        and memory split, and the rejection reasons."""
        return self._table

    def _plan_index(self, plan: Union[int, Plan]) -> Plan:
        if isinstance(plan, Plan):
            return plan
        return self.plans[plan]

    def export(self, format: str, plan: Union[int, Plan] = 0) -> str:
        """A plan (the best by default) for a trainer: ``megatron`` (command
        line arguments), ``deepspeed`` (JSON config), ``torchtitan`` (0.3.x
        ``python -m torchtitan.train`` arguments) or ``torchtitan-0.2`` (TOML).
        """
        if format not in EXPORT_FORMATS:
            raise ValueError(f"unknown export format {format!r}: use {', '.join(EXPORT_FORMATS)}")
        request = self._need_request()
        chosen = self._plan_index(plan)
        with tempfile.TemporaryDirectory(prefix="llmopt-") as tmp:
            out = Path(tmp) / f"export.{format}"
            # Fixing every dimension scores exactly this plan again.
            _run(request, Path(tmp), export=(format, out),
                 fix=_fix_text(chosen.config), top_k=1)
            return out.read_text(encoding="utf-8")

    def to_html(self, path: PathLike) -> Path:
        """Writes the search's self-contained HTML page (``report-html``) to
        ``path`` and returns it. The page is ``llm-opt``'s: the same search
        runs again (it is deterministic) with the page as an output."""
        request = self._need_request()
        target = Path(path).absolute()
        with tempfile.TemporaryDirectory(prefix="llmopt-") as tmp:
            _run(request, Path(tmp), html=target)
        return target

    def lower(
        self,
        directory: PathLike,
        plan: Union[int, Plan] = 0,
        *,
        lr: float = 3e-4,
        max_grad_norm: float = 1.0,
        dtype: Optional[str] = None,
        fuse: bool = True,
        bucket_bytes: int = 25 << 20,
        cp_comm: str = "ring",
        prefetch: bool = True,
        moe_aux_loss: float = 0.0,
    ) -> Path:
        """Lowers a plan (the best by default) to a plan directory that
        ``llm-run`` trains: ``plan.json``, its checksum, ``run.slurm`` and,
        with ``fuse``, the fused kernels' CUDA source ``kernels.cu``
        (docs/plan-format.md). ``dtype`` re-imports a ``config.json`` model
        in that element type (``"f32"`` for the CPU backend).
        ``bucket_bytes`` sizes the data-parallel gradient all-reduce buckets
        and the ZeRO-2/3 gradient reduce-scatter buckets (0: one all-reduce
        in the step, one reduce-scatter per gradient); ``cp_comm`` is ``"ring"`` or
        ``"all-gather"`` for context parallelism (docs/lowering.md);
        ``prefetch`` starts each layer's ZeRO-3 parameter gathers while the
        previous layer computes; ``moe_aux_loss`` is the MoE load-balancing
        loss coefficient (Megatron's ``--moe-aux-loss-coeff``).

        Raises:
            LLMOptError: the plan needs lowering that is not written yet (the
                message names it), or the directory cannot be written.
        """
        if not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        if not isinstance(max_grad_norm, (int, float)) or max_grad_norm < 0:
            raise ValueError(f"max_grad_norm must be non-negative, got {max_grad_norm!r}")
        if not isinstance(bucket_bytes, int) or isinstance(bucket_bytes, bool) or bucket_bytes < 0:
            raise ValueError(f"bucket_bytes must be a non-negative integer, got {bucket_bytes!r}")
        if not isinstance(moe_aux_loss, (int, float)) or not 0 <= moe_aux_loss < float("inf"):
            raise ValueError(f"moe_aux_loss must be a finite number >= 0, got {moe_aux_loss!r}")
        if cp_comm not in ("ring", "all-gather"):
            raise ValueError(f"cp_comm must be 'ring' or 'all-gather', got {cp_comm!r}")
        request = self._need_request()
        chosen = self._plan_index(plan)
        target = Path(directory).absolute()
        before = [f"--hf-dtype={dtype}"] if dtype else []
        lowering = (f"--llm-lower-to-plan=dir={_quote(str(target))} lr={lr!r} "
                    f"max-grad-norm={max_grad_norm!r} fuse={'true' if fuse else 'false'} "
                    f"bucket-bytes={bucket_bytes} cp-comm={cp_comm} "
                    f"prefetch={'true' if prefetch else 'false'} moe-aux-loss={moe_aux_loss!r}")
        with tempfile.TemporaryDirectory(prefix="llmopt-") as tmp:
            _run(request, Path(tmp), fix=_fix_text(chosen.config), top_k=1,
                 extra=[lowering], before=before)
        return target

    def _need_request(self) -> _Request:
        if self._request is None:
            raise ValueError("this result was built from a report alone; run plan() to export")
        return self._request


def plan(
    model: Model,
    cluster: Cluster,
    job: Job,
    *,
    fix: Union[None, str, Mapping[str, Any], PlanConfig] = None,
    top_k: int = 5,
    html: Optional[PathLike] = None,
    compare: bool = True,
) -> PlanResult:
    """Searches the parallel plans of ``job`` for ``model`` on ``cluster``.

    Args:
        fix: dimensions to hold fixed, as ``"tp:8,pp:4"`` or
            ``{"tp": 8, "pp": 4, "sp": True, "recompute": "full"}``; keys in
            :data:`FIX_KEYS`. The rest are searched.
        top_k: plans to keep (1 to 1000).
        html: also write the search's HTML page here.
        compare: with ``fix``, also search freely; the result's
            ``versus_free_search`` says where the best plan gains on the fixed
            one, by category, and how sure each gain is.

    Raises:
        NoFeasiblePlanError: nothing fits (the error's ``notes`` say why).
        LLMOptError: bad input (the message is llm-opt's).
    """
    if not isinstance(model, Model):
        raise TypeError(f"model must be an llmopt.Model, got {type(model).__name__}")
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be an llmopt.Cluster, got {type(cluster).__name__}")
    if not isinstance(job, Job):
        raise TypeError(f"job must be an llmopt.Job, got {type(job).__name__}")
    if not isinstance(top_k, int) or not 1 <= top_k <= 1000:
        raise ValueError(f"top_k must be between 1 and 1000, got {top_k!r}")
    request = _Request(model, cluster, job, _fix_text(fix), top_k)
    with tempfile.TemporaryDirectory(prefix="llmopt-") as tmp:
        report_path = Path(tmp) / "report.json"
        page = Path(html).absolute() if html is not None else None
        table = _run(request, Path(tmp), report=report_path, html=page, compare=compare)
        report = json.loads(report_path.read_text(encoding="utf-8"))
    return PlanResult.from_json(report, table, request)


def evaluate(
    model: Model,
    cluster: Cluster,
    job: Job,
    config: Union[Mapping[str, Any], PlanConfig],
) -> Plan:
    """Scores a configuration you already have (every key of ``config`` is
    fixed; keys left out are searched and the best choice is taken).

    ``config`` is a :class:`PlanConfig` or a dict with :data:`FIX_KEYS`
    (a report's ``config`` dict works as it is).

    Raises:
        NoFeasiblePlanError: the configuration breaks a rule or does not fit;
            ``str(error)`` says which and by how much.
    """
    return plan(model, cluster, job, fix=config, top_k=1, compare=False).best
