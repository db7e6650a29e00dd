"""Models: a Hugging Face ``config.json`` (a file or its dict), a built one, or llm IR."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Type, TypeVar, Union

from ._tool import run_llm_opt

__all__ = ["Model", "ModelStats", "LayerStats", "ActivationBytes"]

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")


def _from_dict(cls: Type[T], d: Mapping[str, Any], **extra: Any) -> T:
    """Builds dataclass ``cls`` from the keys it declares (later llm-opt
    versions may add keys; they are ignored here, kept in ``raw``)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    kwargs = {k: v for k, v in d.items() if k in names}
    kwargs.update(extra)
    return cls(**kwargs)


@dataclass(frozen=True)
class ActivationBytes:
    """Activation bytes one layer keeps for backward, per micro-batch."""

    none: int
    selective: int
    full: int


@dataclass(frozen=True)
class LayerStats:
    """One transformer layer of :class:`ModelStats`."""

    index: int
    params: int
    params_active: int
    fwd_flops: int
    bwd_flops: int
    moe: bool
    activation_bytes: ActivationBytes


@dataclass(frozen=True)
class ModelStats:
    """``llm-opt --llm-stats=format=json``: parameters, FLOPs and bytes.

    FLOPs are per token for training, counted as Narayanan et al. 2021 do
    (``train_flops_method``); per-layer FLOPs are for one micro-batch of
    ``seq_len`` tokens.
    """

    name: str
    architecture: str
    layers: int
    seq_len: int
    micro_batch: int
    params_total: int
    params_active: int
    params_embedding: int
    params_lm_head: int
    params_other: int
    gemm_params_active: int
    train_flops_per_token: int
    attention_flops_per_token: int
    op_flops_per_token: int
    weight_bytes: int
    model_state_bytes: int
    activation_bytes_outside_layers: int
    moe_layers: int
    tied_embeddings: bool
    train_flops_method: str = ""
    per_layer: Tuple[LayerStats, ...] = ()
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ModelStats":
        layers = tuple(
            _from_dict(
                LayerStats,
                l,
                activation_bytes=_from_dict(ActivationBytes, l["activation_bytes"]),
            )
            for l in d.get("per_layer", [])
        )
        return _from_dict(cls, d, per_layer=layers, raw=dict(d))


def _name_of(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return name or "model"


class Model:
    """A transformer to plan for.

    Give a Hugging Face ``config.json`` (a path, or the dict it holds), an
    ``llm`` dialect module (a ``.mlir`` path), or build a config with
    :meth:`gpt`, :meth:`llama` or :meth:`mixtral`. The families ``llm-opt``
    imports are GPT-2, Llama 2/3/3.1, Mistral, Mixtral and Qwen2.

    The model's name (in reports and exports) is the file's stem, or ``name``.

    >>> Model("examples/models/llama3-70b.json").name
    'llama3-70b'
    >>> Model.llama(layers=2, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1000, name="tiny").name
    'tiny'
    """

    def __init__(
        self, source: Union[PathLike, Mapping[str, Any]], *, name: Optional[str] = None
    ) -> None:
        self._path: Optional[Path] = None
        self._config: Optional[Dict[str, Any]] = None
        if isinstance(source, Mapping):
            self._config = copy.deepcopy(dict(source))
            self._name = _name_of(name or str(self._config.get("_name_or_path") or "model"))
        elif isinstance(source, (str, os.PathLike)):
            self._path = Path(source)
            if not self._path.is_file():
                raise FileNotFoundError(f"no model file {str(self._path)!r}")
            self._name = _name_of(name) if name else self._path.stem
        else:
            raise TypeError(
                "a Model is a config.json path, a .mlir path or a config dict, got "
                f"{type(source).__name__}"
            )

    # --- construction ---------------------------------------------------
    @classmethod
    def from_hf(
        cls, source: Union[PathLike, Mapping[str, Any]], *, name: Optional[str] = None
    ) -> "Model":
        """A Hugging Face ``config.json``: its path or its contents as a dict."""
        return cls(source, name=name)

    @classmethod
    def gpt(
        cls,
        *,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        vocab: int = 50257,
        seq_len: int = 1024,
        ffn: Optional[int] = None,
        tied: bool = True,
        name: Optional[str] = None,
        **extra: Any,
    ) -> "Model":
        """A GPT-2 style model (learned positions, LayerNorm, GeLU MLP, biases).

        The defaults are GPT-2 small (124,439,808 parameters). ``seq_len`` is
        the position table's size; ``ffn`` defaults to ``4 * hidden``. Other
        ``GPT2Config`` fields can be given as keywords (``extra``).
        """
        config: Dict[str, Any] = {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "n_layer": layers,
            "n_embd": hidden,
            "n_head": heads,
            "n_positions": seq_len,
            "n_ctx": seq_len,
            "vocab_size": vocab,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": tied,
        }
        if ffn is not None:
            config["n_inner"] = ffn
        config.update(extra)
        return cls(config, name=name or f"gpt-{layers}l-{hidden}h")

    @classmethod
    def llama(
        cls,
        *,
        layers: int = 32,
        hidden: int = 4096,
        heads: int = 32,
        kv_heads: Optional[int] = 8,
        ffn: int = 14336,
        vocab: int = 128256,
        seq_len: int = 8192,
        rope_theta: float = 500000.0,
        tied: bool = False,
        name: Optional[str] = None,
        **extra: Any,
    ) -> "Model":
        """A Llama style model (rotary positions, RMSNorm, SwiGLU, GQA).

        The defaults are Llama 3 8B (8,030,261,248 parameters). ``kv_heads``
        ``None`` means multi-head attention; ``seq_len`` is
        ``max_position_embeddings``, the default training length. Other
        ``LlamaConfig`` fields (``head_dim``, ``rope_scaling``, ...) can be
        given as keywords.
        """
        config: Dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": layers,
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads if kv_heads is not None else heads,
            "intermediate_size": ffn,
            "vocab_size": vocab,
            "max_position_embeddings": seq_len,
            "rope_theta": rope_theta,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "tie_word_embeddings": tied,
        }
        config.update(extra)
        return cls(config, name=name or f"llama-{layers}l-{hidden}h")

    @classmethod
    def mixtral(
        cls,
        *,
        layers: int = 32,
        hidden: int = 4096,
        heads: int = 32,
        kv_heads: int = 8,
        ffn: int = 14336,
        experts: int = 8,
        top_k: int = 2,
        vocab: int = 32000,
        seq_len: int = 32768,
        rope_theta: float = 1e6,
        name: Optional[str] = None,
        **extra: Any,
    ) -> "Model":
        """A Mixtral style mixture of experts (a Llama with MoE MLPs).

        The defaults are Mixtral 8x7B (46,702,792,704 parameters,
        12,879,925,248 active per token). ``ffn`` is each expert's MLP width;
        each token goes to ``top_k`` of ``experts``.
        """
        config: Dict[str, Any] = {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "num_hidden_layers": layers,
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "intermediate_size": ffn,
            "num_local_experts": experts,
            "num_experts_per_tok": top_k,
            "vocab_size": vocab,
            "max_position_embeddings": seq_len,
            "rope_theta": rope_theta,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        }
        config.update(extra)
        return cls(config, name=name or f"mixtral-{experts}x-{layers}l-{hidden}h")

    # --- properties -------------------------------------------------------
    @property
    def name(self) -> str:
        """The name reports and exports use."""
        return self._name

    @property
    def is_mlir(self) -> bool:
        """True for a model given as ``llm`` IR (a ``.mlir`` file)."""
        return self._path is not None and self._path.suffix == ".mlir"

    @property
    def config(self) -> Optional[Dict[str, Any]]:
        """The Hugging Face config as a dict (a copy); ``None`` for llm IR."""
        if self._config is not None:
            return copy.deepcopy(self._config)
        if self.is_mlir:
            return None
        assert self._path is not None
        with open(self._path, encoding="utf-8") as f:
            return json.load(f)

    def __repr__(self) -> str:
        where = str(self._path) if self._path else "config dict"
        return f"Model({self._name!r}, {where})"

    # --- running llm-opt ---------------------------------------------------
    @contextlib.contextmanager
    def _file(self) -> Iterator[str]:
        """A path llm-opt can read, named so that the model gets its name."""
        if self._path is not None and (self.is_mlir or self._path.stem == self._name):
            yield str(self._path)
            return
        config = self.config
        with tempfile.TemporaryDirectory(prefix="llmopt-") as tmp:
            path = Path(tmp) / f"{self._name}.json"
            path.write_text(json.dumps(config, indent=1), encoding="utf-8")
            yield str(path)

    def stats(self, *, seq_len: Optional[int] = None, micro_batch: int = 1) -> ModelStats:
        """Parameters, training FLOPs per token and bytes (``--llm-stats``).

        Args:
            seq_len: sequence length (default: the model's training length).
            micro_batch: micro-batch size of the activation figures.
        """
        options = ["format=json", f"micro-batch={int(micro_batch)}"]
        if seq_len is not None:
            options.append(f"seq-len={int(seq_len)}")
        with self._file() as path:
            out = run_llm_opt([path, f"--llm-stats={' '.join(options)}"])
        return ModelStats.from_json(json.loads(out))

    def stats_table(self, *, seq_len: Optional[int] = None, micro_batch: int = 1) -> str:
        """The same figures as :meth:`stats`, as llm-opt's human table."""
        options = [f"micro-batch={int(micro_batch)}"]
        if seq_len is not None:
            options.append(f"seq-len={int(seq_len)}")
        with self._file() as path:
            return run_llm_opt([path, f"--llm-stats={' '.join(options)}"])

    def to_mlir(self, *, dtype: str = "bf16") -> str:
        """The model as ``llm`` dialect IR text.

        Args:
            dtype: element type of weights and activations when importing a
                config: ``bf16``, ``f16`` or ``f32``.
        """
        with self._file() as path:
            args: List[str] = [path]
            if not self.is_mlir:
                args.append(f"--hf-dtype={dtype}")
            return run_llm_opt(args)
