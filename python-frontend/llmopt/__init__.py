"""llmopt: plan how to train a transformer on a GPU cluster, from Python.

Describe a model (a Hugging Face ``config.json``, or GPT / Llama / Mixtral
parameters), a cluster (a preset with overrides, or a cluster JSON file) and
a job; :func:`plan` searches data / tensor / pipeline / sequence / context /
expert parallelism, ZeRO, recomputation and micro-batching with llm-opt's
cost model and returns the best plans as Python objects.

>>> import llmopt
>>> result = llmopt.plan(
...     llmopt.Model("examples/models/llama3-70b.json"),
...     llmopt.Cluster.preset("dgx-h100", gpus=64),
...     llmopt.Job(global_batch=512, seq_len=8192))
>>> result.best.config.describe()                     # doctest: +SKIP
'dp32 tp1 pp1 cp2 zero3 offload rc:selective mb1x16'

The package drives the ``llm-opt`` binary (found through ``LLMOPT_OPT``,
``PATH`` or a build directory next to this source); see docs/python.md.
"""

from ._tool import (
    LLMOptError,
    LLMOptNotFoundError,
    NoFeasiblePlanError,
    find_llm_opt,
)
from .cluster import PRESETS, Cluster, Job
from .model import ActivationBytes, LayerStats, Model, ModelStats
from .plan import (
    EXPORT_FORMATS,
    FIX_KEYS,
    Equivalent,
    ExposedCommunication,
    MemoryBreakdown,
    ModelSummary,
    Plan,
    PlanConfig,
    PlanResult,
    Rejection,
    SearchStats,
    StageMemory,
    StageTime,
    TimeBreakdown,
    evaluate,
    plan,
)

__version__ = "0.1.0"

__all__ = [
    "ActivationBytes",
    "Cluster",
    "EXPORT_FORMATS",
    "ExposedCommunication",
    "FIX_KEYS",
    "Job",
    "LLMOptError",
    "LLMOptNotFoundError",
    "LayerStats",
    "MemoryBreakdown",
    "Model",
    "ModelStats",
    "ModelSummary",
    "Equivalent",
    "NoFeasiblePlanError",
    "PRESETS",
    "Plan",
    "PlanConfig",
    "PlanResult",
    "Rejection",
    "SearchStats",
    "StageMemory",
    "StageTime",
    "TimeBreakdown",
    "evaluate",
    "find_llm_opt",
    "plan",
]
