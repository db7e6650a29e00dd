"""Clusters and training jobs, as the planner's options."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._tool import quote_option

__all__ = ["Cluster", "Job", "PRESETS"]

#: The cluster presets llm-opt knows (docs/cost-model.md lists their values).
PRESETS: Tuple[str, ...] = (
    "dgx-a100-40gb",
    "dgx-a100-80gb",
    "dgx-h100",
    "dgx-h200",
    "pcie-8x-h100",
)

PathLike = Union[str, "os.PathLike[str]"]

#: llm-auto-parallel's bounds (lib/Dialect/LLM/Transforms/AutoParallel.cpp),
#: checked here so that a value out of them is one clear error, not the
#: option parser's message about a number that does not fit 64 bits.
MAX_GPUS = 1 << 24
MAX_GLOBAL_BATCH = 1 << 30
MAX_SEQ_LEN = 1 << 26


def _check_int(name: str, value: Any, maximum: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= maximum:
        raise ValueError(f"{name} must be an integer from 1 to {maximum}, got {value!r}")


def _flatten(prefix: str, value: Any, out: Dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if any(c in text for c in ", \"'{}"):
        raise ValueError(f"cluster override value {text!r} cannot hold , spaces, quotes or braces")
    return text


@dataclass(frozen=True)
class Cluster:
    """A GPU cluster: a preset or a cluster JSON file, a GPU count, overrides.

    >>> Cluster.preset("dgx-h100", gpus=64).with_(gpu={"hbm_gib": 96}).overrides
    (('gpu.hbm_gib', 96),)

    Attributes:
        base: a preset name (:data:`PRESETS`) or the path of a cluster JSON
            file (schema: docs/cost-model.md; a file may name a ``preset`` and
            change some fields).
        gpus: total GPUs (sets the node count); ``None`` keeps the base's.
        overrides: ``(dotted.path, value)`` pairs applied on top, e.g.
            ``("gpu.hbm_gib", 96)`` or ``("network.nics_per_node", 4)``.
    """

    base: str
    gpus: Optional[int] = None
    overrides: Tuple[Tuple[str, Any], ...] = ()
    #: The JSON text of a cluster given as a dict (written to a file per run).
    _json: Optional[str] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_int("gpus", self.gpus, MAX_GPUS, optional=True)

    @classmethod
    def preset(cls, name: str, gpus: Optional[int] = None, **overrides: Any) -> "Cluster":
        """A preset (``dgx-h100``, ...), optionally resized and overridden.

        Keyword overrides are cluster fields: nested dicts
        (``gpu={"hbm_gib": 96}``) or dotted names (``**{"gpu.hbm_gib": 96}``).
        """
        if name not in PRESETS:
            raise ValueError(f"unknown cluster preset {name!r}: use one of {', '.join(PRESETS)}")
        return cls(name, gpus).with_(**overrides)

    @classmethod
    def from_json(
        cls, source: Union[PathLike, Mapping[str, Any]], gpus: Optional[int] = None
    ) -> "Cluster":
        """A cluster JSON file, or its contents as a dict."""
        if isinstance(source, Mapping):
            return cls("cluster.json", gpus, (), json.dumps(dict(source)))
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no cluster file {str(path)!r}")
        return cls(str(path), gpus)

    def with_(self, gpus: Optional[int] = None, **overrides: Any) -> "Cluster":
        """A copy with more overrides (and another GPU count if given).

        ``cluster.with_(gpu={"hbm_gib": 96}, network={"nics_per_node": 4})``
        """
        flat: Dict[str, Any] = {}
        for key, value in overrides.items():
            _flatten(key, value, flat)
        merged = dict(self.overrides)
        merged.update(flat)
        for value in merged.values():
            _value_text(value)  # fail now, not at plan time
        return Cluster(
            self.base,
            self.gpus if gpus is None else gpus,
            tuple(merged.items()),
            self._json,
        )

    @contextlib.contextmanager
    def _options(self, tmp: Path) -> Iterator[List[str]]:
        base = self.base
        if self._json is not None:
            path = tmp / "cluster.json"
            path.write_text(self._json, encoding="utf-8")
            base = str(path)
        options = [f"cluster={quote_option(base)}"]
        if self.gpus is not None:
            options.append(f"gpus={self.gpus}")
        if self.overrides:
            options.append(
                "set=" + ",".join(f"{k}={_value_text(v)}" for k, v in self.overrides)
            )
        yield options


@dataclass(frozen=True)
class Job:
    """What one training step processes, and how.

    Attributes:
        global_batch: sequences per optimizer step.
        seq_len: tokens per sequence (``None``: the model's training length).
        dtype: ``bf16`` or ``fp16``.
        fp8: fp8 GEMMs in the linear layers.
        grad_dtype: ``bf16`` (16 bytes per parameter with AdamW) or ``fp32``
            (Megatron's main gradients, 18 bytes).
        flash_attention: a fused attention kernel.
        dropout: dropout layers (their masks cost memory and time).
        stack: the training stack that will run the plan, ``name`` or
            ``name:variant`` (``megatron``, ``torchtitan``, ``torchtitan:eager``,
            ``deepspeed``, ``llm-foundry``, ``llm-run``, ``llm-run-cpu``);
            ``None``: llm-opt's default, Megatron-Core. The search keeps to
            what the stack runs and costs it with the stack's fitted
            efficiency.
        stack_profile: a stack profile file (JSON, the schema of
            ``data/stacks/*.json``) used instead of ``stack``.
    """

    global_batch: int
    seq_len: Optional[int] = None
    dtype: str = "bf16"
    fp8: bool = False
    grad_dtype: str = "bf16"
    flash_attention: bool = True
    dropout: bool = False
    stack: Optional[str] = None
    stack_profile: Optional[str] = None

    def __post_init__(self) -> None:
        _check_int("global_batch", self.global_batch, MAX_GLOBAL_BATCH)
        _check_int("seq_len", self.seq_len, MAX_SEQ_LEN, optional=True)
        if self.dtype not in ("bf16", "fp16"):
            raise ValueError(f"dtype must be bf16 or fp16, got {self.dtype!r} (fp8 GEMMs: fp8=True)")
        if self.grad_dtype not in ("bf16", "fp32"):
            raise ValueError(f"grad_dtype must be bf16 or fp32, got {self.grad_dtype!r}")
        if self.stack is not None and (
            not isinstance(self.stack, str) or not self.stack
            or any(c in self.stack for c in " \t,=\"'{}")
        ):
            raise ValueError(
                f"stack must be a stack name such as 'megatron' or 'torchtitan:eager', "
                f"got {self.stack!r}"
            )
        if self.stack is not None and self.stack_profile is not None:
            raise ValueError("give stack or stack_profile, not both")
        if self.stack_profile is not None and not isinstance(self.stack_profile, (str, Path)):
            raise ValueError(f"stack_profile must be a path, got {self.stack_profile!r}")

    def _options(self) -> List[str]:
        options = [f"global-batch={self.global_batch}"]
        if self.seq_len is not None:
            options.append(f"seq-len={self.seq_len}")
        options += [
            f"dtype={self.dtype}",
            f"fp8={'true' if self.fp8 else 'false'}",
            f"grad-dtype={self.grad_dtype}",
            f"flash-attention={'true' if self.flash_attention else 'false'}",
            f"dropout={'true' if self.dropout else 'false'}",
        ]
        if self.stack is not None:
            options.append(f"stack={self.stack}")
        if self.stack_profile is not None:
            options.append(
                f"stack-profile={quote_option(str(Path(self.stack_profile).absolute()))}"
            )
        return options
