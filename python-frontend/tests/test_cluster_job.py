"""Clusters and jobs, and how they reach llm-opt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmopt
from llmopt import Cluster, Job, Model


def test_presets_and_overrides() -> None:
    c = Cluster.preset("dgx-h100", gpus=64)
    assert c.base == "dgx-h100" and c.gpus == 64 and c.overrides == ()
    d = c.with_(gpu={"hbm_gib": 96}, network={"nics_per_node": 4})
    assert dict(d.overrides) == {"gpu.hbm_gib": 96, "network.nics_per_node": 4}
    e = d.with_(gpus=128, **{"gpu.hbm_gib": 141})
    assert e.gpus == 128 and dict(e.overrides)["gpu.hbm_gib"] == 141
    assert c.overrides == ()  # frozen: with_ copies
    assert Cluster.preset("dgx-a100-80gb", intra_node={"kind": "pcie"}).overrides == (
        ("intra_node.kind", "pcie"),)
    assert set(llmopt.PRESETS) >= {"dgx-h100", "dgx-a100-40gb"}
    with pytest.raises(ValueError, match="unknown cluster preset"):
        Cluster.preset("dgx-z9000")
    with pytest.raises(ValueError):
        Cluster.preset("dgx-h100", gpus=0)
    with pytest.raises(ValueError):
        Cluster.preset("dgx-h100", gpu={"name": "a,b"})


def test_jobs_are_checked() -> None:
    assert Job(global_batch=8).dtype == "bf16"
    for bad in (dict(global_batch=0), dict(global_batch=8, seq_len=-1),
                dict(global_batch=8, dtype="fp8"), dict(global_batch=8, grad_dtype="fp16")):
        with pytest.raises(ValueError):
            Job(**bad)


GPT2 = "gpt2-124m.json"


def test_overrides_and_files_reach_the_report(examples: Path, tmp_path: Path) -> None:
    model = Model(examples / GPT2)
    job = Job(global_batch=64)
    r = llmopt.plan(model, Cluster.preset("dgx-h100", gpus=16).with_(gpu={"hbm_gib": 96}), job)
    assert r.cluster["gpu"]["hbm_gib"] == 96 and r.cluster["nodes"] == 2
    assert r.job["seq_len"] == 1024  # the model's
    # A file that starts from a preset, as a path and as a dict.
    spec = {"preset": "dgx-a100-40gb", "gpus_per_node": 4}
    path = tmp_path / "my cluster.json"  # a space in the path
    path.write_text(json.dumps(spec))
    for cluster in (Cluster.from_json(path, gpus=8), Cluster.from_json(spec, gpus=8)):
        r = llmopt.plan(model, cluster, job, top_k=1)
        assert r.cluster["gpus_per_node"] == 4 and r.cluster["nodes"] == 2
        assert r.cluster["gpu"]["name"] == "A100-SXM4-40GB"
    with pytest.raises(FileNotFoundError):
        Cluster.from_json(tmp_path / "none.json")


def test_job_options_change_the_prediction(examples: Path) -> None:
    model = Model(examples / GPT2)
    cluster = Cluster.preset("dgx-h100", gpus=8)
    base = llmopt.plan(model, cluster, Job(global_batch=64, seq_len=512), top_k=1)
    assert base.job == {"global_batch": 64, "seq_len": 512, "dtype": "bf16", "fp8": False,
                        "grad_bytes": 2, "flash_attention": True, "dropout": False}
    fp32 = llmopt.plan(model, cluster, Job(global_batch=64, seq_len=512, grad_dtype="fp32",
                                           dropout=True, flash_attention=False), top_k=1)
    assert fp32.job["grad_bytes"] == 4 and fp32.job["dropout"] is True
    assert fp32.job["flash_attention"] is False
    assert fp32.best.step_time_s > base.best.step_time_s
    fp8 = llmopt.plan(model, cluster, Job(global_batch=64, seq_len=512, fp8=True), top_k=1)
    assert fp8.job["fp8"] is True


def test_bad_overrides_are_llm_opts_errors(examples: Path) -> None:
    with pytest.raises(llmopt.LLMOptError, match="no field 'hbm' in the cluster schema"):
        llmopt.plan(Model(examples / GPT2), Cluster.preset("dgx-h100").with_(gpu={"hbm": 1}),
                    Job(global_batch=64))
    with pytest.raises(llmopt.LLMOptError, match="not a whole number of 8-GPU nodes"):
        llmopt.plan(Model(examples / GPT2), Cluster.preset("dgx-h100", gpus=12),
                    Job(global_batch=64))
