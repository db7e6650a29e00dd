"""plan(), evaluate(), the result objects, exports and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmopt
from llmopt import Cluster, Job, Model


def test_plans_mirror_the_json_report(llama8b_16: llmopt.PlanResult) -> None:
    r = llama8b_16
    assert r.model.name == "llama3-8b" and r.model.layers == 32
    assert r.search.evaluated > r.search.feasible > 0
    assert len(r.plans) == 5 and r.best is r.plans[0]
    tie = r.report["ranking"]["tie_tolerance"]
    for a, b in zip(r.plans, r.plans[1:]):
        assert a.step_time_s <= b.step_time_s * (1 + tie)
    for p, raw in zip(r.plans, r.report["plans"]):
        assert p.config.gpus == 16
        assert p.config.describe() in r.table()
        assert p.step_time_s == raw["step_time_s"]
        assert p.peak_memory_bytes == raw["peak_memory_bytes"]
        assert p.peak_memory_bytes <= 80 * 2**30
        assert 0 < p.mfu < 1
        assert p.time_breakdown.total == pytest.approx(p.step_time_s, rel=1e-9)
        assert p.memory_breakdown.total == pytest.approx(
            p.memory_by_stage[p.peak_memory_stage].total)
        assert len(p.memory_by_stage) == len(p.time_by_stage) == p.config.pp
        assert sum(s.layers for s in p.memory_by_stage) == 32
        assert sum(p.config.stage_layers) == 32
        # The slowest stage's forward and backward, times the micro-batch
        # count, are the step's compute part (everything but bubble, data
        # parallel communication and the optimizer).
        t = p.time_breakdown
        per_mb = max(s.forward_s + s.backward_s for s in p.time_by_stage)
        busy = (t.compute + t.recompute + t.exposed_communication.total
                - t.exposed_communication.dp)
        assert per_mb * p.config.num_micro_batches == pytest.approx(busy, rel=1e-9)
        assert p.tokens_per_s == pytest.approx(64 * 8192 / p.step_time_s)
    assert "out_of_memory" in r.rejected
    oom = r.rejected["out_of_memory"]
    assert oom.count > 0 and "OOM by" in oom.example
    assert r.table().startswith("llama3-8b: 8.03 B parameters, 32 layers | 16 x H100")


def test_stack_and_equivalents(examples: Path) -> None:
    model = Model(examples / "llama3-8b.json")
    cluster = Cluster.preset("dgx-h100", gpus=32)
    # The default stack is Megatron-Core; naming it changes nothing.
    # (cp 1: Megatron places pipeline stages inside data parallelism only
    # without context parallelism in a dense model.)
    default = llmopt.plan(model, cluster, Job(global_batch=256, seq_len=8192),
                          fix="pp:4,cp:1", top_k=3)
    megatron = llmopt.plan(model, cluster, Job(global_batch=256, seq_len=8192, stack="megatron"),
                           fix="pp:4,cp:1", top_k=3)
    assert default.stack["name"] == megatron.stack["name"] == "megatron"
    assert [p.config for p in default.plans] == [p.config for p in megatron.plans]
    # Each row is its own plan; its other pipeline layouts come with it.
    same = default.report["ranking"]["equivalent_tolerance"]
    keys = set()
    for p in default.plans:
        key = (p.config.dp, p.config.cp, p.config.zero, p.config.recompute, p.config.micro_batch)
        assert key not in keys
        keys.add(key)
        assert p.equivalents, "each of these plans has its pp placement twin"
        for e in p.equivalents:
            assert e.config.placement != p.config.placement or e.config.vpp != p.config.vpp
            assert e.step_time_s <= p.step_time_s * (1 + same)
    # With fix=, the best plan of a free search against the recipe.
    versus = default.versus_free_search
    assert versus["best"]["config"]["pp"] == 1 and versus["gain"] > 0
    assert versus["by_category"][0]["confidence"] in ("high", "medium", "low")
    assert "faster" in versus["verdict"] and "your recipe (fix=)" in default.table()
    assert llmopt.plan(model, cluster, Job(global_batch=256, seq_len=8192), top_k=1
                       ).versus_free_search is None
    # A stack that cannot run pipeline parallelism refuses fix=pp:4, naming
    # itself and the stacks that can.
    with pytest.raises(llmopt.LLMOptError, match="stack llm-foundry"):
        llmopt.plan(model, cluster, Job(global_batch=256, seq_len=8192, stack="llm-foundry"),
                    fix="pp:4")
    titan = llmopt.plan(model, cluster, Job(global_batch=256, seq_len=8192,
                                            stack="torchtitan:eager"), top_k=1)
    assert titan.stack["name"] == "torchtitan" and titan.stack["variant"] == "eager"
    assert titan.best.step_time_s > default.best.step_time_s
    with pytest.raises(llmopt.LLMOptError, match="unknown stack 'nemo'"):
        llmopt.plan(model, cluster, Job(global_batch=256, stack="nemo"))
    with pytest.raises(ValueError, match="stack must be"):
        Job(global_batch=8, stack="megatron fix=tp:2")


def test_fix_as_string_dict_or_config(examples: Path) -> None:
    model = Model(examples / "llama3-8b.json")
    cluster = Cluster.preset("dgx-h100", gpus=16)
    job = Job(global_batch=64, seq_len=4096)
    a = llmopt.plan(model, cluster, job, fix="tp:2,pp:2,sp:1", top_k=3)
    b = llmopt.plan(model, cluster, job, fix={"tp": 2, "pp": 2, "sp": True}, top_k=3)
    assert [p.config for p in a.plans] == [p.config for p in b.plans]
    for p in a.plans:
        assert (p.config.tp, p.config.pp, p.config.sp) == (2, 2, True)
    c = llmopt.plan(model, cluster, job, fix=a.plans[1].config, top_k=3)
    assert len(c.plans) == 1 and c.best.config == a.plans[1].config
    with pytest.raises(ValueError, match="unknown key 'tq'"):
        llmopt.plan(model, cluster, job, fix={"tq": 2})
    with pytest.raises(llmopt.LLMOptError, match="fix: tp must be a positive integer"):
        llmopt.plan(model, cluster, job, fix="tp:0")
    with pytest.raises(ValueError):
        llmopt.plan(model, cluster, job, top_k=0)
    with pytest.raises(TypeError):
        llmopt.plan("llama", cluster, job)  # type: ignore[arg-type]


def test_evaluate_a_known_configuration(examples: Path) -> None:
    # Megatron's Llama-3 70B layout on 64 H100 (docs/planner.md).
    model = Model(examples / "llama3-70b.json")
    cluster = Cluster.preset("dgx-h100", gpus=64)
    job = Job(global_batch=512, seq_len=8192)
    given = {"dp": 2, "tp": 8, "pp": 4, "vpp": 5, "sp": True, "zero": 1,
             "recompute": "selective", "micro_batch": 1,
             "schedule": "interleaved-1f1b", "placement": "tp-cp-dp-pp"}
    p = llmopt.evaluate(model, cluster, job, given)
    assert p.config.describe() == "dp2 tp8 pp4 vpp5 sp zero1 rc:selective mb1x256 interleaved-1f1b"
    assert p.config.stage_layers == (20, 20, 20, 20)
    # A report's config dict is accepted as it is, and scores the same.
    again = llmopt.evaluate(model, cluster, job, json.loads(json.dumps(p.config.as_fix())))
    assert again == p
    # What does not fit says why, with the tool's numbers.
    with pytest.raises(llmopt.NoFeasiblePlanError) as e:
        llmopt.evaluate(model, cluster, job, {**given, "recompute": "none", "micro_batch": 4})
    assert "no valid configuration of llama3-70b fits 64 x H100-SXM5-80GB" in str(e.value)
    assert any(n.startswith("closest: OOM by") for n in e.value.notes)


def test_exports(llama8b_16: llmopt.PlanResult, examples: Path) -> None:
    r = llama8b_16  # the default stack: Megatron-Core
    c = r.best.config
    megatron = r.export("megatron")
    assert megatron.startswith(f"# Megatron-LM (main 2026-08 with Megatron-Core 0.16, "
                               f"pretrain_gpt.py arguments) for llama3-8b: {c.describe()}")
    assert f"--tensor-model-parallel-size {c.tp} --pipeline-model-parallel-size {c.pp}" in megatron
    # Any of the top plans, by rank or object.
    second = r.plans[1].config
    assert second.describe() in r.export("megatron", 1).splitlines()[0]
    assert r.export("megatron", r.plans[1]) == r.export("megatron", 1)
    # Other trainers take plans searched for them.
    with pytest.raises(llmopt.LLMOptError, match="plan with stack=deepspeed") as e:
        r.export("deepspeed")
    assert "\n^" not in str(e.value)
    model = Model(examples / "llama3-8b.json")
    cluster = Cluster.preset("dgx-h100", gpus=16)
    ds = llmopt.plan(model, cluster, Job(global_batch=64, seq_len=8192, stack="deepspeed"),
                     top_k=1)
    cfg = json.loads(ds.export("deepspeed"))
    assert cfg["train_micro_batch_size_per_gpu"] == ds.best.config.micro_batch
    assert cfg["zero_optimization"]["stage"] == ds.best.config.zero
    # torchtitan's llama3 flavors are the Llama 3.1 models (rope scaling).
    titan_plan = llmopt.plan(Model(examples / "llama3.1-8b.json"), cluster,
                             Job(global_batch=64, seq_len=8192, stack="torchtitan"), top_k=1)
    titan = titan_plan.export("torchtitan-0.2")
    assert "[parallelism]" in titan and 'flavor = "8B"' in titan
    if titan_plan.best.config.pp == 1:
        assert "--module llama3 --config llama3_8b" in titan_plan.export("torchtitan")
    with pytest.raises(ValueError, match="unknown export format"):
        r.export("nemo")


def test_result_from_a_report_alone(llama8b_16: llmopt.PlanResult) -> None:
    r = llmopt.PlanResult.from_json(llama8b_16.report)
    assert r.plans == llama8b_16.plans
    with pytest.raises(ValueError, match="run plan"):
        r.export("megatron")


def test_finding_llm_opt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, llm_opt: str) -> None:
    monkeypatch.setenv("LLMOPT_OPT", str(tmp_path / "nothing"))
    with pytest.raises(llmopt.LLMOptNotFoundError, match="LLMOPT_OPT"):
        llmopt.find_llm_opt()
    with pytest.raises(llmopt.LLMOptNotFoundError):
        Model.gpt().stats()
    # Then PATH.
    monkeypatch.delenv("LLMOPT_OPT")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "llm-opt").symlink_to(llm_opt)
    monkeypatch.setenv("PATH", str(bindir))
    assert llmopt.find_llm_opt() == str(bindir / "llm-opt")
    assert Model.gpt().stats().params_total == 124_439_808
    # Then the build directories next to the source tree, if any; otherwise
    # a message that says what to do.
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        found = llmopt.find_llm_opt()
    except llmopt.LLMOptNotFoundError as e:
        assert "set LLMOPT_OPT" in str(e)
    else:
        assert Path(found).parent.name == "bin" and Path(found).parent.parent.name.startswith("build")


def test_hybrid_sharding_and_partial_recomputation(examples: Path) -> None:
    model = Model(examples / "llama3-70b.json")
    cluster = Cluster.preset("dgx-h100", gpus=128)
    job = Job(global_batch=512, seq_len=8192)
    p = llmopt.evaluate(model, cluster, job, {"tp": 8, "pp": 4, "vpp": 5, "sp": True,
                                              "zero": 1, "shard": 2, "recompute": "full",
                                              "recompute_layers": 2, "micro_batch": 1})
    assert (p.config.shard, p.config.recompute_layers) == (2, 2)
    assert p.config.describe() == (
        "dp4 tp8 pp4 vpp5 sp zero1 shard2 rc:full(2/chunk) mb1x128 interleaved-1f1b")
    # The config round-trips through fix= and scores the same.
    again = llmopt.evaluate(model, cluster, job, p.config)
    assert (again.config, again.step_time_s) == (p.config, p.step_time_s)
    with pytest.raises(llmopt.LLMOptError, match="needs full recomputation"):
        llmopt.evaluate(model, cluster, job, {**p.config.as_fix(), "recompute": "selective"})
