"""Shared fixtures. The tests run llm-opt (LLMOPT_OPT, PATH, or ../build*/bin);
ctest sets LLMOPT_OPT and PYTHONPATH, so no pip install is needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import llmopt

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "models"


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session", autouse=True)
def llm_opt() -> str:
    """The binary under test; every test needs it."""
    return llmopt.find_llm_opt()


@pytest.fixture(scope="session")
def output_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tests leave files for people to look at (screenshots):
    LLMOPT_TEST_OUTPUT (ctest: <build>/python-frontend/test-output), or a
    temporary directory."""
    env = os.environ.get("LLMOPT_TEST_OUTPUT")
    if env:
        path = Path(env)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("output")


@pytest.fixture(scope="session")
def llama8b_16() -> llmopt.PlanResult:
    """Llama 3 8B on two DGX H100 nodes: a search with pipeline plans."""
    return llmopt.plan(
        llmopt.Model(EXAMPLES / "llama3-8b.json"),
        llmopt.Cluster.preset("dgx-h100", gpus=16),
        llmopt.Job(global_batch=64, seq_len=8192),
        top_k=5,
    )
