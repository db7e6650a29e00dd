"""PlanResult.lower: a plan directory llm-run can train."""

from __future__ import annotations

import hashlib
import json

import pytest

import llmopt


@pytest.fixture(scope="module")
def tiny_tp(examples):
    return llmopt.plan(
        llmopt.Model(examples / "byte-gpt2-tiny.json"),
        llmopt.Cluster.preset("dgx-h100", gpus=2),
        llmopt.Job(global_batch=8, seq_len=64),
        fix={"tp": 2},
        top_k=1,
    )


def test_lower_writes_the_chosen_plan(tiny_tp, tmp_path):
    out = tiny_tp.lower(tmp_path / "plan", dtype="f32", lr=0.003)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["world_size"] == 2
    assert plan["mesh"]["tp"] == 2
    assert all(p["dtype"] == "f32" for p in plan["params"])
    # The checksum file matches, and the Slurm script launches 2 tasks.
    digest = hashlib.sha256((out / "plan.json").read_bytes()).hexdigest()
    assert (out / "checksums.sha256").read_text() == f"{digest}  plan.json\n"
    assert "#SBATCH --ntasks-per-node=2" in (out / "run.slurm").read_text()
    adamw = [i for prog in plan["programs"] for i in prog["step_instructions"]
             if i.get("kernel") == "adamw"]
    assert adamw and all(i["params"]["lr"] == pytest.approx(0.003) for i in adamw)


def test_lower_names_what_is_not_lowered(examples, tmp_path):
    r = llmopt.plan(
        llmopt.Model(examples / "gpt2-124m.json"),
        llmopt.Cluster.preset("dgx-h100", gpus=2),
        llmopt.Job(global_batch=8, seq_len=128),
        fix={"cp": 2, "micro_batch": 1},
        top_k=1,
    )
    with pytest.raises(llmopt.LLMOptError, match="context and expert parallelism"):
        r.lower(tmp_path / "cp")
    assert not (tmp_path / "cp" / "plan.json").exists()


def test_lower_checks_its_arguments(tiny_tp, tmp_path):
    with pytest.raises(ValueError, match="lr must be positive"):
        tiny_tp.lower(tmp_path / "x", lr=0)
