"""Finding and running the ``llm-opt`` binary, and its errors as exceptions.

The package has no compiled code: every question goes to ``llm-opt``, the
compiler's driver, and the answer comes back as its JSON report (or IR text).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional, Sequence

__all__ = [
    "LLMOptError",
    "LLMOptNotFoundError",
    "NoFeasiblePlanError",
    "find_llm_opt",
    "quote_option",
    "run_llm_opt",
]

#: Environment variable naming the ``llm-opt`` binary to use.
ENV_VAR = "LLMOPT_OPT"


class LLMOptError(RuntimeError):
    """``llm-opt`` failed; ``str(error)`` is the tool's own message.

    Attributes:
        message: what ``llm-opt`` printed on standard error (stripped).
        errors: the ``error:`` lines' messages, without their locations.
        notes: the ``note:`` lines' messages (for a search that found no plan:
            the candidate closest to fitting and the other reasons).
        returncode: the tool's exit status (``None`` when it did not run).
        command: the command line that failed.
    """

    def __init__(
        self,
        message: str,
        *,
        returncode: Optional[int] = None,
        command: Optional[Sequence[str]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode
        self.command: List[str] = list(command or [])
        self.errors = _messages(message, "error")
        self.notes = _messages(message, "note")


class LLMOptNotFoundError(LLMOptError):
    """No ``llm-opt`` binary was found (see :func:`find_llm_opt`)."""


class NoFeasiblePlanError(LLMOptError):
    """The search found no configuration that fits; ``notes`` say why."""


_DIAG = re.compile(r"^(?:.*?: )?(error|note|warning): (.*)$")


def _messages(text: str, kind: str) -> List[str]:
    out = []
    for line in text.splitlines():
        m = _DIAG.match(line)
        if m and m.group(1) == kind and m.group(2).strip():
            out.append(m.group(2))
    return out


def _clean(stderr: str) -> str:
    """The diagnostics of llm-opt's standard error without their file
    locations and source excerpts (the input file's first line and a caret):
    ``error: ...`` and ``note: ...`` lines, or the text as it is when it has
    none. A diagnostic with no message (MLIR's, after the option parser has
    said what is wrong on a line of its own) is left out."""
    lines, other = [], []
    for line in stderr.splitlines():
        m = _DIAG.match(line)
        if m is None:
            other.append(line)
        elif m.group(2).strip():
            lines.append(f"{m.group(1)}: {m.group(2)}")
    return "\n".join(lines) if lines else "\n".join(other).strip()


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_llm_opt() -> str:
    """Returns the path of the ``llm-opt`` binary to run.

    Looked up, in order: the ``LLMOPT_OPT`` environment variable, ``llm-opt``
    on ``PATH``, and a build directory next to this package's source
    (``<repo>/build*/bin/llm-opt``, the most recently built first).

    Raises:
        LLMOptNotFoundError: none of them is an executable file.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        if _executable(Path(env)):
            return env
        raise LLMOptNotFoundError(
            f"{ENV_VAR}={env!r} is not an executable file; point it at a built "
            "llm-opt (e.g. build/bin/llm-opt)"
        )
    on_path = shutil.which("llm-opt")
    if on_path:
        return on_path
    # <repo>/python-frontend/llmopt/_tool.py -> <repo>
    repo = Path(__file__).resolve().parent.parent.parent
    built = [p for p in repo.glob("build*/bin/llm-opt") if _executable(p)]
    if built:
        return str(max(built, key=lambda p: p.stat().st_mtime))
    raise LLMOptNotFoundError(
        "cannot find llm-opt: set LLMOPT_OPT=/path/to/llm-opt, put llm-opt on PATH, "
        f"or build it in the repository ({repo}/build, `ninja -C build llm-opt`)"
    )


def quote_option(value: str) -> str:
    """A pass option value as llm-opt's option parser reads it: values with
    spaces or braces (paths) are quoted."""
    if any(c in value for c in " \t{}'\""):
        if '"' in value:
            raise ValueError(f"cannot pass {value!r} to llm-opt: it contains a double quote")
        return f'"{value}"'
    return value


def run_llm_opt(args: Sequence[str], *, timeout: Optional[float] = None) -> str:
    """Runs ``llm-opt ARGS`` and returns its standard output.

    Raises:
        NoFeasiblePlanError: a search found no configuration that fits.
        LLMOptError: any other failure, with the tool's message.
    """
    command = [find_llm_opt(), *map(str, args)]
    env = dict(os.environ)
    env.pop("LLMOPT_PROGRESS", None)  # no progress line in captured output
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as e:
        raise LLMOptError(
            f"llm-opt did not finish within {timeout} s", command=command
        ) from e
    except OSError as e:
        raise LLMOptError(f"cannot run {command[0]}: {e}", command=command) from e
    if proc.returncode != 0:
        message = _clean(proc.stderr) or f"llm-opt exited with status {proc.returncode}"
        cls = NoFeasiblePlanError if "no valid configuration" in message else LLMOptError
        raise cls(message, returncode=proc.returncode, command=command)
    return proc.stdout
